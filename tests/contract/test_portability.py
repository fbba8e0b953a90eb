"""Export and import: a round trip between every pair of backends, and bad documents."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta

import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.engine.portability import export_owner, import_owner, renamed
from dream_memory_actor.errors import (
    BackendError,
    InvalidContent,
    InvalidImport,
    InvalidMetadata,
    InvalidOwnerId,
    OwnerNotEmpty,
)
from dream_memory_actor.models import (
    ChatMessage,
    MemoryPendingItem,
    MemorySnapshot,
    SearchHit,
    utcnow,
)
from dream_memory_actor.storage.ops import AddFact, AddPending, AddRule, RemoveFact, SetStatus
from tests.conftest import BACKENDS, DIM, make_stores

OWNER = "porter"


def vec(i: int) -> list[float]:
    return [1.0 if j == i % DIM else 0.1 for j in range(DIM)]


def engine_on(stores, **settings: object) -> MemoryEngine:  # type: ignore[no-untyped-def]
    return MemoryEngine(MemorySettings(backend="memory", **settings), stores.structured,
                        stores.vector)


async def fill(engine: MemoryEngine) -> None:
    s, v = engine.structured, engine.vector
    await s.add_rule(OWNER, "Reply in Chinese")
    await s.add_fact(OWNER, "The user is a Java developer 用户是 Java 开发者")
    await s.apply(OWNER, [SetStatus("project", "dream-saas"),
                          SetStatus("sprint", "42", ttl_s=3600)])
    waiting = MemoryPendingItem(kind="fact", content="Likes green tea", confidence=0.6,
                                evidence="I like green tea")
    decided = MemoryPendingItem(kind="rule", content="Look at security first", confidence=0.7)
    await s.apply(OWNER, [AddPending(waiting), AddPending(decided)])
    await s.decide(OWNER, decided.id, "confirmed", "reviewer", edited="Security first")
    # a corrected rule (two versions closed) and a status key's past values
    first = await s.add_rule(OWNER, "Keep answers short")
    second = await s.supersede(OWNER, first.id, "Keep answers under ten lines", by="alice",
                               reason="moved")
    await s.supersede(OWNER, second.id, "Keep answers under five lines", by="bob")
    await s.apply(OWNER, [SetStatus("project", "dream-saas-v2")])
    old = utcnow() - timedelta(days=40)
    await v.store(OWNER, "went live on Kubernetes with helm", embedding=vec(1),
                  metadata={"agent": "deploy"}, now=old)
    await v.store(OWNER, "上线了新的部署流程", embedding=vec(2), metadata={"lang": "zh"})
    await v.store(OWNER, "keyword only memory", context="said at the planning meeting")
    # a memory changed twice: its earlier versions come along too, with their context
    kept = await v.store(OWNER, "the sprint ends on Friday", embedding=vec(3),
                         context="3 June 2026")
    await v.update(OWNER, kept.memory.id, "the sprint ends on Thursday", embedding=vec(3))
    await v.supersede_memory(OWNER, kept.memory.id, "the sprint ends on Wednesday",
                             embedding=vec(4), by="alice", reason="moved")
    # two open conversations, one of them past its first window
    await s.append_messages(OWNER, "c1", [ChatMessage(role="user", content="我们周五上线"),
                                          ChatMessage(role="assistant", content="Friday, ok")],
                            window=10)
    await s.append_messages(OWNER, "web:2", [ChatMessage(role="user", content=f"m{i}")
                                             for i in range(5)], window=3)


def comparable(snap: MemorySnapshot) -> tuple[object, ...]:
    return (snap.rules, snap.facts, dict(snap.status), snap.pending)


def assert_same_hits(a: list[SearchHit], b: list[SearchHit]) -> None:
    """The same hits in the same order, with the same scores; PostgreSQL keeps embeddings
    in single precision, so a score may differ in its eighth digit (and rounding both
    to six digits would still tell two apart now and then)."""
    assert [h.memory.id for h in a] == [h.memory.id for h in b]
    for ha, hb in zip(a, b, strict=True):
        for x, y in ((ha.score, hb.score), (ha.vector_score, hb.vector_score),
                     (ha.keyword_score, hb.keyword_score), (ha.time_score, hb.time_score)):
            assert (x is None) == (y is None), (ha, hb)
            if x is not None and y is not None:
                assert abs(x - y) < 1e-5, (ha, hb)


def assert_same_document(first: list[str], again: list[str]) -> None:
    """The two documents hold the same records but for the header's time stamp; records
    of equal times may come in another order from another backend, and PostgreSQL keeps
    embeddings in single precision."""
    def records(lines: list[str]) -> list[dict[str, object]]:
        return sorted((json.loads(line) for line in lines[1:]), key=lambda r: json.dumps(
            {k: v for k, v in r.items() if k != "embedding"}, sort_keys=True))

    for a_rec, b_rec in zip(records(first), records(again), strict=True):
        ea, eb = a_rec.pop("embedding", None), b_rec.pop("embedding", None)
        assert a_rec == b_rec
        assert (ea is None) == (eb is None)
        if ea is not None:
            assert max(abs(x - y) for x, y in zip(ea, eb, strict=True)) < 1e-6  # type: ignore[arg-type]


@pytest.mark.parametrize("target", BACKENDS)
async def test_round_trip(stores, request: pytest.FixtureRequest, target: str) -> None:  # type: ignore[no-untyped-def]
    source = engine_on(stores)
    await fill(source)
    lines = await export_owner(source, OWNER)
    assert json.loads(lines[0])["format"] == "dream-memory-export"

    other = await make_stores(target, request)
    try:
        dest = engine_on(other)
        counts = await import_owner(dest, lines)
        assert counts == {"audit": 1, "fact": 1, "memory": 4, "memory_version": 2,
                          "pending": 1, "rule": 3, "status": 3, "status_change": 3,
                          "version": 2, "window": 2}
        for conversation, texts in (("c1", ["我们周五上线", "Friday, ok"]),
                                    ("web:2", ["m2", "m3", "m4"])):
            window = await dest.structured.load_window(OWNER, conversation)
            assert window == await source.structured.load_window(OWNER, conversation)
            assert [m.content for m in window] == texts
        wed = next(m for m in await dest.vector.list(OWNER) if "Wednesday" in m.content)
        assert ([x.content for x in await source.vector.memory_history(OWNER, wed.id)]
                == [x.content for x in await dest.vector.memory_history(OWNER, wed.id)]
                == ["the sprint ends on Friday", "the sprint ends on Thursday",
                    "the sprint ends on Wednesday"])
        assert ([x.context for x in await dest.vector.memory_history(OWNER, wed.id)]
                == ["3 June 2026"] * 3)
        a, b = await source.structured.load(OWNER), await dest.structured.load(OWNER)
        assert comparable(a) == comparable(b)
        assert await source.structured.audit(OWNER) == await dest.structured.audit(OWNER)
        # the history came along: the chain, who and why, the past status values
        latest = next(r for r in b.rules if r.content == "Keep answers under five lines")
        assert (await source.structured.history(OWNER, latest.id)
                == await dest.structured.history(OWNER, latest.id))
        assert [v.reason for v in (await dest.structured.history(OWNER, latest.id)).versions
                ] == ["moved", None, None]
        assert (await source.structured.status_history(OWNER, "project")
                == await dest.structured.status_history(OWNER, "project"))
        assert await source.vector.list(OWNER) == await dest.vector.list(OWNER)
        for query, emb in (("Kubernetes helm deploy", vec(1)), ("部署", vec(2)),
                           ("keyword memory", None)):
            now = utcnow()
            ha = await source.vector.search(OWNER, query, embedding=emb, now=now)
            hb = await dest.vector.search(OWNER, query, embedding=emb, now=now)
            assert_same_hits(ha, hb)
        # an import never writes over what is there
        with pytest.raises(OwnerNotEmpty):
            await import_owner(dest, lines)
        # and the imported owner exports the same document, but for its time stamp
        assert_same_document(lines, await export_owner(dest, OWNER))
    finally:
        await other.structured.close()
        await other.vector.close()


def doc(lines: list[str], i: int, **change: object) -> list[str]:
    rec = json.loads(lines[i])
    rec.update(change)
    return [*lines[:i], json.dumps(rec), *lines[i + 1:]]


async def test_bad_documents_write_nothing(stores) -> None:  # type: ignore[no-untyped-def]
    source = engine_on(stores)
    await fill(source)
    lines = await export_owner(source, OWNER)
    target = await make_stores("memory", None)  # type: ignore[arg-type]
    dest = engine_on(target)
    mem_line = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "memory")
    rule_line = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "rule")
    forged = json.loads(lines[mem_line])
    forged["item"]["owner"] = "victim"
    bad = {
        "unknown version": doc(lines, 0, version=99),
        "not an export": doc(lines, 0, format="something-else"),
        "forged owner in a record": doc(lines, rule_line, owner="victim"),
        "forged owner in a memory": [*lines[:mem_line], json.dumps(forged),
                                     *lines[mem_line + 1:]],
        "wrong dimension": doc(lines, mem_line, embedding=[0.5] * (DIM + 1)),
        "truncated": lines[:-2],
        "no end": lines[:-1],
        "unknown record": [*lines[:-1], json.dumps({"type": "x", "owner": OWNER}), lines[-1]],
        "not json": [lines[0], "{nope", *lines[1:]],
        "empty": [],
        "oversized content": doc(lines, rule_line, item={
            **json.loads(lines[rule_line])["item"], "content": "x" * 40_000}),
    }
    for name, document in bad.items():
        with pytest.raises(InvalidContent if name == "oversized content" else InvalidImport):
            await import_owner(dest, document)
        assert (await target.structured.load(OWNER)).version == 0, name
        assert await target.vector.count(OWNER) == 0, name
    with pytest.raises(InvalidOwnerId):
        await import_owner(dest, doc(lines, 0, owner="{bad}"))


async def test_import_re_embeds_for_another_model(stores) -> None:  # type: ignore[no-untyped-def]
    source = engine_on(stores)
    await fill(source)
    lines = doc(await export_owner(source, OWNER), 0, embedding_model="some-other-model")

    class Embedder:
        hits = misses = 0
        calibration = None
        dim = DIM

        async def embed(self, texts):  # type: ignore[no-untyped-def]
            return [vec(7) for _ in texts]

    target = await make_stores("memory", None)  # type: ignore[arg-type]
    dest = MemoryEngine(MemorySettings(backend="memory", embedding_model="mine"),
                        target.structured, target.vector, Embedder())  # type: ignore[arg-type]
    await import_owner(dest, lines)
    dumped = await target.vector.dump(OWNER)
    assert [e for _, e in dumped] == [vec(7)] * 4
    recorded = await target.vector.recorded_model()  # the vectors' model came with them
    assert recorded is not None and (recorded.model, recorded.dim) == ("mine", DIM)


@pytest.mark.parametrize("target", BACKENDS)
async def test_merged_memories_move_with_their_merge_records(
        stores, request: pytest.FixtureRequest, target: str) -> None:  # type: ignore[no-untyped-def]
    """Dedup merges most real owners' memories: a merge's records (merged_from, merged_at,
    merge_count) are the memory's data and come along, not refused as reserved keys."""
    source = engine_on(stores)
    v = source.vector
    await v.store(OWNER, "we deploy with helm", embedding=vec(5), metadata={"agent": "ops"})
    again = await v.store(OWNER, "We deploy with helm.", embedding=vec(5))
    twice = await v.store(OWNER, "We deploy with helm.", embedding=vec(5))
    assert again.merged and twice.merged
    merged = await v.get(OWNER, again.memory.id)
    assert merged.metadata["merge_count"] == 2 and merged.metadata["agent"] == "ops"
    lines = await export_owner(source, OWNER)
    other = await make_stores(target, request)
    try:
        dest = engine_on(other)
        counts = await import_owner(dest, lines)
        assert counts["memory"] == 1
        moved = await dest.vector.get(OWNER, merged.id)
        assert moved.content == merged.content and moved.metadata == merged.metadata
        assert ([x.content for x in await dest.vector.memory_history(OWNER, merged.id)]
                == [x.content for x in await v.memory_history(OWNER, merged.id)])
    finally:
        await other.structured.close()
        await other.vector.close()


