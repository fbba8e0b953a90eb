"""Export and import as a property: an owner made by a generated sequence of writes
moves between any two backends without loss.

Hypothesis writes an owner on one backend: memories stored again in other words or
with another value (dedup merges them, or supersedes the one a new value updates),
updated, superseded and deleted; rules and facts added, corrected through the
pending queue, superseded and removed; pending items queued, confirmed (edited or
not) and rejected; status values set with and without TTLs, some lapsed, and
deleted; chat windows appended to and closed; Latin and CJK text, metadata. Each
write is made at its own time in the past, so the import has to keep the times.
The owner is exported, imported into a fresh owner of another store, and every read
is compared: snapshots (now and as of past times), memories, each memory's and each
rule's or fact's history, each status key's history, the audit trail, the chat
windows, searches (same hits in the same order, same scores) and the document the
imported owner exports in turn.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from dream_memory_actor.engine.portability import export_owner, import_owner
from dream_memory_actor.errors import DreamMemoryError
from dream_memory_actor.models import (
    ChatMessage,
    MemoryFact,
    MemoryPendingItem,
    MemoryRule,
    SearchHit,
    utcnow,
)
from dream_memory_actor.storage.ops import (
    AddFact,
    AddPending,
    AddRule,
    DeleteStatus,
    RemoveFact,
    RemoveRule,
    SetStatus,
)
from tests.conftest import BACKENDS, Stores, make_stores
from tests.contract.test_portability import (
    assert_same_document,
    assert_same_hits,
    comparable,
    engine_on,
    vec,
)

#: Generated owners per pair of backends: each is a few dozen writes, exported once and
#: compared read by read; 25 pairs keep the file within seconds. To look further, run
#: more (DREAM_MEMORY_TEST_ROUNDTRIP_EXAMPLES), other ones (..._SEED), and have a
#: failing one shrunk to its smallest (..._SHRINK=1; that takes minutes).
EXAMPLES = int(os.environ.get("DREAM_MEMORY_TEST_ROUNDTRIP_EXAMPLES", "3"))
SEED = int(os.environ.get("DREAM_MEMORY_TEST_ROUNDTRIP_SEED", "0"))
PHASES = [Phase.explicit, Phase.generate] + (
    [Phase.shrink] if os.environ.get("DREAM_MEMORY_TEST_ROUNDTRIP_SHRINK") else [])

# -- what an owner is made of ----------------------------------------------------------

#: Memory texts: (template, its values); one subject and template with another value is
#: an update of the same fact, another subject is another fact.
TEMPLATES = [
    ("{s} deploys on {v}", ["Monday", "Wednesday", "Friday"]),
    ("{s} listens on port {v}", ["8080", "9090", "443"]),
    ("{s}在{v}上线", ["周一", "周三", "周五"]),
    ("{s}使用{v}数据库", ["PostgreSQL", "Redis", "MySQL"]),
]
SUBJECTS = [["the staging server", "the billing service", "our mobile app"],
            ["the staging server", "the billing service", "our mobile app"],
            ["测试服务器", "支付服务", "移动应用"],
            ["测试服务器", "支付服务", "移动应用"]]
#: Rule and fact texts: a rule or fact with another value is queued as its correction.
L1_TEXTS = ["Reply in {v}", "The user is a {v} developer", "用户是{v}开发者",
            "Keep answers under {v} lines"]
L1_VALUES = ["Chinese", "English", "Java", "Go", "Python", "five", "ten"]
WORDS = ["deploy", "helm", "sprint", "Friday", "部署", "上线", "会议", "测试", "ok", "la fête"]
CONVERSATIONS = ["c1", "chat-2", "session:3@web"]
STATUS_KEYS = ["project", "sprint", "mood"]
DECIDERS = ["alice", "bob", "审核员"]

#: Seconds a status lives: none, a minute (lapsed before the export), three days.
TTLS = [None, 60.0, 3 * 86400.0]


def _text(template: int, subject: int, value: int, loud: bool) -> str:
    pattern, values = TEMPLATES[template]
    text = pattern.format(s=SUBJECTS[template][subject], v=values[value])
    return text.upper() + "." if loud else text  # the same text, case and stop aside


def _revalued(text: str, value: int) -> str:
    """``text`` with its template's value replaced by the template's ``value``-th one."""
    for _, values in TEMPLATES:
        old = next((v for v in values if v.lower() in text.lower()), None)
        if old is not None:
            start = text.lower().index(old.lower())
            return text[:start] + values[value] + text[start + len(old):]
    return text


texts = st.builds(_text, st.integers(0, 3), st.integers(0, 2), st.integers(0, 2),
                  st.booleans())
embedding_keys = st.one_of(st.none(), st.integers(0, 3))
metadata = st.one_of(
    st.none(),
    st.fixed_dictionaries({"agent": st.sampled_from(["deploy", "ops", "客服"])},
                          optional={"n": st.integers(-3, 3),
                                    "tags": st.lists(st.sampled_from(WORDS), max_size=2),
                                    "nested": st.just({"lang": "zh", "ok": True})}))
l1_texts = st.builds(lambda t, v: L1_TEXTS[t].format(v=L1_VALUES[v]), st.integers(0, 3),
                     st.integers(0, 6))
free_text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)
refs = st.integers(0, 10)
reasons = st.one_of(st.none(), st.sampled_from(["moved", "改了", "typo"]))

steps = st.lists(st.one_of(
    st.tuples(st.just("store"), texts, embedding_keys, metadata),
    st.tuples(st.just("store"), texts, embedding_keys, metadata),
    st.tuples(st.just("again"), refs, st.booleans(), st.integers(0, 2), metadata),
    st.tuples(st.just("update"), refs, texts, embedding_keys, metadata),
    st.tuples(st.just("supersede_memory"), refs, texts, embedding_keys,
              st.sampled_from(DECIDERS), reasons),
    st.tuples(st.just("delete_memory"), refs),
    st.tuples(st.sampled_from(["rule", "fact"]), l1_texts),
    st.tuples(st.just("supersede"), refs, l1_texts, st.sampled_from(DECIDERS), reasons),
    st.tuples(st.just("remove_item"), refs),
    st.tuples(st.just("pending"), st.sampled_from(["rule", "fact", "status", "memory"]),
              l1_texts, st.sampled_from([None, "lapsed", "later"]),
              st.one_of(st.none(), free_text)),
    st.tuples(st.just("decide"), refs, st.just("confirmed"), st.sampled_from(DECIDERS),
              st.one_of(st.none(), l1_texts)),
    st.tuples(st.just("decide"), refs, st.just("rejected"), st.sampled_from(DECIDERS),
              st.none()),
    st.tuples(st.just("correct"), refs, st.integers(0, 6)),
    st.tuples(st.just("status"), st.sampled_from(STATUS_KEYS), free_text,
              st.sampled_from(TTLS)),
    st.tuples(st.just("delete_status"), st.sampled_from(STATUS_KEYS)),
    st.tuples(st.just("append"), st.sampled_from(CONVERSATIONS),
              st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool"]), free_text),
                       min_size=1, max_size=4), st.integers(1, 6)),
    st.tuples(st.just("end"), st.sampled_from(CONVERSATIONS)),
), min_size=12, max_size=40)


def embedding(key: int | None) -> list[float] | None:
    return None if key is None else vec(key)


class Played:
    """What a played sequence left to look up: every id and key it touched, and the
    times it wrote at."""

    def __init__(self) -> None:
        self.memories: list[str] = []  # every memory id ever current, in order
        self.items: list[str] = []  # every rule and fact id ever current
        self.times: list[datetime] = []
        self.contents: list[str] = []  # what searches look for


async def play(stores: Stores, owner: str, script: list[tuple[Any, ...]], start: datetime
               ) -> Played:
    """Write ``script`` into ``owner``, each write one minute after the one before."""
    s, v = stores.structured, stores.vector
    out = Played()

    async def live_memories() -> list[str]:
        return [m.id for m in reversed(await v.list(owner, limit=1000))]

    for i, step in enumerate(script):
        at = start + timedelta(minutes=i, microseconds=i)
        out.times.append(at)
        kind = step[0]
        snap = await s.load(owner, now=at)
        items = [*snap.rules, *snap.facts]
        try:
            if kind == "store":
                _, text, key, meta = step
                out.contents.append(text)
                await v.store(owner, text, embedding=embedding(key), metadata=meta, now=at)
            elif kind == "again":  # an earlier memory's text again: a duplicate, or with
                _, ref, loud, value, meta = step  # another value, an update of it
                dumped = await v.dump(owner)
                if not dumped:
                    continue
                mem, emb = dumped[ref % len(dumped)]
                text = _revalued(mem.content, value)
                text = text.upper() if loud else text
                await v.store(owner, text, embedding=emb, metadata=meta, now=at)
            elif kind == "update":
                _, ref, text, key, meta = step
                live = await live_memories()
                if live:
                    await v.update(owner, live[ref % len(live)], text, metadata=meta,
                                   embedding=embedding(key), now=at)
            elif kind == "supersede_memory":
                _, ref, text, key, by, reason = step
                live = await live_memories()
                if live:
                    await v.supersede_memory(owner, live[ref % len(live)], text, by=by,
                                             reason=reason, embedding=embedding(key), now=at)
            elif kind == "delete_memory":
                live = await live_memories()
                if live:
                    await v.delete(owner, live[step[1] % len(live)])
            elif kind in ("rule", "fact"):
                op = (AddRule if kind == "rule" else AddFact)(step[1], review_updates=True)
                await s.apply(owner, [op], now=at)
            elif kind == "correct":  # another value of a rule or fact: queued as its
                if items:  # correction, for a person to confirm
                    item = items[step[1] % len(items)]
                    value = L1_VALUES[step[2]]
                    text = next((t.format(v=value) for t in L1_TEXTS
                                 if any(t.format(v=x) == item.content for x in L1_VALUES)),
                                item.content + " " + value)
                    add = AddRule if item in snap.rules else AddFact
                    await s.apply(owner, [add(text, review_updates=True)], now=at)
            elif kind == "supersede":
                _, ref, text, by, reason = step
                if items:
                    await s.supersede(owner, items[ref % len(items)].id, text, by=by,
                                      reason=reason, now=at)
            elif kind == "remove_item":
                if items:
                    item = items[step[1] % len(items)]
                    remove = RemoveRule if item in snap.rules else RemoveFact
                    await s.apply(owner, [remove(item.id)], now=at)
            elif kind == "pending":
                _, what, text, expiry, evidence = step
                expires = {None: None, "lapsed": at + timedelta(seconds=30),
                           "later": at + timedelta(days=30)}[expiry]
                item = MemoryPendingItem(
                    kind=what, confidence=0.5, created_at=at, expires_at=expires,
                    evidence=evidence, **({"key": "mood", "value": text} if what == "status"
                                          else {"content": text}))
                await s.apply(owner, [AddPending(item)], now=at)
            elif kind == "decide":
                _, ref, action, by, edited = step
                if snap.pending:
                    await s.decide(owner, snap.pending[ref % len(snap.pending)].id, action,
                                   by, edited=edited, now=at)
            elif kind == "status":
                _, key, value, ttl = step
                await s.apply(owner, [SetStatus(key, value, ttl)], now=at)
            elif kind == "delete_status":
                if step[1] in snap.status:
                    await s.apply(owner, [DeleteStatus(step[1])], now=at)
            elif kind == "append":
                _, conversation, messages, window = step
                await s.append_messages(
                    owner, conversation,
                    [ChatMessage(role=role, content=text,
                                 created_at=at + timedelta(milliseconds=j))
                     for j, (role, text) in enumerate(messages)], window=window)
            else:
                assert kind == "end"
                await s.end_conversation(owner, step[1])
        except DreamMemoryError:
            pass  # a write the store refuses (a correction of a gone item...): nothing written
        snap = await s.load(owner, now=at)
        current: list[MemoryRule | MemoryFact] = [*snap.rules, *snap.facts]
        out.items += [i.id for i in current if i.id not in out.items]
        out.memories += [m for m in await live_memories() if m not in out.memories]
    return out


# -- what is compared -------------------------------------------------------------------


async def everything(stores: Stores, owner: str, played: Played, now: datetime
                     ) -> dict[str, Any]:
    """Every read of ``owner`` the round trip must keep, by name."""
    s, v = stores.structured, stores.vector
    snap = await s.load(owner, now=now)
    out: dict[str, Any] = {
        "snapshot": comparable(snap),
        "status expiry": dict(snap.status_expires_at),
        "memories": await v.list(owner, limit=1000),
        "audit": await s.audit(owner, limit=1000),
        "windows": {c: await s.load_window(owner, c) for c in CONVERSATIONS},
        "status history": {k: await s.status_history(owner, k) for k in STATUS_KEYS},
    }
    for at in played.times[::4]:
        out[f"as of {at}"] = comparable(await s.load_as_of(owner, at))
    for item_id in played.items:
        out[f"history of item {item_id}"] = await _or_error(s.history(owner, item_id))
    for memory_id in played.memories:
        out[f"history of memory {memory_id}"] = _stable(await _or_error(
            v.memory_history(owner, memory_id)))
    return out


def _stable(versions: Any) -> Any:
    """A memory's history with the id of its current version left out: that version is
    made from the live memory at each read, under a new id each time."""
    if isinstance(versions, str):
        return versions
    return [v.model_copy(update={"id": None}) if v.valid_to is None else v for v in versions]


async def _or_error(read: Any) -> Any:
    try:
        return await read
    except DreamMemoryError as exc:
        return type(exc).__name__


async def searches(stores: Stores, owner: str, played: Played, now: datetime
                   ) -> dict[str, list[SearchHit]]:
    """Hybrid and keyword searches for what the owner was told."""
    queries = [(q, k) for q in (*played.contents[:3], "部署 上线", "staging deploy")
               for k in (None, 3)]
    out = {}
    for query, key in queries:
        out[f"{query} / {key}"] = await stores.vector.search(
            owner, query, embedding=embedding(key), now=now, limit=20)
    return out


# -- the property ------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def sides(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, Stores]]:
    """A store of each backend to export from and one to import into, for the module:
    each example is an owner of its own."""
    made = {}
    try:
        for role in ("from", "into"):
            for backend in BACKENDS:
                made[f"{role} {backend}"] = await make_stores(backend, request)
        yield made
    finally:
        for stores in made.values():
            await stores.structured.close()
            await stores.vector.close()


def round_trip(source: str, target: str, index: int) -> Any:
    """The property for one pair of backends, with a seed of its own: each pair plays
    other owners, and every run the same ones."""

    @seed(SEED + index)
    @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=PHASES,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                     HealthCheck.data_too_large])
    @given(script=steps)
    async def test(sides: dict[str, Stores], script: list[tuple[Any, ...]]) -> None:
        owner = f"o-{uuid.uuid4().hex[:12]}"
        a, b = sides[f"from {source}"], sides[f"into {target}"]
        played = await play(a, owner, script, utcnow() - timedelta(days=2))
        lines = await export_owner(engine_on(a), owner)
        counts = await import_owner(engine_on(b), lines)
        assert (counts.get("memory", 0) == await a.vector.count(owner)
                == await b.vector.count(owner))
        windows = [await a.structured.load_window(owner, c) for c in CONVERSATIONS]
        assert counts.get("window", 0) == sum(map(bool, windows))
        now = utcnow()
        before = await everything(a, owner, played, now)
        after = await everything(b, owner, played, now)
        assert before.keys() == after.keys()
        for name in before:
            assert before[name] == after[name], name
        hits_a, hits_b = await searches(a, owner, played, now), await searches(b, owner,
                                                                                played, now)
        for query in hits_a:
            assert_same_hits(hits_a[query], hits_b[query])
        assert_same_document(lines, await export_owner(engine_on(b), owner))

    test.__name__ = f"test_from_{source}_into_{target}".replace("-", "_")
    return test


for _i, (_source, _target) in enumerate((s, t) for s in BACKENDS for t in BACKENDS):
    _test = round_trip(_source, _target, _i)
    globals()[_test.__name__] = _test
