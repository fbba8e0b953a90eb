"""The scale part of ``python -m benchmarks consolidation``: a pass over one owner of
``--scale-memories`` memories on PostgreSQL, timed while a writer stores to the same
owner (see ``benchmarks/consolidation.py``).

The memories are realistic texts, each once: LoCoMo turns, its observations, event
summaries and session summaries (sentence by sentence), MADial memories and the
labelled pairs' texts; ``--scale-variants`` of them are made from another, a day
newer: the same text with other case and punctuation (``restated``, a duplicate) or
with one value changed (``updated``: a number, weekday or month), so the pass has
something to propose.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from dream_memory_actor.engine import MemoryEngine, consolidation
from dream_memory_actor.models import MemoryPendingItem

from .consolidation import (
    PAIRS_START,
    TARGET_PASS_S,
    Embedder,
    Opener,
    _load,
    _settings,
    cuts_of,
    describe,
    examples,
    store_off,
)
from .corpus import Corpus
from .locomo import load_locomo, parse_session_time
from .madial import load_madial
from .retrieval_madial import _engine
from .stats import percentiles_ms

# -- memories -------------------------------------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])\d{1,4}(?![\w.])")
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_WORD_SET = re.compile(r"\b(" + "|".join(_WEEKDAYS + _MONTHS) + r")\b")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def updated(text: str, rng: random.Random) -> str | None:
    """``text`` with one value changed (a number, weekday or month), as a newer version
    of the fact would say it; ``None`` if it has none."""
    found = list(_NUMBER.finditer(text))
    if found:
        m = rng.choice(found)
        return f"{text[:m.start()]}{int(m.group()) + rng.randint(1, 9)}{text[m.end():]}"
    words = list(_WORD_SET.finditer(text))
    if words:
        m = rng.choice(words)
        pool = _WEEKDAYS if m.group() in _WEEKDAYS else _MONTHS
        other = rng.choice([w for w in pool if w != m.group()])
        return f"{text[:m.start()]}{other}{text[m.end():]}"
    return None


def restated(text: str) -> str:
    """``text`` stored again with other case and punctuation (the same fact)."""
    body = text.rstrip(".!?。")
    head = body[:1].lower() if body[:1].isupper() else body[:1].upper()
    return head + body[1:] + ("" if body != text else ".")


def scale_sources(args: argparse.Namespace) -> list[tuple[str, datetime, str]]:
    """(text, time, source) of realistic memories, each text once: LoCoMo turns, its
    observations, event summaries and session summaries (sentence by sentence), MADial
    memories and the labelled pairs' texts."""
    out: list[tuple[str, datetime, str]] = []
    raw = json.loads(Path(args.locomo).read_text(encoding="utf-8"))
    for conv in load_locomo(args.locomo).conversations:
        out += [(t.content, t.at, "locomo_turn") for t in conv.turns]
    for item in raw:
        c = item["conversation"]
        for key, by in (item.get("observation") or {}).items():
            when = _session_time(c, key.split("_")[1])
            for facts in by.values():
                out += [(str(f[0]), when, "locomo_observation") for f in facts if when]
        for key, ev in (item.get("event_summary") or {}).items():
            when = _session_time(c, key.split("_")[-1])
            for who, facts in ev.items():
                if who != "date" and when:
                    out += [(str(f), when, "locomo_event") for f in facts]
        for key, text in (item.get("session_summary") or {}).items():
            when = _session_time(c, key.split("_")[1])
            if when:
                out += [(s, when, "locomo_summary") for s in _SENTENCE.split(str(text))
                        if len(s) > 20]
    for lang in ("en", "zh"):
        out += [(m.text, m.at, "madial") for m in load_madial(args.madial, lang).memories]
    pairs = [json.loads(line) for line in Path(args.pairs).read_text(encoding="utf-8")
             .splitlines() if line.strip()]
    out += [(r[s], PAIRS_START, "pairs") for r in pairs for s in ("a", "b")]
    seen: set[str] = set()
    unique = []
    for text, when, source in out:
        if text.strip() and text not in seen:
            seen.add(text)
            unique.append((text, when, source))
    return unique


def _session_time(conv: Mapping[str, Any], n: str) -> datetime | None:
    key = f"session_{n}_date_time"
    return parse_session_time(conv[key]) if key in conv else None