@pytest.mark.parametrize("forged", [
    {"merge_count": 0}, {"merge_count": "2"}, {"merge_count": True},
    {"merged_at": "yesterday"}, {"merged_at": "2026-01-01T00:00:00"},
    {"merged_from": "not a list"}, {"merged_from": [1, 2]}, {"merged_from": ["x" * 70_000]}])
async def test_forged_merge_records_are_refused(forged: dict[str, object]) -> None:
    source = await MemoryEngine.open(MemorySettings(backend="memory"))
    dest = await MemoryEngine.open(MemorySettings(backend="memory"))
    try:
        await source.store(OWNER, "we deploy with helm")
        assert (await source.store(OWNER, "we deploy with helm")).merged
        doc = [json.loads(line) for line in await export_owner(source, OWNER)]
        mem = next(r for r in doc if r["type"] == "memory")
        mem["item"]["metadata"] = {**mem["item"]["metadata"], **forged}
        with pytest.raises(InvalidMetadata):
            await import_owner(dest, [json.dumps(r) for r in doc])
        assert await dest.vector.count(OWNER) == 0
    finally:
        await source.close()
        await dest.close()


@pytest.mark.parametrize("where", ["memory", "rule", "status"])
async def test_times_without_an_offset_are_refused(where: str) -> None:
    """A time without its zone would be read as local or compared with aware ones
    (a TypeError later, in every snapshot(as_of=...)): refused, nothing written."""
    source = await MemoryEngine.open(MemorySettings(backend="memory"))
    dest = await MemoryEngine.open(MemorySettings(backend="memory"))
    try:
        await source.store(OWNER, "we deploy with helm")
        await source.structured.add_rule(OWNER, "Reply in Chinese")
        await source.apply(OWNER, [SetStatus("sprint", "42", ttl_s=3600)])
        doc = [json.loads(line) for line in await export_owner(source, OWNER)]
        rec = next(r for r in doc if r["type"] == where)
        if where == "status":
            rec["expires_at"] = rec["expires_at"][:19]
        else:
            rec["item"]["created_at"] = rec["item"]["created_at"][:19]
        with pytest.raises(InvalidImport, match="UTC offset"):
            await import_owner(dest, [json.dumps(r) for r in doc])
        assert (await dest.snapshot(OWNER)).version == 0
        assert await dest.vector.count(OWNER) == 0
    finally:
        await source.close()
        await dest.close()


