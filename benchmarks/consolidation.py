"""Consolidation ("dreaming"): what a pass proposes and applies, what it does to retrieval.

``python -m benchmarks consolidation [--parts locomo,madial,pairs,scale,runtime] --json``. The
owners are built with the write path's judgement off (``Cuts.off()``: every memory
stored beside the others, as an owner imported, or written with dedup off, looks),
so the pass has the look-alikes a store would have judged. Parts:

- ``locomo``: each conversation's turns (alone, and with their context kept beside
  them, ``--contexts``) as one owner's memories; recall@10 of every question before
  and after ``MemoryEngine.consolidate(apply_all=True)`` (the paired difference with a
  bootstrap interval), memories before and after, proposals by kind, applied and
  refused; then every applied proposal is undone and the owner compared with what it
  was (memories, embeddings, histories, and every question's recall: ``undo_exact``).
  A merge's kept memory stands for the turns of every memory closed into it (as a
  merge on store does, ``benchmarks/corpus.py``); a superseded memory's turns are no
  longer found (its fact was replaced). ``strict``: the same searches scored with a
  merge's kept memory standing only for its own turns.
- ``madial``: the same on MADial-Bench, one owner per language, gold recall@5.
- ``pairs``: every labelled pair of a language in ONE owner (``a`` stored before
  ``b``), one pass (``propose``): how many proposals touch both memories of a
  ``distinct`` pair (should be none), of an ``update`` pair (supersede keeping ``b``)
  and of a ``duplicate`` pair (merge); proposals joining memories of different pairs
  are listed with their reasons.
- ``scale``: a pass over one owner of ``--scale-memories`` memories on PostgreSQL,
  timed while a writer stores to the same owner (``benchmarks/consolidation_scale.py``).
- ``runtime``: the same owner in a Ray memory system: the waits of a writer storing
  through its handle with no pass, during passes and during a pass applying its
  proposals (``consolidation_scale.runtime_part``).

Quality parts run on the in-memory backend (the judgement is the same on every
backend), the scale part on PostgreSQL. Embeddings come from the disk cache
(``benchmarks/embed_cache.py``); the judgement is the product's default (its calibrated
``dedup_threshold``, recorded with the raw cuts as ``cuts``), with no judge model.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.errors import ProposalNotApplied
from dream_memory_actor.models import PROPOSAL_KINDS, MemoryPendingItem
from dream_memory_actor.storage.dedup import Cuts
from dream_memory_actor.text import normalize_content

from .corpus import bench_settings
from .embed_cache import DiskCachedEmbedder
from .locomo import (
    DEPTH,
    Conversation,
    load_locomo,
    mean_ci,
    paired_difference,
    question_metrics,
    turn_context,
    turn_texts,
)
from .madial import DEPTH as MADIAL_DEPTH
from .madial import MadialSet, dialogue_metrics, load_madial
from .retrieval_madial import _engine, _ranked_ids
from .stats import command, machine

PARTS = ("locomo", "madial", "pairs", "scale", "runtime")
LOCOMO_PATH = "../shared/bench/locomo/locomo_dev7.json"
MADIAL_PATH = "../shared/bench/madial"
PAIRS_PATH = "../shared/bench/dedup/pairs_dev.jsonl"
MODEL = "multilingual-e5-small"
CACHE_DIR = Path(".bench") / "embeddings"
#: The most items ``store_many`` takes at once.
BATCH = 1000
#: Targets: a pass over the scale owner, and a write's longest wait during it.
TARGET_PASS_S = 60.0
Embedder = DiskCachedEmbedder | None
Opener = Callable[[MemorySettings, Embedder], Awaitable[MemoryEngine]]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--parts", default=",".join(PARTS), help="comma-separated: " + ", ".join(PARTS))
    p.add_argument("--model", default=MODEL,
                   help="local model (a local: name without the prefix; 'none': no embedder)")
    p.add_argument("--cache-dir", default=str(CACHE_DIR), help="embedding cache")
    p.add_argument("--locomo", default=LOCOMO_PATH, help="the LoCoMo JSON file")
    p.add_argument("--madial", default=MADIAL_PATH, help="the MADial folder")
    p.add_argument("--pairs", default=PAIRS_PATH, help="labelled pairs, one JSON object a line")
    p.add_argument("--conversations", type=int, default=None, help="LoCoMo: only the first N")
    p.add_argument("--contexts", default="none,beside",
                   help="LoCoMo: each turn alone (none) and/or with its context beside it")
    p.add_argument("--languages", default="en,zh", help="MADial and pairs: languages")
    p.add_argument("--max-proposals", type=int, default=None,
                   help="proposals per pass (default: the product's "
                        "consolidation_max_proposals)")
    p.add_argument("--scale-memories", type=int, default=10_000)
    p.add_argument("--scale-variants", type=float, default=0.15,
                   help="scale: the share of memories that are near-duplicates or updates of "
                        "another")
    p.add_argument("--writer-interval-ms", type=float, default=50.0,
                   help="scale: the writer's pause between two stores")
    p.add_argument("--writer-baseline-s", type=float, default=20.0,
                   help="scale: how long the writer runs with no pass")
    p.add_argument("--runtime-rounds", type=int, default=2,
                   help="runtime: how many passes (proposals only) the writer is timed in")
    p.add_argument("--dsn", default=None, help="PostgreSQL DSN (default: the embedded server)")
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--seed", type=int, default=0)


def _load() -> dict[str, float]:
    one, five, fifteen = os.getloadavg()
    return {"1m": round(one, 2), "5m": round(five, 2), "15m": round(fifteen, 2)}


# -- one owner: build, pass, undo --------------------------------------------------------


@dataclass
class Owner:
    """One owner's memories as stored, and what each memory stands for (the dataset's
    ids: LoCoMo dia_ids, MADial ids)."""

    engine: MemoryEngine
    owner: str
    ids_of: dict[str, set[str]] = field(default_factory=dict)


async def store_off(engine: MemoryEngine, owner: str, items: Sequence[Mapping[str, Any]],
                    vectors: Sequence[Sequence[float]] | None, now: datetime
                    ) -> list[str]:
    """``items`` (``store_many`` mappings) stored with no judgement, stamped ``now``; the
    new memories' ids in order."""
    ids: list[str] = []
    for i in range(0, len(items), BATCH):
        got = await engine.vector.store_many(
            owner, items[i:i + BATCH], threshold=Cuts.off(), now=now,
            embeddings=None if vectors is None else vectors[i:i + BATCH])
        ids += [r.memory.id for r in got]
    return ids