def scale_memories(sources: Sequence[tuple[str, datetime, str]], n: int, share: float,
                   writer: int, seed: int
                   ) -> tuple[list[tuple[str, datetime, str]], list[str], dict[str, str]]:
    """``n`` memories: base texts, and ``share`` of them (at least; more when the
    sources run short) near-duplicates (``restated``) or updates (``updated``) of a
    base text, a day after it; ``writer`` base texts kept out of the owner for the
    writer to store; and the base text of each variant."""
    rng = random.Random(seed)
    base = list(sources)
    rng.shuffle(base)
    for_writer = [t for t, _, _ in base[:writer]]
    base = base[writer:]
    variants = round(n * share)
    base = base[:n - variants]
    out = list(base)
    made: set[str] = {t for t, _, _ in sources}  # a variant is a new text
    valued = [b for b in base if _NUMBER.search(b[0]) or _WORD_SET.search(b[0])]
    made_from: dict[str, str] = {}
    tries = 0
    while len(out) < n and tries < 50 * n:
        tries += 1
        if valued and (len(out) - len(base)) % 2 == 0:  # as many updates as duplicates
            text, when, _ = rng.choice(valued)
            kind, new = "updated", updated(text, rng)
        else:
            text, when, _ = rng.choice(base)
            kind, new = "restated", restated(text)
        if new is None or new in made:
            continue
        made.add(new)
        made_from[new] = text
        out.append((new, when + timedelta(days=1), kind))
    return out, for_writer, made_from


def of_planted(found: Sequence[MemoryPendingItem], mems: Sequence[tuple[str, datetime, str]],
            made_from: Mapping[str, str], id_of: Mapping[str, str]) -> dict[str, Any]:
    """What the proposals ``found`` (no cap) make of the planted variants: a restated
    text merged with its base; an updated one superseding its base (kept), or merged
    with it (an update merged silently: wrong)."""
    kinds = {id_of[t]: k for t, _, k in mems if t in made_from}
    base = {id_of[t]: id_of[b] for t, b in made_from.items()}
    out: Counter[str] = Counter()
    merged_updates: list[dict[str, Any]] = []
    for p in found:
        if p.proposal is None:
            continue
        ids = {t.id for t in p.proposal.touches}
        hit = [v for v in ids if v in base and base[v] in ids]
        for v in hit:
            right = ("merge" if kinds[v] == "restated" else "supersede") == p.kind
            kept = p.proposal.keep == v
            out[f"{kinds[v]}_{p.kind}"] += 1
            if kinds[v] == "updated" and p.kind == "merge":
                merged_updates.append(describe(p))
            out[f"{kinds[v]}_{'right' if right and kept else 'wrong'}"] += 1
        out["touching_no_planted_pair"] += not hit
    return {"proposals": len(found), "counts": dict(Counter(p.kind for p in found)),
            "planted": {k: sum(1 for t, _, s in mems if s == k) for k in ("restated",
                                                                      "updated")},
            "found": dict(sorted(out.items())), "updates_merged": merged_updates}


@dataclass
class Writer:
    """Stores to one owner every ``interval`` seconds (``store(text, vector)``); each
    write's wait is from when it was due (the previous write's end plus the interval) to
    when it returned."""

    store: Callable[[str, Sequence[float] | None], Awaitable[Any]]
    texts: Sequence[tuple[str, Sequence[float] | None]]
    interval: float
    waits: list[tuple[float, float]] = field(default_factory=list)  # (due, wait s)
    calls: list[float] = field(default_factory=list)  # call to return, s
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _i: int = 0

    async def run(self) -> None:
        due = time.perf_counter()
        while not self._stop.is_set():
            now = time.perf_counter()
            if now < due:
                await asyncio.sleep(due - now)
            text, vec = self.texts[self._i % len(self.texts)]
            self._i += 1
            t0 = time.perf_counter()
            await self.store(text, vec)
            end = time.perf_counter()
            self.calls.append(end - t0)
            self.waits.append((due, end - due))
            due = end + self.interval

    def stop(self) -> None:
        self._stop.set()

    def summary(self, start: float, end: float) -> dict[str, Any]:
        """The writes due between ``start`` and ``end``."""
        w = [s for due, s in self.waits if start <= due <= end]
        return {"writes": len(w), "longest_wait_ms": round(1000 * max(w), 1) if w else None,
                **{f"wait_{k}": v for k, v in percentiles_ms(w).items() if k != "n"}}