@pytest.mark.parametrize("case", ["two rules", "a rule and a fact", "two pending",
                                  "an open version"])
async def test_a_document_is_not_imported_as_less_than_it_says(case: str) -> None:
    source = await MemoryEngine.open(MemorySettings(backend="memory"))
    dest = await MemoryEngine.open(MemorySettings(backend="memory"))
    try:
        s = source.structured
        rule = await s.add_rule(OWNER, "Reply in Chinese")
        await s.add_fact(OWNER, "The user is a Java developer")
        await s.apply(OWNER, [AddPending(MemoryPendingItem(kind="fact", content="Likes tea",
                                                           confidence=0.6))])
        await s.supersede(OWNER, rule.id, "Reply in English", by="alice")
        doc = [json.loads(line) for line in await export_owner(source, OWNER)]
        first = {t: next(r for r in doc if r["type"] == t)
                 for t in ("rule", "fact", "pending", "version")}
        if case == "two rules":
            doc.insert(2, {**first["rule"], "item": {**first["rule"]["item"],
                                                     "content": "Reply in French"}})
        elif case == "a rule and a fact":
            first["fact"]["item"]["id"] = first["rule"]["item"]["id"]
        elif case == "two pending":
            doc.insert(2, json.loads(json.dumps(first["pending"])))
        else:
            first["version"]["item"]["valid_to"] = None
        end = doc[-1]
        end["counts"] = dict(Counter(r["type"] for r in doc[1:-1]))
        with pytest.raises(InvalidImport):
            await import_owner(dest, [json.dumps(r) for r in doc])
        assert (await dest.snapshot(OWNER)).version == 0
    finally:
        await source.close()
        await dest.close()


