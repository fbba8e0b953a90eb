"""The RediSearch side of L2: detection, the index, and KNN filtered by owner.

When the server has the search module (Redis Stack, Redis 8), every memory hash
is indexed by one index per key prefix::

    owner   TAG                          (filter: @owner:{alice|team})
    folded  TEXT NOSTEM                  (the case-folded content, for FT.SEARCH by hand)
    vec     VECTOR HNSW FLOAT64 COSINE   (only when the store has a dimension)

Vector candidates come from an HNSW KNN query restricted to the owners; their
similarity is then computed exactly from the stored float64 vectors, so scores
equal those of the other backends. Keyword candidates do *not* use the text
index: RediSearch tokenizes (on ``'``, ``-``, ``.`` ...), so "don't" or a CJK
bigram spanning two tokens would be missed, while the keyword signal is defined
as a substring of ``text.fold(content)``. They come from an exact scan of the
owner's folded texts instead (see ``rows``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .common import Keys, text

_TAG_SPECIAL = re.compile(r"([^A-Za-z0-9_])")


def escape_tag(value: str) -> str:
    """A value safe inside ``@field:{...}``: every character but letters, digits and ``_``
    is backslash-escaped (``.``, ``-``, ``:``, ``@``, spaces, braces, ``|`` ...)."""
    return _TAG_SPECIAL.sub(r"\\\1", value)


def owner_filter(owners: Sequence[str]) -> str:
    return "@owner:{" + " | ".join(escape_tag(o) for o in owners) + "}"


def is_missing_index(exc: BaseException) -> bool:
    msg = str(exc).lower()
    return "no such index" in msg or "unknown index name" in msg


async def has_search_module(client: Any) -> bool:
    """True when the server answers ``FT._LIST`` (the search module is loaded)."""
    from redis.exceptions import ResponseError

    try:
        await client.execute_command("FT._LIST")
    except ResponseError as exc:
        msg = str(exc).lower()
        if "unknown command" in msg or "noperm" in msg:  # absent, or not for this user
            return False
        raise
    return True


async def create_index(client: Any, keys: Keys, dim: int | None) -> None:
    """Create the prefix's index if it does not exist (safe to repeat, and to race)."""
    from redis.exceptions import ResponseError

    schema: list[Any] = ["owner", "TAG", "folded", "TEXT", "NOSTEM"]
    if dim is not None:
        schema += ["vec", "VECTOR", "HNSW", "10", "TYPE", "FLOAT64", "DIM", str(dim),
                   "DISTANCE_METRIC", "COSINE", "M", "16", "EF_CONSTRUCTION", "200"]
    try:
        await client.execute_command(
            "FT.CREATE", keys.index(dim), "ON", "HASH", "PREFIX", "1", f"{keys.prefix}:{{",
            "SCHEMA", *schema,
        )
    except ResponseError as exc:
        if "already exists" not in str(exc).lower():
            raise
        return
    await wait_indexed(client, keys.index(dim))


async def wait_indexed(client: Any, index: str, timeout: float = 60.0) -> None:
    """Wait while a new index scans the memories that existed before it (a server that
    restarted empty and got data before the index was back, or a plain Redis that
    gained the module): until then KNN would miss them."""
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        info = await client.execute_command("FT.INFO", index)
        if isinstance(info, dict):
            fields = {text(k): v for k, v in info.items()}
        else:
            fields = {text(info[i]): info[i + 1] for i in range(0, len(info) - 1, 2)}
        raw = fields.get("indexing", 0)
        flag = raw.decode() if isinstance(raw, bytes) else str(raw)
        if flag in ("0", "0.0") or loop.time() > deadline:
            return
        await asyncio.sleep(0.02)


def knn_command(keys: Keys, dim: int | None, owners: Sequence[str], query_vec: bytes,
                k: int, ef_runtime: int) -> list[Any]:
    """The FT.SEARCH arguments for the ``k`` nearest memories of ``owners``."""
    query = f"({owner_filter(owners)})=>[KNN $k @vec $q EF_RUNTIME $ef AS knn_dist]"
    return [
        "FT.SEARCH", keys.index(dim), query,
        "PARAMS", "6", "k", str(k), "q", query_vec, "ef", str(max(ef_runtime, k)),
        "SORTBY", "knn_dist", "ASC", "NOCONTENT", "LIMIT", "0", str(k), "DIALECT", "2",
    ]


def knn_ids(keys: Keys, owners: Sequence[str], reply: Any) -> list[tuple[str, str]]:
    """``(owner, memory id)`` of each hit of a :func:`knn_command` reply, nearest first."""
    prefixes = [(keys.l2_doc_prefix(o), o) for o in owners]
    if isinstance(reply, dict):  # RESP3: {"results": [{"id": key, ...}, ...], ...}
        results = reply.get(b"results") or reply.get("results") or []
        raw_keys = [r.get(b"id", r.get("id")) for r in results]
    else:  # RESP2 with NOCONTENT: [total, key1, key2, ...]
        raw_keys = list(reply[1:])
    out: list[tuple[str, str]] = []
    for raw in raw_keys:
        key = text(raw) or ""
        for prefix, owner in prefixes:
            if key.startswith(prefix):
                out.append((owner, key[len(prefix):]))
                break
    return out
