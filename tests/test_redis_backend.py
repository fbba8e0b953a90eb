"""Redis-specific behaviour: server-side expiry, hash-tagged keys, the two flavours,
a restart under load, caches across processes, and the same rankings as the
in-memory reference backend."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pytest

from dream_memory_actor.errors import BackendUnavailable, MissingDependency
from dream_memory_actor.models import MemoryPendingItem, utcnow
from dream_memory_actor.storage.ops import AddPending, SetStatus
from tests.conftest import DIM, Stores, fresh_schema, make_stores
from tests.support.redis_servers import (
    RedisServer,
    drop_prefix,
    plain_server,
    stack_server,
    started,
)

REDIS_FLAVOURS = ["redis", "redis-stack"]


def vec(*head: float) -> list[float]:
    return (list(head) + [0.0] * DIM)[:DIM]


@asynccontextmanager
async def opened(backend: str, request: pytest.FixtureRequest,
                 dim: int | None = DIM) -> AsyncIterator[Stores]:
    s = await make_stores(backend, request, dim)
    try:
        yield s
    finally:
        await s.structured.close()
        await s.vector.close()


def url_of(backend: str, request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("redis_url" if backend == "redis" else "redis_stack_url"))


def prefix_of(s: Stores) -> str:
    return str(s.vector._keys.prefix)  # type: ignore[attr-defined]


async def all_keys(s: Stores) -> list[str]:
    client: Any = s.vector._r  # type: ignore[attr-defined]
    return sorted([k.decode() async for k in client.scan_iter(match=f"{prefix_of(s)}:*")])


# -- expiry ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", REDIS_FLAVOURS)
async def test_ttl_entries_disappear_from_the_server(backend: str,
                                                     request: pytest.FixtureRequest) -> None:
    async with opened(backend, request) as s:
        now = utcnow()
        item = MemoryPendingItem(kind="fact", content="uses helm", confidence=0.7,
                                 expires_at=now + timedelta(seconds=0.4))
        await s.structured.apply("alice", [SetStatus("mood", "tired", ttl_s=0.4),
                                           SetStatus("team", "core"), AddPending(item)],
                                 now=now)
        client: Any = s.vector._r  # type: ignore[attr-defined]
        p = prefix_of(s)
        st, pd = f"{p}:{{alice}}:l1:st:mood", f"{p}:{{alice}}:l1:pd:{item.id}"
        assert 0 < await client.pttl(st) <= 400 and 0 < await client.pttl(pd) <= 400
        assert await client.pttl(f"{p}:{{alice}}:l1:st:team") == -1  # no TTL
        await asyncio.sleep(0.6)
        assert await client.exists(st, pd) == 0
        assert not [k for k in await all_keys(s) if k.endswith((":st:mood", item.id))]
        snap = await s.structured.load("alice")
        assert dict(snap.status) == {"team": "core"} and snap.pending == ()


# -- keys -----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", REDIS_FLAVOURS)
async def test_every_key_of_an_owner_carries_its_hash_tag(
        backend: str, request: pytest.FixtureRequest) -> None:
    from redis.crc import key_slot

    owners = ["alice", "team.x-1@y:z"]
    async with opened(backend, request) as s:
        for o in owners:
            await s.structured.add_rule(o, "reply in Chinese")
            await s.structured.set_status(o, "mood", "ok", ttl_s=600)
            await s.structured.apply(o, [AddPending(MemoryPendingItem(
                kind="fact", content="x", confidence=0.5))], op_id="op-1")
            await s.vector.store(o, "went live", embedding=vec(1), op_id="op-2")
            await s.vector.store(o, "keyword only memory")
        keys = await all_keys(s)
        assert keys
        for o in owners:
            mine = [k for k in keys if f"{{{o}}}" in k]
            assert len({key_slot(k.encode()) for k in mine}) == 1
            assert any(":l1:st:" in k for k in mine) and any(":m:" in k for k in mine)
        assert all(any(k.startswith(f"{prefix_of(s)}:{{{o}}}:") for o in owners) for k in keys)


# -- flavours ---------------------------------------------------------------------------


@pytest.mark.parametrize(("backend", "module"), [("redis", False), ("redis-stack", True)])
async def test_flavour_is_detected(backend: str, module: bool,
                                   request: pytest.FixtureRequest) -> None:
    async with opened(backend, request) as s:
        assert s.vector.search_module is module  # type: ignore[attr-defined]
        client: Any = s.vector._r  # type: ignore[attr-defined]
        if module:
            names = {n.decode() for n in await client.execute_command("FT._LIST")}
            assert s.vector._keys.index(DIM) in names  # type: ignore[attr-defined]


def test_tag_values_are_escaped() -> None:
    from dream_memory_actor.storage.redis.search_module import escape_tag, owner_filter

    assert escape_tag("team.x-1@y:z") == r"team\.x\-1\@y\:z"
    assert owner_filter(["a_b", "c d"]) == r"@owner:{a_b | c\ d}"


def test_missing_driver_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from dream_memory_actor.storage.redis.common import import_redis

    monkeypatch.setitem(sys.modules, "redis", None)
    with pytest.raises(MissingDependency, match="dream-memory-actor\\[redis\\]"):
        import_redis()


@pytest.mark.parametrize("backend", REDIS_FLAVOURS)
async def test_close_twice(backend: str, request: pytest.FixtureRequest) -> None:
    s = await make_stores(backend, request)
    for _ in range(2):
        await s.structured.close()
        await s.vector.close()


# -- an owner's state lost by the server ----------------------------------------------------


@pytest.mark.parametrize("backend", REDIS_FLAVOURS)
async def test_state_made_again_has_a_new_epoch(backend: str,
                                                request: pytest.FixtureRequest) -> None:
    async with opened(backend, request) as s:
        st = s.structured
        assert (await st.load("alice")).epoch == ""  # nothing written yet
        first = [await st.set_status("alice", "k", str(i)) for i in range(3)]
        epoch = first[0].epoch
        assert epoch and all(f.epoch == epoch for f in first)
        assert (await st.load("alice")).epoch == epoch
        drop_prefix(url_of(backend, request), prefix_of(s))  # as a restart without data
        lost = await st.load("alice")
        assert (lost.version, lost.epoch, dict(lost.status)) == (0, "", {})
        again = await st.set_status("alice", "k", "new")
        assert again.version == 1 and again.epoch not in ("", epoch)
        assert again.reached(first[-1].version, epoch)  # newer than anything of the old state
        assert not first[-1].reached(again.version, again.epoch)


# -- caches across processes ------------------------------------------------------------------


@pytest.mark.parametrize("backend", REDIS_FLAVOURS)
async def test_a_write_elsewhere_invalidates_the_row_cache(
        backend: str, request: pytest.FixtureRequest) -> None:
    from dream_memory_actor.config import MemorySettings
    from dream_memory_actor.storage import open_stores

    url, prefix = url_of(backend, request), fresh_schema()
    request.addfinalizer(lambda: drop_prefix(url, prefix))
    settings = MemorySettings(backend="redis", redis_url=url, redis_prefix=prefix)
    (sa, a), (sb, b) = [await open_stores(settings, DIM) for _ in range(2)]  # two "processes"
    try:
        await a.setup()
        await b.setup()
        first = await a.store("alice", "deploys with helm", embedding=vec(1, 0))
        assert [h.memory.id for h in await b.search("alice", "helm", embedding=vec(1))] == [
            first.memory.id]
        second = await a.store("alice", "deploys with argo", embedding=vec(0, 1))
        hits = await b.search("alice", "deploys", embedding=vec(0, 1))
        assert [h.memory.id for h in hits] == [second.memory.id, first.memory.id]
        merged = await b.store("alice", "Deploys with helm!", embedding=vec(1, 0.01))
        assert merged.merged and merged.memory.id == first.memory.id
        assert (await a.get("alice", first.memory.id)).content == "Deploys with helm!"
        assert await a.delete("alice", second.memory.id)
        assert [h.memory.id for h in await b.search("alice", "deploys")] == [first.memory.id]
        assert [m.id for m in await b.list("alice")] == [first.memory.id]
    finally:
        for store in (sa, a, sb, b):
            await store.close()


# -- document frequencies ----------------------------------------------------------------


@pytest.mark.parametrize("backend", REDIS_FLAVOURS)
async def test_memories_written_before_the_counts_existed_are_counted(
        backend: str, request: pytest.FixtureRequest) -> None:
    """An owner whose frequency hash is missing (memories stored by an earlier version)
    is counted from its rows by a search, and in full by its next write or delete."""
    texts = ["Caroline went to the group", "Melanie went hiking", "Caroline painted",
             "went shopping"]
    async with opened(backend, request, dim=None) as s:
        v: Any = s.vector
        ids = [(await v.store("alice", t)).memory.id for t in texts]
        want = [(h.memory.id, h.keyword_score) for h in await v.search("alice", "caroline went")]
        client = v._r
        key = v._keys.l2_df("alice")
        counted = await client.hgetall(key)
        assert counted[b"n"] == b"4" and counted[b"t:went"] == b"3"
        await client.delete(key)  # as an earlier version left it
        got = [(h.memory.id, h.keyword_score) for h in await v.search("alice", "caroline went")]
        assert got == want
        assert not await client.exists(key)  # a search writes nothing
        await v.store("alice", "Caroline went sailing")
        assert await client.hgetall(key) == {**counted, b"n": b"5", b"t:went": b"4",
                                             b"t:caroline": b"3", b"t:sailing": b"1"}
        await client.delete(key)
        assert await v.delete("alice", ids[0])
        after = await client.hgetall(key)
        assert after[b"n"] == b"4" and after[b"t:caroline"] == b"2" and b"t:group" not in after


@pytest.mark.parametrize("backend", REDIS_FLAVOURS)
async def test_counts_without_the_sorted_terms_are_rebuilt(
        backend: str, request: pytest.FixtureRequest) -> None:
    """A frequency hash from before the sorted set of terms (no ``lex`` field) is not
    trusted for prefix counts: a search counts from the rows, the next write rebuilds
    both."""
    async with opened(backend, request, dim=None) as s:
        v: Any = s.vector
        for t in ["deploy the app", "deployment done", "created the plan"]:
            await v.store("alice", t)
        want = [(h.memory.id, h.keyword_score) for h in await v.search("alice", "deploy plan")]
        client = v._r
        key, terms_key = v._keys.l2_df("alice"), v._keys.l2_terms("alice")
        assert await client.zrange(terms_key, 0, -1) == sorted(
            [b"app", b"created", b"deploy", b"deployment", b"done", b"plan"])
        await client.hdel(key, "lex")  # as an earlier version left it
        await client.delete(terms_key)
        got = [(h.memory.id, h.keyword_score) for h in await v.search("alice", "deploy plan")]
        assert got == want
        assert (await v._term_stats(["alice"], ["deploy"])).df == {"deploy": 2}
        await v.store("alice", "deploying again")
        assert await client.hget(key, "lex") == b"1"
        assert b"deploying" in await client.zrange(terms_key, 0, -1)
        assert (await v._term_stats(["alice"], ["deploy"])).df == {"deploy": 3}


async def test_frequency_hashes_stay_out_of_the_search_index(
        request: pytest.FixtureRequest) -> None:
    """Terms that are names of indexed fields ("owner", "vec", "folded") are prefixed, so
    the frequency hash never becomes a document with a malformed vector."""
    async with opened("redis-stack", request) as s:
        v: Any = s.vector
        await v.store("alice", "the owner folded the vec", embedding=vec(1))
        info = await v._r.execute_command("FT.INFO", v._keys.index(DIM))
        fields = (dict(info) if isinstance(info, dict)
                  else {info[i]: info[i + 1] for i in range(0, len(info) - 1, 2)})
        failures = fields.get(b"hash_indexing_failures", fields.get("hash_indexing_failures"))
        assert int(failures) == 0
        hits = await v.search("alice", "owner", embedding=vec(1))
        assert [h.memory.content for h in hits] == ["the owner folded the vec"]


# -- a restart under load ----------------------------------------------------------------


@pytest.mark.parametrize("flavour", REDIS_FLAVOURS)
async def test_restart_during_a_load(flavour: str) -> None:
    """Kill the server while writers run: typed errors while it is down, then work again."""
    from dream_memory_actor.config import MemorySettings
    from dream_memory_actor.storage import open_stores

    server: RedisServer = plain_server() if flavour == "redis" else stack_server()
    with started(server):
        settings = MemorySettings(backend="redis", redis_url=server.url,
                                  redis_prefix=fresh_schema())
        structured, vector = await open_stores(settings, DIM)
        await structured.setup()
        await vector.setup()
        ok: list[float] = []  # when a whole round of operations succeeded
        applied: list[float] = []  # when a status write succeeded
        down: list[BaseException] = []
        unexpected: list[BaseException] = []
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        async def writer(w: int) -> None:
            for n in range(2000):  # bounded; normally stopped long before
                if stop.is_set():
                    return
                try:
                    await structured.set_status("alice", f"w{w}", str(n))
                    applied.append(loop.time())
                    await structured.load("alice")
                    await vector.store("alice", f"memory {w} {n}", embedding=vec(1, w, n % 7))
                    await vector.search("alice", "memory", embedding=vec(1))
                    ok.append(loop.time())
                except BackendUnavailable as exc:
                    down.append(exc)
                except Exception as exc:  # collected and asserted below
                    unexpected.append(exc)
                await asyncio.sleep(0.005)

        async def until(cond: Any, timeout: float = 20.0) -> None:
            deadline = loop.time() + timeout
            while not cond():
                assert loop.time() < deadline, "timed out waiting for the workload"
                await asyncio.sleep(0.01)

        tasks = [asyncio.create_task(writer(w)) for w in range(2)]
        try:
            await until(lambda: len(ok) >= 5)
            server.stop()
            killed = loop.time()
            await until(lambda: len(down) >= 4)
            server.start()  # same port, empty: no persistence
            back = loop.time()
            await until(lambda: sum(t > back for t in ok) >= 5)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
        try:
            assert unexpected == []
            assert all(isinstance(e.__cause__, Exception) for e in down)
            # nothing worked while the server was down (start() blocks the loop until PING)
            assert not [t for t in ok + applied if killed + 0.25 < t < back]
            # it came back empty: the version counts the writes since, no cached row survives
            snap = await structured.load("alice")
            assert snap.version == sum(t > back for t in applied)
            hits = await vector.search("alice", "memory", embedding=vec(1), limit=1000)
            assert len(hits) == await vector.count("alice")
            for h in hits[:20]:
                assert (await vector.get("alice", h.memory.id)).content == h.memory.content
        finally:
            await structured.close()
            await vector.close()


# -- the same rankings as the reference backend ---------------------------------------------

WORDS = ["deploy", "helm", "kubernetes", "garden", "tea", "review", "security", "snake_case",
         "50%", "系统部署", "绿茶", "don't", "Straße", "ÉCOLE"]
OWNERS = ["alice", "team.x-1@y:z", "bob"]


async def _fill(s: Stores, base: datetime) -> None:
    rng = np.random.default_rng(7)
    for i in range(45):
        words = " ".join(str(w) for w in rng.choice(WORDS, size=3))
        emb = [float(x) for x in rng.normal(size=DIM)]
        owner = OWNERS[i % 3]
        when = base + timedelta(hours=i)
        embedding = None if i % 11 == 5 else emb
        await s.vector.store(owner, f"note {i}: {words}", embedding=embedding,
                             metadata={"i": i}, now=when)
        if i % 9 == 0:  # a near-duplicate: merged into the one just stored
            near = [x + 0.01 for x in emb]
            await s.vector.store(owner, f"note {i} again: {words}", embedding=near,
                                 metadata={"again": True}, now=when + timedelta(minutes=1))


QUERIES: list[tuple[list[str], str, int | None, dict[str, int]]] = [
    (["alice"], "deploy helm", 1, {}),
    (["alice", "team.x-1@y:z"], "部署 security", 2, {}),
    (["alice", "team.x-1@y:z", "bob"], "don't snake_case", None, {}),
    (["team.x-1@y:z"], "strasse école tea", 3, {"limit": 5}),
    (["bob", "alice"], "kubernetes review", 4, {"vector_k": 5, "keyword_k": 5, "limit": 8}),
    (["alice", "bob"], "50% 绿茶", None, {"limit": 20}),
    (["alice", "team.x-1@y:z", "bob"], "garden", 5, {"limit": 50}),
]


async def _results(s: Stores, now: datetime) -> list[list[tuple[Any, ...]]]:
    out = []
    for owners, query, seed, opts in QUERIES:
        emb = None
        if seed is not None:
            emb = [float(x) for x in np.random.default_rng(seed).normal(size=DIM)]
        hits = await s.vector.search(owners, query, embedding=emb, now=now,
                                     limit=opts.get("limit", 10),
                                     vector_k=opts.get("vector_k", 100),
                                     keyword_k=opts.get("keyword_k", 100))
        out.append([(h.memory.owner, h.memory.content, h.score, h.vector_score,
                     h.keyword_score, h.time_score, h.mode) for h in hits])
    return out


async def test_same_top_k_and_scores_as_the_reference_backend(
        request: pytest.FixtureRequest) -> None:
    base = utcnow() - timedelta(days=30)
    now = utcnow()
    results: dict[str, list[list[tuple[Any, ...]]]] = {}
    listing: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for backend in ["memory", "postgres", *REDIS_FLAVOURS]:
        async with opened(backend, request) as s:
            await _fill(s, base)
            results[backend] = await _results(s, now)
            listing[backend] = [(m.content, {k: v for k, v in m.metadata.items()
                                             if k != "merged_at"})
                                for o in OWNERS for m in await s.vector.list(o, limit=100)]
    ref = results["memory"]
    assert all(ref) and any(len(r) >= 5 for r in ref)
    for backend in ["postgres", *REDIS_FLAVOURS]:
        assert listing[backend] == listing["memory"], backend
        for q, (got, want) in enumerate(zip(results[backend], ref, strict=True)):
            assert [h[:2] for h in got] == [h[:2] for h in want], (backend, QUERIES[q])
            for g, w in zip(got, want, strict=True):
                assert g[2] == pytest.approx(w[2], abs=1e-6), (backend, QUERIES[q], g, w)
                for a, b in zip(g[3:6], w[3:6], strict=True):
                    assert (a is None) == (b is None)
                    assert a is None or a == pytest.approx(b, abs=1e-6)
                assert g[6] == w[6]


async def test_stack_search_works_over_resp2(request: pytest.FixtureRequest) -> None:
    """redis-py 8 speaks RESP3 by default, older ones RESP2: FT.SEARCH replies differ."""
    from dream_memory_actor.config import MemorySettings
    from dream_memory_actor.storage import open_stores

    url, prefix = str(request.getfixturevalue("redis_stack_url")), fresh_schema()
    request.addfinalizer(lambda: drop_prefix(url, prefix))
    for protocol in (2, 3):
        sep = "&" if "?" in url else "?"
        settings = MemorySettings(backend="redis", redis_url=f"{url}{sep}protocol={protocol}",
                                  redis_prefix=prefix)
        structured, vector = await open_stores(settings, DIM)
        try:
            await vector.setup()
            owner = f"p{protocol}"
            await vector.store(owner, f"protocol {protocol}", embedding=vec(1, protocol))
            hits = await vector.search(owner, "zzz", embedding=vec(1, protocol), vector_k=1,
                                       limit=1)
            assert [h.memory.content for h in hits] == [f"protocol {protocol}"]
        finally:
            await structured.close()
            await vector.close()