async def test_a_keyword_only_store_imports_a_document_with_vectors(stores) -> None:  # type: ignore[no-untyped-def]
    source = engine_on(stores)
    await source.vector.store(OWNER, "went live on Kubernetes with helm", embedding=vec(1))
    lines = await export_owner(source, OWNER)
    assert json.loads(lines[1]).get("embedding") is not None
    dest = await MemoryEngine.open(MemorySettings(backend="memory"))  # no embedder, no dim
    try:
        assert (await import_owner(dest, lines))["memory"] == 1
        hits = await dest.search(OWNER, "kubernetes helm")
        assert [h.memory.content for h in hits] == ["went live on Kubernetes with helm"]
        assert hits[0].vector_score is None
    finally:
        await dest.close()


async def test_import_as_another_owner_beside_the_original(stores) -> None:  # type: ignore[no-untyped-def]
    """``import --as``: the copy lands in the same store as its original (memory ids are
    unique in a store, so its memories get new ones) with everything the original has."""
    source = engine_on(stores)
    await fill(source)
    lines = await export_owner(source, OWNER)
    copy = "porter-copy"
    counts = await import_owner(source, renamed(lines, copy))
    assert counts["memory"] == 4 and counts["rule"] == 3
    a, b = await source.structured.load(OWNER), await source.structured.load(copy)
    assert comparable(a) == comparable(b)
    copied = await source.structured.audit(copy)
    assert copied == await source.structured.audit(OWNER) != []
    mine = await source.vector.list(OWNER)
    theirs = await source.vector.list(copy)
    assert [m.content for m in mine] == [m.content for m in theirs]
    assert not {m.id for m in mine} & {m.id for m in theirs}
    assert {m.owner for m in theirs} == {copy}
    wed = next(m for m in theirs if "Wednesday" in m.content)
    assert [x.content for x in await source.vector.memory_history(copy, wed.id)] == [
        "the sprint ends on Friday", "the sprint ends on Thursday",
        "the sprint ends on Wednesday"]
    assert (await source.structured.load_window(copy, "web:2")
            == await source.structured.load_window(OWNER, "web:2") != ())
    hits = await source.vector.search(copy, "Kubernetes helm deploy", embedding=vec(1))
    assert hits and all(h.memory.owner == copy for h in hits)
    # the original is untouched, and the copy is refused as a copy twice
    assert await source.vector.list(OWNER) == mine
    with pytest.raises(OwnerNotEmpty):
        await import_owner(source, renamed(lines, copy))
    with pytest.raises(InvalidOwnerId):
        renamed(lines, "")
    with pytest.raises(InvalidImport, match="line 2 is not JSON"):
        renamed([lines[0], "{not json"], copy)