def applied_ids(entries: Sequence[Any], found: Sequence[MemoryPendingItem]) -> list[str]:
    """The ids of the proposals of ``found`` a confirmation applied, in their order."""
    confirmed = {e.pending_id for e in entries if e.action == "confirmed"}
    return [p.id for p in found if p.id in confirmed]


def after_pass(ids_of: Mapping[str, set[str]], found: Sequence[MemoryPendingItem],
               applied: Sequence[str], *, merged: bool = True) -> dict[str, set[str]]:
    """What each memory stands for once the ``applied`` proposals are: a merge's kept
    memory for the ids of all it merged (``merged=False``: only its own), a superseded
    or expired memory for nothing."""
    out = {k: set(v) for k, v in ids_of.items()}
    done = set(applied)
    for p in found:
        if p.id not in done or p.proposal is None:
            continue
        keep = p.proposal.keep
        for t in p.proposal.touches:
            if t.id == keep:
                continue
            gone = out.pop(t.id, set())
            if merged and p.kind == "merge" and keep is not None:
                out.setdefault(keep, set()).update(gone)
    return out


async def state(o: Owner) -> tuple[Any, Any]:
    """The owner's memories with their embeddings, and every closed version."""
    return await o.engine.vector.dump(o.owner), await o.engine.vector.versions(o.owner)


#: The ranked memory ids of every question of an owner (one search each).
Search = Callable[[Owner], Awaitable[list[list[str]]]]
#: Each question's figure from its ranked memory ids and what each memory stands for.
Measure = Callable[[Owner, Sequence[Sequence[str]], Mapping[str, set[str]]], list[float]]


