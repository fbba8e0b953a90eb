"""concurrency: many writers (Ray tasks) on one owner; lost updates, duplicates, throughput.

``writers`` concurrent writers run in ``--tasks`` Ray tasks (asyncio inside each,
so 32 writers need 4 processes, not 32). Each mixes L1 writes (a fact, its own
status key, a shared status key) with L2 stores of near-duplicate texts on a
few topics. The check replays every acknowledged L1 write in version order and
compares with the final snapshot, and counts the L2 memories per topic:

- ``lost``: acknowledged facts missing from the final snapshot;
- ``duplicates``: topics stored as more than one memory (a dedup race);
- ``double_applied``: versions given to two writes, or facts present twice.

The test suite runs the same workload (``tests/runtime/test_concurrency.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dream_memory_actor.models import MemorySnapshot, VectorMemory, utcnow
from dream_memory_actor.storage.ops import AddFact, AddRule, L1Op, SetStatus, apply_ops
from dream_memory_actor.text import content_hash

from .stats import command, machine, percentiles_ms

TOPICS = 4


def plain_text(topic: int, writer: int, step: int) -> str:
    """Near-duplicates for any embedder (or none): one text per topic, case and spaces varied."""
    text = f"deploy note for topic {topic}: the service went live"
    return text.upper() if (writer + step) % 2 else f"  {text}  "


WORDS = ("helm", "kafka", "billing", "search", "login", "cache", "backup", "alerts",
         "invoices", "reports", "gateway", "scheduler")


def distinct_text(topic: int, writer: int, step: int) -> str:
    """A text of its own for each write, so each is embedded (``--embedding-model``)."""
    a, b = WORDS[(writer * 7 + step) % len(WORDS)], WORDS[(writer + step * 5) % len(WORDS)]
    return f"agent {writer} says the {a} work for the {b} team is done, note {step}"


@dataclass
class Record:
    """One acknowledged write: its kind, what it sent, what came back, how long it took."""

    kind: str  # "l1" or "l2"
    seconds: float
    ops: list[L1Op] = field(default_factory=list)
    version: int = 0
    topic: int = -1
    memory_id: str = ""
    merged: bool = False


async def writer(handle: Any, w: int, steps: int, gate: int,
                 text: Callable[[int, int, int], str], l2: bool = True) -> list[Record]:
    """Writer ``w``: wait for the gate version, then ``steps`` writes, L1 and L2 mixed
    (``l2`` False: the L2 stores left out, the L1 writes the same)."""
    await handle.snapshot_async(min_version=gate, timeout_s=120)
    out: list[Record] = []
    for k in range(steps):
        t0 = time.perf_counter()
        if k % 3 == 1 and not l2:
            continue
        if k % 3 == 1:
            topic = (w + k) % TOPICS
            r = await handle.store_async(text(topic, w, k), {"writer": w, "step": k})
            out.append(Record("l2", time.perf_counter() - t0, topic=topic,
                              memory_id=r.memory.id, merged=r.merged))
            continue
        ops: list[L1Op] = [SetStatus("shared", f"w{w}-k{k}")]
        if k % 3 == 0:
            ops = [AddFact(f"writer {w} fact {k}", id=f"fact-{w}-{k}"),
                   SetStatus(f"w{w}", f"v{k}"), *ops]
        snap = await handle.apply_async(ops)
        out.append(Record("l1", time.perf_counter() - t0, ops=ops, version=snap.version))
    return out


async def writer_group(handle: Any, writers: Sequence[int], steps: int, gate: int,
                       text: Callable[[int, int, int], str], l2: bool = True
                       ) -> list[Record]:
    """Say ready (one L1 write), then run ``writers`` concurrently."""
    ready = SetStatus(f"ready{writers[0]}", "1")
    snap = await handle.apply_async([ready])
    records = [Record("l1", 0.0, ops=[ready], version=snap.version)]
    done = await asyncio.gather(*(writer(handle, w, steps, gate, text, l2) for w in writers))
    return records + [r for rs in done for r in rs]


def _run_group(handle: Any, writers: Sequence[int], steps: int, gate: int,
               text: Callable[[int, int, int], str], l2: bool = True) -> list[Record]:
    return asyncio.run(writer_group(handle, writers, steps, gate, text, l2))


def run_load(handle: Any, writers: int, tasks: int, steps: int,
             text: Callable[[int, int, int], str] = plain_text, l2: bool = True
             ) -> tuple[list[Record], float]:
    """Run the load from ``tasks`` Ray tasks; all acknowledged records and the wall time."""
    import ray

    remote = ray.remote(num_cpus=0, max_retries=0)(_run_group)
    groups = [list(range(writers))[i::tasks] for i in range(tasks)]
    base = handle.snapshot().version
    gate = base + tasks + 1  # every group said ready, then the driver's "go"
    refs = [remote.remote(handle, g, steps, gate, text, l2) for g in groups]
    handle.snapshot(min_version=gate - 1, timeout_s=300)
    t0 = time.perf_counter()
    go = SetStatus("go", "1")
    snap = handle.apply([go])
    records = [r for rs in ray.get(refs) for r in rs]
    wall = time.perf_counter() - t0
    return [Record("l1", 0.0, ops=[go], version=snap.version), *records], wall


def verify(records: Sequence[Record], final: MemorySnapshot, memories: Sequence[VectorMemory],
           base: MemorySnapshot | None = None) -> dict[str, Any]:
    """Compare the final state with a sequential replay of the acknowledged writes."""
    return {**verify_l1(records, final, base), **verify_topics(records, memories)}


def verify_l1(records: Sequence[Record], final: MemorySnapshot,
              base: MemorySnapshot | None = None) -> dict[str, Any]:
    """The L1 half of :func:`verify`: replay the acknowledged L1 writes (``kind == "l1"``)
    in version order from ``base`` and compare with ``final``, one owner's.

    ``lost``: acknowledged rule or fact additions ``final`` does not hold. An addition is
    held by an item of its kind with its id, or with its text (adding a text already held
    keeps that item), or by a pending correction it was queued as (``review_updates``).
    ``double_applied``: versions given to two writes, or item ids present twice.
    ``replay_matches``: rules, facts, status, pending ids and version all equal."""
    l1 = sorted((r for r in records if r.kind == "l1"), key=lambda r: r.version)
    versions = Counter(r.version for r in l1)
    start = base or MemorySnapshot(owner=final.owner)
    replay = start
    now = utcnow()
    for r in l1:
        replay = apply_ops(replay, r.ops, now)
    adds = {op.id: op for r in l1 for op in r.ops if isinstance(op, (AddFact, AddRule))}
    final_ids = Counter([*(f.id for f in final.facts), *(r.id for r in final.rules)])
    return {
        "lost": sum(not _held(op, final) for op in adds.values()),
        "double_applied": sum(n - 1 for n in versions.values() if n > 1)
        + sum(n - 1 for n in final_ids.values() if n > 1),
        "versions_contiguous": sorted(versions) == list(
            range(start.version + 1, start.version + 1 + len(l1))),
        "replay_matches": (
            [(f.id, f.content) for f in replay.facts] == [(f.id, f.content) for f in final.facts]
            and [(r.id, r.content) for r in replay.rules]
            == [(r.id, r.content) for r in final.rules]
            and [p.id for p in replay.pending] == [p.id for p in final.pending]
            and dict(replay.status) == dict(final.status) and replay.version == final.version
        ),
    }


def _held(op: AddFact | AddRule, snap: MemorySnapshot) -> bool:
    kind, items = ("fact", snap.facts) if isinstance(op, AddFact) else ("rule", snap.rules)
    text = content_hash(op.content)
    return any(i.id == op.id or content_hash(i.content) == text for i in items) or any(
        p.kind == kind and (p.id == op.id or content_hash(p.content or "") == text)
        for p in snap.pending)


def verify_topics(records: Sequence[Record], memories: Sequence[VectorMemory]
                  ) -> dict[str, Any]:
    """The L2 half of :func:`verify`: every store (``kind == "l2"``) of one topic must
    have landed in one memory, which absorbed the others exactly once."""
    by_topic: defaultdict[int, list[Record]] = defaultdict(list)
    for r in records:
        if r.kind == "l2":
            by_topic[r.topic].append(r)
    merges_expected = sum(len(rs) - 1 for rs in by_topic.values())
    merges_seen = sum(int(m.metadata.get("merge_count", 0)) for m in memories)
    return {
        # One memory per topic is right; more means a dedup check raced a write.
        "duplicates": max(0, len(memories) - len(by_topic)),
        "merges_once": merges_seen == merges_expected and all(
            len({r.memory_id for r in rs}) == 1 and sum(not r.merged for r in rs) <= 1
            for rs in by_topic.values()),
    }


def _salted(text: Callable[[int, int, int], str], salt: str) -> Callable[[int, int, int], str]:
    """``text`` with ``salt`` appended: texts no earlier load stored (or embedded)."""
    return lambda topic, w, k: f"{text(topic, w, k)} ({salt})"


def _rounds(system: Any, args: argparse.Namespace, text: Callable[[int, int, int], str]
            ) -> dict[str, Any] | None:
    """``--rounds`` of three loads, each on a fresh owner and in alternating order: one
    writer, ``--writers`` writers, and ``--writers`` writers without L2 stores; the
    throughput of many writers over one's, and their L1 write p95 over the L1-only
    load's, per round and their medians."""
    if not args.rounds:
        return None
    import os

    import numpy as np

    loads = {"one_writer": (1, 1, True), "writers": (args.writers, args.tasks, True),
             "writers_l1_only": (args.writers, args.tasks, False)}
    per: list[dict[str, Any]] = []
    for r in range(args.rounds):
        got: dict[str, Any] = {}
        names = list(loads) if r % 2 == 0 else list(loads)[::-1]
        for name in names:
            n, tasks, l2 = loads[name]
            owner = f"bench-concurrency-{name}-{r}"
            handle = system.owner(owner)
            records, wall = run_load(handle, n, tasks, args.steps, _salted(text, owner), l2)
            timed = [x for x in records if x.seconds > 0]
            got[name] = {"ops_per_s": round(len(timed) / wall, 1), **{
                kind: percentiles_ms(seconds) for kind in ("l1", "l2")
                if (seconds := [x.seconds for x in timed if x.kind == kind])}}
        got["throughput_ratio"] = round(got["writers"]["ops_per_s"]
                                        / got["one_writer"]["ops_per_s"], 2)
        got["l1_p95_ratio"] = round(got["writers"]["l1"]["p95_ms"]
                                    / got["writers_l1_only"]["l1"]["p95_ms"], 2)
        got["load"] = [round(x, 2) for x in os.getloadavg()]
        per.append(got)
    tput = float(np.median([g["throughput_ratio"] for g in per]))
    l1 = float(np.median([g["l1_p95_ratio"] for g in per]))
    return {"per_round": per, "throughput_ratio_median": round(tput, 2),
            "l1_p95_ratio_median": round(l1, 2),
            "targets": {"throughput_ratio_at_least": 1.7, "throughput_met": tput >= 1.7,
                        "l1_p95_ratio_at_most": 2.0, "l1_p95_met": l1 <= 2.0}}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .runtime_args import add_runtime_arguments

    parser.add_argument("--writers", type=int, default=32)
    parser.add_argument("--tasks", type=int, default=4, help="Ray tasks the writers run in")
    parser.add_argument("--steps", type=int, default=12, help="writes per writer")
    parser.add_argument("--rounds", type=int, default=0,
                        help="also time, on owners of their own and in alternating order, "
                             "one writer against --writers (throughput ratio) and --writers "
                             "without their L2 stores (L1 write p95 ratio), this many times")
    parser.add_argument("--embedding-model", default=None,
                        help="embed the L2 stores with this model (e.g. "
                             "local:multilingual-e5-small); each store then has a text of "
                             "its own, so the duplicate checks do not apply")
    add_runtime_arguments(parser)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from .runtime_args import system_from_args

    model = args.embedding_model
    extra = {} if model is None else {"embedding_model": model}
    with system_from_args(args, "bench-concurrency", **extra) as system:
        handle = system.owner("bench-concurrency")
        base = handle.snapshot()
        records, wall = run_load(handle, args.writers, args.tasks, args.steps,
                                 plain_text if model is None else distinct_text)
        final = handle.snapshot()
        memories = handle.list(limit=1000)
        checks = verify(records, final, memories, base)
        rounds = _rounds(system, args, plain_text if model is None else distinct_text)
    if model is not None:  # texts of their own: no topic is stored once by design
        for key in ("duplicates", "merges_once"):
            checks.pop(key, None)
    timed = [r.seconds for r in records if r.seconds > 0]
    return {
        "benchmark": "concurrency",
        "placement": args.placement,
        "backend": args.backend,
        "writers": args.writers,
        "tasks": args.tasks,
        "ops": len(timed),
        "ops_per_s": round(len(timed) / wall, 1) if wall else None,
        "latency": percentiles_ms(timed),
        "latency_by_kind": {kind: percentiles_ms([r.seconds for r in records
                                                  if r.kind == kind and r.seconds > 0])
                            for kind in ("l1", "l2")},
        "embedding_model": model,
        **checks,
        **({"rounds": rounds} if rounds else {}),
        "machine": machine(),
        "command": command(),
    }