async def test_audit_entries_of_an_id_another_owner_holds_are_imported(stores) -> None:  # type: ignore[no-untyped-def]
    """An audit id is its owner's own, as rule, fact and pending ids are: an imported
    entry whose id another owner of the store holds is written, not dropped while the
    import counts it."""
    source = engine_on(stores)
    await fill(source)
    lines = await export_owner(source, OWNER)
    audit_ids = {json.loads(line)["item"]["id"] for line in lines
                 if json.loads(line)["type"] == "audit"}
    copy = renamed(lines, "porter-twin")  # keeps the audit ids: they are an owner's own
    counts = await import_owner(source, copy)
    assert counts["audit"] == 1
    assert [e.id for e in await source.structured.audit("porter-twin")] == list(audit_ids)
    assert [e.id for e in await source.structured.audit(OWNER)] == list(audit_ids)


def _as_owner_keeping_ids(lines: list[str], owner: str) -> list[str]:
    """The document as another owner's, every id kept (so its memory ids clash with the
    original's in one store, where memory ids are unique)."""
    out = []
    for line in lines:
        rec = json.loads(line)
        if "owner" in rec:
            rec["owner"] = owner
        if isinstance(rec.get("item"), dict) and "owner" in rec["item"]:
            rec["item"]["owner"] = owner
        out.append(json.dumps(rec, ensure_ascii=False))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_import_refused_at_its_memories_writes_nothing(
        backend: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """The memories are written last: when the store refuses them (PostgreSQL: ids
    another owner holds; elsewhere a refusal of the store's), the rules, facts, status,
    pending items, audit and windows written before them are not kept either, and a
    retry finds the owner empty."""
    stores = await make_stores(backend, request)
    try:
        source = engine_on(stores)
        await fill(source)
        lines = await export_owner(source, OWNER)
        clash = _as_owner_keeping_ids(lines, "twin")

        async def refused(*args: object, **kw: object) -> int:
            raise BackendError("the store refused the memories")

        with monkeypatch.context() as m:
            if backend != "postgres":  # memory ids are an owner's own there: refuse by hand
                m.setattr(type(stores.vector), "restore", refused)  # whichever store writes
            with pytest.raises(BackendError):  # the memory ids are taken
                await import_owner(source, clash)
        snap = await stores.structured.load("twin")
        assert (snap.version, snap.rules, snap.facts, dict(snap.status), snap.pending) == (
            0, (), (), {}, ())
        assert await stores.structured.audit("twin") == []
        assert await stores.structured.load_window("twin", "c1") == ()
        assert await stores.vector.count("twin") == 0
        counts = await import_owner(source, renamed(lines, "twin"))  # the retry
        assert counts["memory"] == 4
    finally:
        await stores.structured.close()
        await stores.vector.close()


@pytest.mark.parametrize("backend", ["memory", "postgres"])
async def test_two_imports_of_one_owner_take_turns(backend: str,
                                                  request: pytest.FixtureRequest) -> None:
    """Two concurrent imports of one document: one writes it, the other finds the owner
    not empty; the status history is the document's, not doubled."""
    import asyncio

    stores = await make_stores(backend, request)
    try:
        source = engine_on(stores)
        await fill(source)
        lines = renamed(await export_owner(source, OWNER), "twin")
        load = stores.structured.load

        async def slow_load(owner: str, **kw: object) -> object:  # both read it empty first
            snap = await load(owner, **kw)
            await asyncio.sleep(0.2)
            return snap

        count = stores.vector.count

        async def slow_count(owner: str) -> int:
            n = await count(owner)
            await asyncio.sleep(0.2)
            return n

        stores.structured.load = slow_load  # type: ignore[method-assign]
        stores.vector.count = slow_count  # type: ignore[method-assign]
        done = await asyncio.gather(import_owner(source, lines), import_owner(source, lines),
                                    return_exceptions=True)
        assert sum(isinstance(d, dict) for d in done) == 1
        assert sum(isinstance(d, OwnerNotEmpty) for d in done) == 1
        assert (await stores.structured.status_history("twin", "project")
                == await stores.structured.status_history(OWNER, "project"))
        assert await stores.vector.count("twin") == 4
    finally:
        await stores.structured.close()
        await stores.vector.close()


def _window_record(lines: list[str]) -> int:
    return next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "window")