async def load_owner(engine: MemoryEngine, owner: str,
                     mems: Sequence[tuple[str, datetime, str]], emb: Embedder
                     ) -> tuple[float, dict[str, str]]:
    """``mems`` stored into ``owner`` unjudged, each at its time; the seconds it took and
    each text's memory id."""
    vecs = await emb.embed([t for t, _, _ in mems]) if emb is not None else None
    t0 = time.perf_counter()
    by_time: dict[datetime, list[int]] = defaultdict(list)
    for i, (_, when, _) in enumerate(mems):
        by_time[when].append(i)
    id_of: dict[str, str] = {}
    for when, idx in sorted(by_time.items()):
        ids = await store_off(engine, owner, [{"content": mems[i][0]} for i in idx],
                              None if vecs is None else [vecs[i] for i in idx], when)
        id_of.update((mems[i][0], mid) for i, mid in zip(idx, ids, strict=True))
    return time.perf_counter() - t0, id_of


async def scale_part(args: argparse.Namespace, open_engine: Opener = _engine
                     ) -> dict[str, Any]:
    emb: Embedder = args.embedder
    sources = scale_sources(args)
    mems, for_writer, made_from = scale_memories(sources, args.scale_memories,
                                                 args.scale_variants, 200, args.seed)
    wvecs = (await emb.embed(for_writer) if emb is not None else [None] * len(for_writer))
    settings = _settings(args, "postgres")
    engine = await open_engine(settings, emb)
    corpus = Corpus(engine.vector, engine.structured, settings, 0.0, "store_many")
    owner = "scale-owner"
    try:
        load_s, id_of = await load_owner(engine, owner, mems, emb)
        t0 = time.perf_counter()
        every = await consolidation.proposals(await engine.vector.dump(owner), engine.cuts,
                                              most=len(mems))
        uncapped = {"s": round(time.perf_counter() - t0, 2),
                    **of_planted(every, mems, made_from, id_of)}
        async def store(text: str, vec: Sequence[float] | None) -> Any:
            return await engine.store(owner, text, embedding=vec, metadata={"source": "writer"})

        writer = Writer(store, list(zip(for_writer, wvecs, strict=True)),
                        args.writer_interval_ms / 1000)
        timed: dict[str, float] = {}  # proposal id -> its write (the first apply)
        apply = engine.apply_proposal

        async def timed_apply(owner: str, item: Any, **kw: Any) -> Any:
            s = time.perf_counter()
            try:
                return await apply(owner, item, **kw)
            finally:  # a confirmation applies again once written: a no-op, not timed
                timed.setdefault(item.id, time.perf_counter() - s)

        engine.apply_proposal = timed_apply  # type: ignore[method-assign]
        task = asyncio.create_task(writer.run())
        try:
            base0 = time.perf_counter()
            await asyncio.sleep(args.writer_baseline_s)
            base1 = time.perf_counter()
            found = await engine.propose(owner)
            prop1 = time.perf_counter()
            report = await engine.consolidate(owner, apply_all=True, by="benchmark")
            cons1 = time.perf_counter()
            await asyncio.sleep(2 * args.writer_interval_ms / 1000)
        finally:
            writer.stop()
            await task
        live = len(await engine.vector.dump(owner))
        planted = Counter(s for _, _, s in mems)
        return {
            "backend": "postgres", "postgres": "embedded" if not args.dsn else "dsn given",
            "memories": len(mems), "by_source": dict(planted), "load_s": round(load_s, 1),
            "max_proposals": settings.consolidation_max_proposals,
            "cuts": cuts_of(engine),
            "uncapped": uncapped,
            "propose": {"s": round(prop1 - base1, 2), "proposals": len(found),
                        "counts": dict(Counter(p.kind for p in found))},
            "consolidate": {"s": round(cons1 - prop1, 2), "pass_s": round(report.duration_s, 2),
                            "proposals": report.counts, "applied": report.applied,
                            "refused": report.refused,
                            "proposal_write": percentiles_ms(list(timed.values())),
                            "longest_proposal_write_ms": round(1000 * max(timed.values()), 1)
                            if timed else None},
            "memories_after": live,
            "writer": {"interval_ms": args.writer_interval_ms,
                       "no_pass": writer.summary(base0, base1),
                       "during_propose": writer.summary(base1, prop1),
                       "during_consolidate": writer.summary(prop1, cons1),
                       "call_ms": percentiles_ms(writer.calls)},
            "examples": {k: v for k, v in examples(report.proposals,
                                                   [p.id for p in report.proposals],
                                                   3).items()},
            "targets": {"pass_under_s": TARGET_PASS_S,
                        "pass_met": (cons1 - prop1) < TARGET_PASS_S
                        and (prop1 - base1) < TARGET_PASS_S},
            "load_after": _load(),
        }
    finally:
        await corpus.close()