async def consolidate_and_undo(o: Owner, search: Search, measure: Measure) -> dict[str, Any]:
    """Search, pass (apply all), search, undo every applied proposal, search: the figures
    of one owner, and the per-question values before and after (``_after_strict``: a
    merge's kept memory standing only for its own items)."""
    before_state = await state(o)
    before = measure(o, await search(o), o.ids_of)
    report = await o.engine.consolidate(o.owner, apply_all=True, by="benchmark")
    applied = applied_ids(await o.engine.structured.audit(o.owner, limit=None),
                          report.proposals)
    live_after = len(await o.engine.vector.dump(o.owner))
    hits = await search(o)
    after = measure(o, hits, after_pass(o.ids_of, report.proposals, applied))
    strict = measure(o, hits, after_pass(o.ids_of, report.proposals, applied, merged=False))
    t0 = time.perf_counter()
    back = 0
    for pid in reversed(applied):
        try:
            back += (await o.engine.undo_proposal(o.owner, pid, by="benchmark")).entry.restored or 0
        except ProposalNotApplied:
            continue
    undo_s = time.perf_counter() - t0
    undone_state = await state(o)
    again = measure(o, await search(o), o.ids_of)
    most = o.engine.settings.consolidation_max_proposals
    return {
        "memories_before": len(before_state[0]), "memories_after": live_after,
        "memories_after_undo": len(undone_state[0]),
        "proposals": report.counts, "capped": len(report.proposals) >= most,
        "applied": report.applied, "refused": report.refused,
        "pass_s": round(report.duration_s, 3), "undo_s": round(undo_s, 3),
        "memories_back_on_undo": back,
        "undo_exact": undone_state == before_state and again == before,
        "undo_detail": {"memories_and_embeddings": undone_state[0] == before_state[0],
                        "versions": undone_state[1] == before_state[1],
                        "scores": again == before},
        "examples": examples(report.proposals, applied),
        "_before": before, "_after": after, "_after_strict": strict,
    }


def examples(found: Sequence[MemoryPendingItem], applied: Sequence[str], n: int = 5
             ) -> dict[str, list[dict[str, Any]]]:
    """A few applied proposals of each kind: the texts touched (kept last) and why."""
    done = set(applied)
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in found:
        if p.id in done and p.proposal is not None and len(out[p.kind]) < n:
            out[p.kind].append(describe(p))
    return dict(out)


def describe(p: MemoryPendingItem) -> dict[str, Any]:
    assert p.proposal is not None
    keep = p.proposal.keep
    touched = sorted(p.proposal.touches, key=lambda t: t.id == keep)
    return {"kind": p.kind, "texts": [t.content for t in touched], "kept": keep is not None,
            "reason": p.proposal.reason}


def paired(values: Mapping[str, Sequence[float]], args: argparse.Namespace, metric: str
           ) -> dict[str, Any]:
    """Before and after over the same questions: means with intervals, and the paired
    difference (after minus before) with its bootstrap interval; ``strict``, the same
    with a merge's kept memory standing only for its own items."""
    b, a, st = values["before"], values["after"], values["after_strict"]
    return {"metric": metric, "questions": len(b),
            "before": mean_ci(b, args.seed, args.resamples),
            "after": mean_ci(a, args.seed, args.resamples),
            "after_minus_before": paired_difference(a, b, seed=args.seed,
                                                    resamples=args.resamples),
            "questions_changed": sum(x != y for x, y in zip(a, b, strict=True)),
            "strict": {"after": mean_ci(st, args.seed, args.resamples),
                       "after_minus_before": paired_difference(
                           st, b, seed=args.seed, resamples=args.resamples),
                       "questions_changed": sum(x != y for x, y in zip(st, b, strict=True))}}


def cuts_of(engine: MemoryEngine) -> dict[str, Any]:
    """The raw cosines the engine's judgement cuts at, per script (candidate, rewording)."""
    c = engine.cuts
    return {"dedup_threshold": engine.settings.dedup_threshold, "nearest": c.nearest,
            **{name: {"candidate": round(b.candidate, 4), "paraphrase": round(b.paraphrase, 4)}
               for name, b in (("latin", c.latin), ("cjk", c.cjk))}}