@pytest.mark.parametrize(("case", "change"), [
    ("no conversation", {"conversation": None}),
    ("a bad conversation id", {"conversation": "not an id!"}),
    ("no messages", {"messages": None}),
    ("no message", {"messages": []}),
    ("messages not a list", {"messages": {"role": "user", "content": "hi"}}),
    ("more than a window holds", {"messages": [{"role": "user", "content": "x"}] * 10_001}),
    ("a message without a role", {"messages": [{"content": "hi"}]}),
    ("a message of an unknown role", {"messages": [{"role": "robot", "content": "hi"}]}),
    ("a message not an object", {"messages": ["hi"]}),
    ("a time without an offset",
     {"messages": [{"role": "user", "content": "hi", "created_at": "2026-01-01T00:00:00"}]}),
    ("a second window of one conversation", None),
])
async def test_a_malformed_window_record_is_refused_by_its_line(
        case: str, change: dict[str, object] | None) -> None:
    source = await MemoryEngine.open(MemorySettings(backend="memory"))
    dest = await MemoryEngine.open(MemorySettings(backend="memory"))
    try:
        await source.structured.add_rule(OWNER, "Reply in Chinese")
        await source.structured.append_messages(
            OWNER, "c1", [ChatMessage(role="user", content="hi")], window=5)
        lines = await export_owner(source, OWNER)
        i = _window_record(lines)
        if change is None:
            rec = json.loads(lines[i])
            document = [*lines[:i + 1], lines[i], *lines[i + 1:-1],
                        json.dumps({"type": "end", "counts": {
                            **json.loads(lines[-1])["counts"], "window": 2}})]
            with pytest.raises(InvalidImport, match="two window records"):
                await import_owner(dest, document)
            assert rec["conversation"] == "c1"
        else:
            with pytest.raises(InvalidImport, match=f"line {i + 1}: "):
                await import_owner(dest, doc(lines, i, **change))
        assert (await dest.snapshot(OWNER)).version == 0
        assert await dest.structured.load_window(OWNER, "c1") == ()
    finally:
        await source.close()
        await dest.close()