async def runtime_part(args: argparse.Namespace, open_engine: Opener = _engine
                       ) -> dict[str, Any]:
    """What a writer of the owner feels of a pass on a Ray memory system over
    PostgreSQL: the scale owner loaded as in ``scale_part``, a writer storing through
    the owner's handle with no pass, then during ``--runtime-rounds`` passes that only
    propose (``propose``, through the handle), then during one ``consolidate(apply_all=
    True)`` through the handle, its proposals applied one write each."""
    import logging
    import uuid

    import ray

    from dream_memory_actor.runtime import MemorySystem

    emb: Embedder = args.embedder
    if emb is None:
        raise SystemExit("the runtime part needs a model (its writer's stores embed)")
    sources = scale_sources(args)
    mems, for_writer, _ = scale_memories(sources, args.scale_memories, args.scale_variants,
                                         200, args.seed)
    await emb.embed(for_writer)  # the replica finds them in the disk cache
    settings = _settings(args, "postgres")
    owner = "scale-owner"
    engine = await open_engine(settings, emb)
    try:
        load_s, _ = await load_owner(engine, owner, mems, emb)
    finally:
        await engine.close()
    owns_ray = not ray.is_initialized()
    if owns_ray:
        ray.init(address="local", num_cpus=2, include_dashboard=False,
                 object_store_memory=200 * 1024 * 1024, logging_level=logging.ERROR)
    system = MemorySystem.start(settings, name=f"bench-dream-{uuid.uuid4().hex[:6]}",
                                embedder_factory=emb, call_timeout_s=600.0)
    try:
        handle = system.owner(owner)
        await system.owner("scale-warmup").propose_async()  # every process of a pass started

        async def store(text: str, _: Sequence[float] | None) -> Any:
            return await handle.store_async(text, {"source": "writer"})

        writer = Writer(store, [(t, None) for t in for_writer], args.writer_interval_ms / 1000)
        task = asyncio.create_task(writer.run())
        phases: dict[str, list[dict[str, Any]]] = defaultdict(list)
        try:
            t0 = time.perf_counter()
            await asyncio.sleep(args.writer_baseline_s)
            phases["no_pass"].append(writer.summary(t0, time.perf_counter()))
            for _ in range(args.runtime_rounds):
                t0 = time.perf_counter()
                n = len(await handle.propose_async())
                t1 = time.perf_counter()
                phases["propose"].append({"pass_s": round(t1 - t0, 2), "proposals": n,
                                          **writer.summary(t0, t1)})
                await asyncio.sleep(2 * args.writer_interval_ms / 1000)
            t0 = time.perf_counter()
            report = await handle.consolidate_async(apply_all=True, by="benchmark")
            t1 = time.perf_counter()
            phases["consolidate_apply_all"].append({
                "s": round(t1 - t0, 2), "proposals": report.counts,
                "applied": report.applied, "refused": report.refused,
                **writer.summary(t0, t1)})
            await asyncio.sleep(2 * args.writer_interval_ms / 1000)
        finally:
            writer.stop()
            await task
    finally:
        system.shutdown(grace_period_s=1)
        if owns_ray:
            ray.shutdown()
    longest = {k: max((p["longest_wait_ms"] or 0.0) for p in v) for k, v in phases.items()}
    return {"backend": "postgres", "memories": len(mems), "load_s": round(load_s, 1),
            "writer": {"interval_ms": args.writer_interval_ms, "via": "OwnerHandle.store_async",
                       "call_ms": percentiles_ms(writer.calls)},
            "rounds": args.runtime_rounds, "phases": dict(phases),
            "longest_wait_ms": longest, "load_after": _load()}
