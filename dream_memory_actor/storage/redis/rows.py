"""An owner's rows as the Redis backend fetches them (``owner_rows`` keeps them).

Dedup needs the owner's vectors and content hashes; keyword candidates need the
places words start in the owner's folded texts (``text.word_starts``: a term is found
where a word starts, which no server-side tokenizer reproduces exactly), and the rows
by those words (``word_index.WordIndex``). They are kept per owner, tagged with the
owner's version token: the token changes on every write from any process, and each
read checks it in the same round trip that would fetch the rows (:data:`FETCH_ROWS`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from ...models import VectorMemory
from ..owner_rows import OwnerRows, Row, RowCache, make_row
from .common import text

__all__ = ["FETCH_ROWS", "resolve", "row_from_fields", "vec_bytes"]

#: Fetch the owner's rows unless the caller's token is current. KEYS: version token,
#: id set. ARGV: the caller's token, the key prefix of the owner's memory hashes.
#: Reply: {token, 0} when current, else {token, 1, id1, fields1, id2, fields2, ...}.
FETCH_ROWS = """#!lua flags=no-writes
local v = redis.call('GET', KEYS[1]) or ''
if v == ARGV[1] then return {v, 0} end
local ids = redis.call('ZRANGE', KEYS[2], 0, -1)
local out = {v, 1}
for _, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('HMGET', ARGV[2] .. id,
                             'content', 'meta', 'created', 'updated', 'vec', 'ctx')
end
return out
"""


def vec_bytes(embedding: Sequence[float] | np.ndarray) -> bytes:
    """How an embedding is stored: little-endian float64 (exact, and RediSearch's FLOAT64)."""
    return np.asarray(embedding, dtype="<f8").tobytes()


def row_from_fields(owner: str, memory_id: str, fields: Sequence[Any]) -> Row | None:
    """A row from the HMGET reply of :data:`FETCH_ROWS` (content, meta, created, updated,
    vec, ctx); ``None`` if the hash is gone."""
    content, meta, created, updated = (text(f) for f in fields[:4])
    if content is None or created is None or updated is None:
        return None
    raw_vec = fields[4]
    vec = None if raw_vec is None else np.frombuffer(raw_vec, dtype="<f8").astype(np.float64)
    mem = VectorMemory.model_construct(
        id=memory_id, owner=owner, content=content,
        metadata=json.loads(meta) if meta else {},
        context=text(fields[5]),
        created_at=datetime.fromisoformat(created),
        updated_at=datetime.fromisoformat(updated),
        has_embedding=vec is not None,
    )
    return make_row(mem, vec)


def resolve(cache: RowCache, owner: str, reply: Sequence[Any]) -> OwnerRows | None:
    """The owner's rows after a :data:`FETCH_ROWS` reply, cached or freshly read;
    ``None`` if the reply said "current" but ``cache`` no longer holds that token."""
    if int(reply[1]) == 0:
        return cache.current(owner, text(reply[0]) or "")
    found = (row_from_fields(owner, text(reply[i]) or "", reply[i + 1])
             for i in range(2, len(reply), 2))
    rows = OwnerRows(text(reply[0]) or "", [r for r in found if r is not None])
    cache.put(owner, rows)
    return rows