async def test_an_oversized_message_is_refused_before_anything_is_written() -> None:
    source = await MemoryEngine.open(MemorySettings(backend="memory"))
    dest = await MemoryEngine.open(MemorySettings(backend="memory"))
    try:
        await source.structured.add_rule(OWNER, "Reply in Chinese")
        await source.structured.append_messages(
            OWNER, "c1", [ChatMessage(role="user", content="hi")], window=5)
        lines = await export_owner(source, OWNER)
        i = _window_record(lines)
        big = [{"role": "user", "content": "x" * 40_000,
                "created_at": utcnow().isoformat()}]
        with pytest.raises(InvalidContent):
            await import_owner(dest, doc(lines, i, messages=big))
        assert (await dest.snapshot(OWNER)).version == 0
        assert await dest.structured.load_window(OWNER, "c1") == ()
    finally:
        await source.close()
        await dest.close()


async def test_a_document_without_windows_imports(stores) -> None:  # type: ignore[no-untyped-def]
    """Documents written before chat windows were exported have no window record."""
    source = engine_on(stores)
    await fill(source)
    lines = [line for line in await export_owner(source, OWNER)
             if json.loads(line)["type"] != "window"]
    end = json.loads(lines[-1])
    del end["counts"]["window"]
    lines[-1] = json.dumps(end)
    target = await make_stores("memory", None)  # type: ignore[arg-type]
    counts = await import_owner(engine_on(target), lines)
    assert "window" not in counts and counts["memory"] == 4
    assert await target.structured.load_window(OWNER, "c1") == ()


async def test_an_owner_with_an_open_conversation_is_not_empty(stores) -> None:  # type: ignore[no-untyped-def]
    """An import would write its windows beside the owner's: refused as for any data."""
    source = await MemoryEngine.open(MemorySettings(backend="memory"))
    try:
        await source.structured.add_rule(OWNER, "Reply in Chinese")
        await source.structured.append_messages(
            OWNER, "c1", [ChatMessage(role="user", content="from the document")], window=5)
        lines = await export_owner(source, OWNER)
    finally:
        await source.close()
    await stores.structured.append_messages(
        OWNER, "c1", [ChatMessage(role="user", content="already here")], window=5)
    with pytest.raises(OwnerNotEmpty):
        await import_owner(engine_on(stores), lines)
    assert [m.content for m in await stores.structured.load_window(OWNER, "c1")] == [
        "already here"]
    assert (await stores.structured.load(OWNER)).version == 0