def totals(owners: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The owners' figures summed (``undo_exact`` only if exact for every owner)."""
    kinds: Counter[str] = Counter()
    for o in owners:
        kinds.update(o["proposals"])
    return {"owners": len(owners),
            **{k: sum(o[k] for o in owners) for k in (
                "memories_before", "memories_after", "memories_after_undo", "applied",
                "refused", "memories_back_on_undo")},
            "proposals": {k: kinds[k] for k in PROPOSAL_KINDS},
            "owners_capped": sum(o["capped"] for o in owners),
            "pass_s": round(sum(o["pass_s"] for o in owners), 2),
            "undo_exact": all(o["undo_exact"] for o in owners)}


#: The product's judgement: its calibrated threshold (``MemorySettings.dedup_threshold``).
THRESHOLD = MemorySettings.model_fields["dedup_threshold"].default


def _settings(args: argparse.Namespace, backend: str, **extra: Any) -> MemorySettings:
    if args.max_proposals is not None:
        extra["consolidation_max_proposals"] = args.max_proposals
    settings = bench_settings(backend, args.dsn, THRESHOLD,
                              args.model if args.embedder else MODEL, **extra)
    if args.embedder is None:
        settings = settings.model_copy(update={"embedding_model": None})
    return settings


# -- LoCoMo ------------------------------------------------------------------------------


async def locomo_part(args: argparse.Namespace, open_engine: Opener = _engine
                      ) -> dict[str, Any]:
    data = load_locomo(args.locomo)
    if args.conversations:
        data.conversations = data.conversations[:args.conversations]
    emb: Embedder = args.embedder
    questions = [q.question for q in data.questions]
    qvec = (dict(zip(questions, await emb.embed_query(questions), strict=True))
            if emb is not None else {})
    out: dict[str, Any] = {"backend": "memory", "path": Path(args.locomo).name,
                           "data": data.describe(), "metric": "recall@10", "by_context": {}}
    convs = {c.owner: c for c in data.conversations}

    async def search(o: Owner) -> list[list[str]]:
        conv = convs[o.owner]
        return [[h.memory.id for h in await o.engine.search(
            o.owner, q.question, limit=DEPTH, now=conv.now, embedding=qvec.get(q.question))]
            for q in conv.questions]

    def measure(o: Owner, hits: Sequence[Sequence[str]], ids_of: Mapping[str, set[str]]
                ) -> list[float]:
        return [question_metrics([ids_of.get(m, set()) for m in ranked],
                                 q.evidence)["recall@10"]
                for q, ranked in zip(convs[o.owner].questions, hits, strict=True)]

    for context in [c for c in args.contexts.split(",") if c]:
        engine = await open_engine(_settings(args, "memory"), emb)
        try:
            owners = []
            values: dict[str, list[float]] = defaultdict(list)
            for conv in data.conversations:
                o = await locomo_owner(engine, conv, context, emb)
                found = await consolidate_and_undo(o, search, measure)
                for k in ("before", "after", "after_strict"):
                    values[k] += found.pop(f"_{k}")
                owners.append({"owner": conv.owner, **found})
        finally:
            await engine.close()
        out["cuts"] = cuts_of(engine)
        out["by_context"][context] = {
            "ingest": "store_many with Cuts.off() (no judgement), turns in session order, "
                      "each session's turns stamped with its time",
            "recall@10": paired(values, args, "recall@10"), "totals": totals(owners),
            "owners": owners}
    out["load_after"] = _load()
    return out


async def locomo_owner(engine: MemoryEngine, conv: Conversation, context: str, emb: Embedder
                       ) -> Owner:
    """The conversation's turns as its owner's memories, session by session, with no
    judgement; ``context`` ``beside``: each with its context (``locomo.turn_context``)."""
    texts = [text for text, _ in turn_texts(conv, context)]
    arounds = [(turn_context(conv, i) or None) if context == "beside" else None
               for i in range(len(conv.turns))]
    vecs = (await engine.embed_many([(normalize_content(t), c) for t, c in
                                     zip(texts, arounds, strict=True)])
            if emb is not None else None)
    o = Owner(engine, conv.owner)
    sessions: dict[int, list[int]] = defaultdict(list)
    for i, t in enumerate(conv.turns):
        sessions[t.session].append(i)
    for idx in sessions.values():
        items = []
        for i in idx:
            t = conv.turns[i]
            item: dict[str, Any] = {"content": texts[i],
                                    "metadata": {"dia_id": t.dia_id, "session": t.session}}
            if context == "beside":
                item["context"] = arounds[i]
            items.append(item)
        ids = await store_off(engine, conv.owner, items,
                              None if vecs is None else [vecs[i] for i in idx],
                              conv.turns[idx[0]].at)
        for i, mid in zip(idx, ids, strict=True):
            o.ids_of[mid] = {conv.turns[i].dia_id}
    return o


# -- MADial ------------------------------------------------------------------------------


async def madial_part(args: argparse.Namespace, open_engine: Opener = _engine
                      ) -> dict[str, Any]:
    out: dict[str, Any] = {"backend": "memory", "metric": "gold@5", "languages": {}}
    for lang in [x for x in args.languages.split(",") if x]:
        data = load_madial(args.madial, lang)
        out["languages"][lang] = await madial_language(data, args, open_engine)
    out["load_after"] = _load()
    return out


async def madial_language(data: MadialSet, args: argparse.Namespace,
                          open_engine: Opener = _engine) -> dict[str, Any]:
    emb: Embedder = args.embedder
    qvec = (await emb.embed_query([d.query for d in data.dialogues]) if emb is not None
            else [None] * len(data.dialogues))
    vecs = await emb.embed([m.text for m in data.memories]) if emb is not None else None

    async def search(o: Owner) -> list[list[str]]:
        return [[h.memory.id for h in await o.engine.search(
            o.owner, d.query, limit=MADIAL_DEPTH, now=data.now, embedding=vec)]
            for d, vec in zip(data.dialogues, qvec, strict=True)]

    def measure(o: Owner, hits: Sequence[Sequence[str]], ids_of: Mapping[str, set[str]]
                ) -> list[float]:
        return [dialogue_metrics(_ranked_ids(ranked, ids_of), d)["gold@5"]
                for d, ranked in zip(data.dialogues, hits, strict=True)]

    engine = await open_engine(_settings(args, "memory"), emb)
    try:
        o = Owner(engine, data.owner)
        for i, m in enumerate(data.memories):
            ids = await store_off(engine, data.owner,
                                  [{"content": m.text, "metadata": {"madial_id": m.id}}],
                                  None if vecs is None else [vecs[i]], m.at)
            o.ids_of[ids[0]] = {m.id}
        found = await consolidate_and_undo(o, search, measure)
    finally:
        await engine.close()
    values = {k: found.pop(f"_{k}") for k in ("before", "after", "after_strict")}
    return {"data": data.describe(), "cuts": cuts_of(engine),
            "gold@5": paired(values, args, "gold@5"), **found}


# -- labelled pairs ----------------------------------------------------------------------


async def pairs_part(args: argparse.Namespace, open_engine: Opener = _engine
                     ) -> dict[str, Any]:
    rows = [json.loads(line) for line in Path(args.pairs).read_text(encoding="utf-8")
            .splitlines() if line.strip()]
    out: dict[str, Any] = {"backend": "memory", "path": Path(args.pairs).name,
                           "languages": {}}
    for lang in [x for x in args.languages.split(",") if x]:
        mine = [r for r in rows if r["lang"] == lang]
        if mine:
            out["languages"][lang] = await pairs_language(mine, args, open_engine)
    out["load_after"] = _load()
    return out


#: When the first pair's ``a`` is stored; each later memory a minute after the one before.
PAIRS_START = datetime(2025, 1, 1, tzinfo=timezone.utc)


async def pairs_language(rows: Sequence[Mapping[str, Any]], args: argparse.Namespace,
                         open_engine: Opener = _engine) -> dict[str, Any]:
    """Every pair in one owner (``a`` then ``b``, a minute apart, pair after pair), one
    ``propose``: what the proposals do to each pair, by label."""
    emb: Embedder = args.embedder
    texts = [t for r in rows for t in (r["a"], r["b"])]
    vecs = await emb.embed(texts) if emb is not None else None
    engine = await open_engine(_settings(args, "memory"), emb)
    owner = "pairs-" + str(rows[0]["lang"])
    where: dict[str, tuple[int, str]] = {}  # memory id -> (row, "a" or "b")
    try:
        for i, r in enumerate(rows):
            for j, side in enumerate(("a", "b")):
                k = 2 * i + j
                ids = await store_off(engine, owner, [{"content": r[side]}],
                                      None if vecs is None else [vecs[k]],
                                      PAIRS_START + timedelta(minutes=k))
                where[ids[0]] = (i, side)
        t0 = time.perf_counter()
        found = await engine.propose(owner)
        propose_s = time.perf_counter() - t0
    finally:
        await engine.close()
    return {"pairs": len(rows), "memories": len(texts), "propose_s": round(propose_s, 3),
            "cuts": cuts_of(engine),
            **pair_outcomes(rows, found, where)}


def pair_outcomes(rows: Sequence[Mapping[str, Any]], found: Sequence[MemoryPendingItem],
                  where: Mapping[str, tuple[int, str]]) -> dict[str, Any]:
    """Per label: pairs whose two memories one proposal touches, by kind (a supersede
    counted ``newest_kept`` when it keeps ``b``); the ``distinct`` ones and the
    proposals joining different pairs, with texts and reasons."""
    by_label: dict[str, Counter[str]] = defaultdict(Counter)
    for r in rows:
        by_label[r["label"]]["pairs"] += 0
    wrong: list[dict[str, Any]] = []
    across: list[dict[str, Any]] = []
    for p in found:
        if p.proposal is None:
            continue
        touched = [where[t.id] for t in p.proposal.touches if t.id in where]
        rows_touched = Counter(i for i, _ in touched)
        for i, n in rows_touched.items():
            if n < 2:
                continue
            r = rows[i]
            c = by_label[r["label"]]
            c[p.kind] += 1
            keep = where.get(p.proposal.keep or "")
            if p.kind == "supersede" and keep == (i, "b"):
                c["supersede_newest_kept"] += 1
            if r["label"] == "distinct":
                wrong.append({"id": r.get("id"), **describe(p)})
        if len(rows_touched) > 1:
            across.append({"pairs": sorted(str(rows[i].get("id")) for i in rows_touched),
                           **describe(p)})
    labels: dict[str, Any] = {}
    for label in ("distinct", "update", "duplicate"):
        n = sum(r["label"] == label for r in rows)
        c = by_label[label]
        labels[label] = {"pairs": n, **{k: c[k] for k in PROPOSAL_KINDS},
                         "supersede_newest_kept": c["supersede_newest_kept"],
                         "touched_both": sum(c[k] for k in PROPOSAL_KINDS)}
    return {"proposals": dict(Counter(p.kind for p in found)), "labels": labels,
            "distinct_touched": wrong, "across_pairs": across}


# -- run ---------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    parts = [x for x in args.parts.split(",") if x]
    for part in parts:
        if part not in PARTS:
            raise SystemExit(f"--parts takes {','.join(PARTS)}, got {part!r}")
    args.embedder = (None if args.model == "none"
                     else DiskCachedEmbedder(args.model, Path(args.cache_dir).resolve()))
    out: dict[str, Any] = {"benchmark": "consolidation", "command": command(),
                           "machine": machine(), "load_before": _load(),
                           "model": "none" if args.embedder is None else f"local:{args.model}",
                           "judge_model": None, "parts": {}}
    from .consolidation_scale import runtime_part, scale_part

    runners = {"locomo": locomo_part, "madial": madial_part, "pairs": pairs_part,
               "scale": scale_part, "runtime": runtime_part}
    for part in parts:
        t0 = time.perf_counter()
        found = await runners[part](args)
        found["s"] = round(time.perf_counter() - t0, 1)
        out["parts"][part] = found
    if args.embedder is not None:
        out["embedding"] = args.embedder.stats()
    out["load_after"] = _load()
    return out