@pytest.mark.parametrize("target", BACKENDS)
async def test_histories_that_need_more_than_a_chain_replayed(
        request: pytest.FixtureRequest, target: str) -> None:
    """What an import rebuilds besides plain chains: a status value that lapsed, a rule
    closed in favour of a rule that was there before, a fact whose successor was
    deleted since. Each stays in the history, at its times."""
    source = await MemoryEngine.open(MemorySettings(backend="memory"))
    other = await make_stores(target, request)
    try:
        s = source.structured
        t0 = utcnow() - timedelta(days=1)

        def at(minutes: float) -> datetime:
            return t0 + timedelta(minutes=minutes)

        await s.apply(OWNER, [SetStatus("sprint", "41", ttl_s=60)], now=at(0))
        english, chinese = AddRule("Reply in English"), AddRule("Reply in Chinese")
        await s.apply(OWNER, [english], now=at(1))
        await s.apply(OWNER, [chinese], now=at(2))
        await s.supersede(OWNER, english.id, "Reply in Chinese", by="alice", now=at(3))
        java = AddFact("The user is a Java developer")
        await s.apply(OWNER, [java], now=at(4))
        go = await s.supersede(OWNER, java.id, "The user is a Go developer", by="bob",
                               reason="moved", now=at(5))
        await s.apply(OWNER, [RemoveFact(go.id)], now=at(6))

        dest = engine_on(other)
        await import_owner(dest, await export_owner(source, OWNER))
        d = dest.structured
        assert await d.status_history(OWNER, "sprint") == await s.status_history(
            OWNER, "sprint") != []
        for item in (english.id, chinese.id, java.id):
            assert await d.history(OWNER, item) == await s.history(OWNER, item)
        for minutes in (0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 7):
            a, b = await s.load_as_of(OWNER, at(minutes)), await d.load_as_of(OWNER, at(minutes))
            assert comparable(a) == comparable(b), minutes
        assert comparable(await s.load(OWNER)) == comparable(await d.load(OWNER))
        chinese_now = (await d.load(OWNER)).rules[0]
        assert (chinese_now.id, chinese_now.created_at) == (chinese.id, at(2))
    finally:
        await source.close()
        await other.structured.close()
        await other.vector.close()


@pytest.mark.parametrize("backend", ["redis", "redis-cluster"])
async def test_a_redis_import_shows_nothing_until_it_moves_in(
        backend: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """On Redis an import is written apart and moved in at once: half way through, the
    owner shows nothing of it (a process killed then leaves the owner as it was), and
    what a dead import left staged goes when the owner's next import starts."""
    import asyncio

    stores = await make_stores(backend, request)
    try:
        source = engine_on(stores)
        await fill(source)
        lines = renamed(await export_owner(source, OWNER), "twin")
        client, prefix = stores.structured._r, stores.structured._keys.prefix
        dead = f"{prefix}~unit~dead:{{twin}}:l1"  # what a killed import left
        await client.set(dead, "{}")
        halfway, resume = asyncio.Event(), asyncio.Event()
        restore = type(stores.vector).restore

        async def paused(self: object, *args: object, **kw: object) -> int:
            halfway.set()
            await resume.wait()
            return await restore(self, *args, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(type(stores.vector), "restore", paused)
        task = asyncio.create_task(import_owner(source, lines))
        await halfway.wait()  # rules, facts, status, pending, audit, windows: written
        snap = await stores.structured.load("twin")
        assert (snap.version, snap.rules, dict(snap.status)) == (0, (), {})
        assert await stores.structured.audit("twin") == []
        assert await stores.structured.conversations("twin") == []
        assert await client.exists(dead) == 0
        resume.set()
        counts = await task
        assert counts["memory"] == 4 and (await stores.structured.load("twin")).version > 0
        assert await stores.vector.count("twin") == 4
    finally:
        await stores.structured.close()
        await stores.vector.close()
