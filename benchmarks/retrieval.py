"""Retrieval quality on LoCoMo: hybrid search against vector, keyword, BM25 and tuned weights.

Every turn becomes a memory of its conversation's owner, stamped with its session
time (see ``benchmarks/corpus.py`` for the two ingest paths); each question of
categories 1-4 searches that owner's memories with "now" = the last session's
date, and the top 25 are scored against the evidence dia_ids (``benchmarks/locomo.py``).

Rows, all on the same stored memories and the same query embeddings:

- ``hybrid_default``: ``VectorStore.search`` with the default weights 0.6/0.3/0.1 (timed);
- ``vector_only`` (1/0/0) and ``keyword_only_weights`` (0/1/0): the same candidates
  ranked with those weights (embeddings present);
- ``keyword_mode``: the search without a query embedding, what runs when no
  embedder is configured (default weights: 0.3 keyword + 0.1 time; timed);
- ``bm25``: Okapi BM25 over the turns (reference baseline, ``benchmarks/bm25.py``);
- tuned weights: leave-one-conversation-out over a grid (``benchmarks/tuning.py``),
  reported only on held-out conversations, beside the default weights on the same ones.

The corpus is built twice when dedup merges turns: with the library's threshold
(0.85, the headline) and with threshold 1.0 (only exact-text repeats still merge).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dream_memory_actor import validation as check
from dream_memory_actor.config import MemorySettings
from dream_memory_actor.embedding import IDENTITY, Calibration
from dream_memory_actor.scoring import Weights

from .bm25 import BM25
from .corpus import Corpus, bench_settings, ingest_actors, ingest_engine
from .embed_cache import DEFAULT_CACHE_DIR, DEFAULT_MODEL, DiskCachedEmbedder
from .locomo import (
    CONTEXTS,
    DEPTH,
    Dataset,
    embedded_texts,
    load_locomo,
    paired_difference,
    question_metrics,
    summarize,
    turn_texts,
)
from .paired import per_question_files
from .stats import command, machine, percentiles_ms
from .tuning import (
    DEFAULT_WEIGHTS,
    Signals,
    best_index,
    fast_rank,
    leave_one_out,
    pick,
    signals,
    weight_grid,
    weights_dict,
)

DEFAULT_PATH = "../shared/bench/locomo/locomo_dev7.json"
MADIAL_PATH = "../shared/bench/madial"
MADIAL_MODELS = "multilingual-e5-small,use-multilingual,all-MiniLM-L6-v2"
VECTOR_ONLY = Weights(1.0, 0.0, 0.0)
KEYWORD_ONLY = Weights(0.0, 1.0, 0.0)
Rows = list[tuple[int, Mapping[str, float]]]
#: The recall@10 the hybrid search is held to on LoCoMo (the LoCoMo paper's best
#: retriever reports 67.5 on its own corpus).
TARGET_RECALL10 = 0.70


#: How many earlier turns a memory extracted from a conversation carries by default.
EXTRACTION_TURNS = MemorySettings.model_fields["extraction_context_turns"].default


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", choices=["locomo", "madial"], default="locomo")
    p.add_argument("--path", default=None,
                   help=f"the LoCoMo JSON file (default {DEFAULT_PATH}) or the MADial folder "
                        f"(default {MADIAL_PATH})")
    p.add_argument("--models", default=MADIAL_MODELS,
                   help="MADial: local models to compare, comma-separated")
    p.add_argument("--languages", default="en,zh", help="MADial: languages, comma-separated")
    p.add_argument("--no-keyword-only", action="store_true",
                   help="MADial: skip the run without an embedder")
    p.add_argument("--backend", choices=["memory", "postgres"], default="postgres")
    p.add_argument("--dsn", default=None, help="PostgreSQL DSN (default: the embedded server)")
    p.add_argument("--ingest", choices=["engine", "actors"], default="engine",
                   help="store through MemoryEngine, or through MemorySystem handles on Ray")
    p.add_argument("--placement", choices=["sharded", "dedicated"], default="sharded")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="local model (a local: name without the prefix)")
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE_DIR), help="embedding cache")
    p.add_argument("--conversations", type=int, default=None, help="only the first N")
    p.add_argument("--context", choices=CONTEXTS, default="none",
                   help="LoCoMo: each turn stored alone (none), with its session's date and "
                        "previous turn written into its text (text), or stored as its "
                        "context, embedded and searched with it while its content stays the "
                        "turn (beside)")
    p.add_argument("--context-turns", type=int, default=EXTRACTION_TURNS,
                   help="LoCoMo, --context text or beside: how many previous turns of the "
                        "session the context holds (default: as the extraction path's, "
                        f"extraction_context_turns={EXTRACTION_TURNS})")
    p.add_argument("--no-context-date", dest="context_date", action="store_false",
                   help="LoCoMo: leave the session's date out of the context")
    p.add_argument("--context-fields", default="time",
                   help="MADial, --context beside: the record's fields kept as each memory's "
                        "context, comma-separated (time, scene, emotion)")
    p.add_argument("--dedup-threshold", type=float, default=0.85)
    p.add_argument("--no-dedup-off", action="store_true",
                   help="skip the second corpus with dedup off (threshold 1.0)")
    p.add_argument("--grid-step", type=float, default=0.1)
    p.add_argument("--half-lives", default="7,30,365", help="days, comma-separated")
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--questions-out", default=None, metavar="FILE",
                   help="write each question's figure per row to FILE, for --paired-with "
                        "of another run (LoCoMo: recall@10 on the headline corpus; MADial: "
                        "each dialogue's gold@5, per language, model and row)")
    p.add_argument("--paired-with", default=None, metavar="FILE",
                   help="a --questions-out file of another run (other code or "
                        "settings, the same questions): report this run minus that one, "
                        "question by question, with a paired bootstrap interval")
    p.add_argument("--embed-timing", type=int, default=200,
                   help="questions embedded one by one (uncached) to time query embedding")


class Evaluation:
    """Per-question metrics of each row on one corpus, in the dataset's question order."""

    def __init__(self) -> None:
        self.rows: dict[str, Rows] = {}
        self.latency: dict[str, list[float]] = {"hybrid_default": [], "keyword_mode": []}
        self.signals: list[Signals] = []
        self.agree = 0

    def add(self, name: str, category: int, metrics: Mapping[str, float]) -> None:
        self.rows.setdefault(name, []).append((category, metrics))


def _dia(ids: Sequence[str], corpus: Corpus) -> list[set[str]]:
    return [corpus.dia_of.get(i, set()) for i in ids]


async def evaluate(corpus: Corpus, data: Dataset, qvec: Mapping[str, list[float]],
                   calibration: Calibration = IDENTITY) -> Evaluation:
    """Every row on one corpus; ``calibration``: the embedder's (its query curve maps
    cosines to the vector signal, as ``MemoryEngine`` does)."""
    ev = Evaluation()
    weights = (DEFAULT_WEIGHTS if calibration.is_identity
               else dataclasses.replace(DEFAULT_WEIGHTS, calibration=calibration.query))
    store = corpus.vector
    s = corpus.settings
    vk, kk = s.vector_candidates, s.keyword_candidates
    for conv in data.conversations:
        for q in conv.questions:
            emb = qvec[q.question]
            t0 = time.perf_counter()
            hits = await store.search(conv.owner, q.question, embedding=emb, limit=DEPTH,
                                      weights=weights, now=conv.now, vector_k=vk,
                                      keyword_k=kk)
            ev.latency["hybrid_default"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            kw_hits = await store.search(conv.owner, q.question, limit=DEPTH,
                                         weights=weights, now=conv.now, keyword_k=kk)
            ev.latency["keyword_mode"].append(time.perf_counter() - t0)
            text = check.content(q.question, s.max_content_bytes)
            terms, tw, stats = await store.weighted_terms([conv.owner], text)
            cands = await store._candidates([conv.owner], terms, emb, vector_k=max(vk, DEPTH),
                                            keyword_k=max(kk, DEPTH), weights=tw, stats=stats)
            sig = signals(cands, terms, conv.now, tw, weights.calibration)
            ev.signals.append(sig)
            default_ids = [h.memory.id for h in hits]
            ev.agree += int(fast_rank(sig, weights, DEPTH) == default_ids)
            ev.add("hybrid_default", q.category,
                   question_metrics(_dia(default_ids, corpus), q.evidence))
            for name, w in (("vector_only", VECTOR_ONLY), ("keyword_only_weights", KEYWORD_ONLY)):
                ids = fast_rank(sig, w, DEPTH)
                ev.add(name, q.category, question_metrics(_dia(ids, corpus), q.evidence))
            ev.add("keyword_mode", q.category,
                   question_metrics(_dia([h.memory.id for h in kw_hits], corpus), q.evidence))
    return ev


def bm25_rows(data: Dataset, context: str = "none", turns: int = 1, date: bool = True
              ) -> Rows:
    """BM25 over each turn's embedded text: with a context, given the same context."""
    rows: Rows = []
    for conv in data.conversations:
        index = BM25([e for _, e in turn_texts(conv, context, turns, date)])
        for q in conv.questions:
            top = index.top(q.question, DEPTH)
            rows.append((q.category, question_metrics([{conv.turns[i].dia_id} for i in top],
                                                      q.evidence)))
    return rows


def tune(ev: Evaluation, corpus: Corpus, data: Dataset, args: argparse.Namespace
         ) -> dict[str, Any]:
    """Leave-one-conversation-out weight choice; held-out metrics beside the default weights'."""
    if len({q.conversation for q in data.questions}) < 2:
        return {"skipped": "leave-one-conversation-out needs at least two conversations"}
    half_lives = [float(x) for x in args.half_lives.split(",") if x.strip()]
    grid = weight_grid(args.grid_step, half_lives)
    qs = data.questions
    per_grid = [[question_metrics(_dia(fast_rank(sig, w, DEPTH), corpus), q.evidence)
                 for sig, q in zip(ev.signals, qs, strict=True)] for w in grid]
    objective = np.array([[m["recall@10"] for m in row] for row in per_grid])
    tiebreak = np.array([[m["ndcg@10"] for m in row] for row in per_grid])
    groups = [q.conversation for q in qs]
    chosen, folds = leave_one_out(groups, objective, tiebreak, grid)
    tuned = pick(per_grid, chosen)
    default = [m for _, m in ev.rows["hybrid_default"]]
    cats = [q.category for q in qs]
    best_all = best_index(objective, tiebreak)
    r10 = {f"{w.vector:g}/{w.keyword:g}/{w.time:g}@{w.half_life_days:g}d": round(
        float(objective[i].mean()), 4) for i, w in enumerate(grid)}
    return {
        "protocol": "leave-one-conversation-out: weights chosen by mean recall@10 on the other "
                    "conversations (ties: nDCG@10, then nearest the default weights), applied "
                    "to the held-out one; every question is scored only by weights not tuned "
                    "on it",
        "grid": {"step": args.grid_step, "half_lives_days": half_lives, "points": len(grid)},
        "folds": folds,
        "held_out_tuned": summarize(list(zip(cats, tuned, strict=True)), seed=args.seed,
                                    resamples=args.resamples),
        "held_out_default": summarize(list(zip(cats, default, strict=True)), seed=args.seed,
                                      resamples=args.resamples),
        "tuned_minus_default": {m: paired_difference([t[m] for t in tuned],
                                                     [s[m] for s in default],
                                                     seed=args.seed, resamples=args.resamples)
                                for m in ("recall@10", "ndcg@10", "mrr")},
        "in_sample_best": {"weights": weights_dict(grid[best_all]),
                           "recall@10": round(float(objective[best_all].mean()), 4),
                           "note": "chosen on all conversations: optimistic, for reference"},
        "grid_recall@10_in_sample": dict(sorted(r10.items(), key=lambda kv: -kv[1])[:15]),
    }


def _headline(variants: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for name, summ in variants.items():
        o = summ["overall"]
        out[name] = {m: o[m]["mean"] for m in ("recall@5", "recall@10", "recall@25",
                                                "recall_all@10", "ndcg@10", "mrr")}
        out[name]["recall@10_ci95"] = [o["recall@10"]["ci95_lo"], o["recall@10"]["ci95_hi"]]
    return out


def _report(ev: Evaluation, bm25: Rows, corpus: Corpus, args: argparse.Namespace,
            data: Dataset) -> dict[str, Any]:
    rows = {**ev.rows, "bm25": bm25}
    variants = {k: summarize(v, seed=args.seed, resamples=args.resamples)
                for k, v in rows.items()}
    hyb = [m["recall@10"] for _, m in rows["hybrid_default"]]
    diffs = {f"hybrid_default_minus_{k}": paired_difference(
        hyb, [m["recall@10"] for _, m in v], seed=args.seed, resamples=args.resamples)
        for k, v in rows.items() if k != "hybrid_default"}
    by_conv: dict[str, dict[str, float]] = {}
    convs = [q.conversation for q in data.questions]
    for k, v in rows.items():
        vals: dict[str, list[float]] = {}
        for c, (_, m) in zip(convs, v, strict=True):
            vals.setdefault(c, []).append(m["recall@10"])
        by_conv[k] = {c: round(float(np.mean(x)), 4) for c, x in vals.items()}
    return {
        "corpus": corpus.describe(),
        "headline": _headline(variants),
        "variants": variants,
        "recall@10_differences": diffs,
        "recall@10_by_conversation": by_conv,
        "rerank_agrees_with_search": f"{ev.agree}/{len(ev.signals)}",
        "search_latency": {k: percentiles_ms(v) for k, v in ev.latency.items()},
    }


async def _build(args: argparse.Namespace, data: Dataset, embedder: DiskCachedEmbedder,
                 threshold: float) -> Corpus:
    settings = bench_settings(args.backend, args.dsn, threshold, args.model,
                              placement=args.placement)
    if args.ingest == "actors":
        if args.context != "none":
            raise SystemExit("--context needs --ingest engine")
        return await ingest_actors(data.conversations, settings, embedder)
    return await ingest_engine(data.conversations, settings, embedder, args.context,
                               args.context_turns, args.context_date)


async def _time_query_embedding(embedder: DiskCachedEmbedder, texts: Sequence[str]
                                ) -> dict[str, Any]:
    await embedder.load()
    await embedder.embed_raw(["warm up"])
    lat = []
    for t in texts:
        t0 = time.perf_counter()
        await embedder.embed_raw([t])
        lat.append(time.perf_counter() - t0)
    return {**percentiles_ms(lat), "note": "one question per call, uncached, in this process"}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.dataset == "madial":
        from . import retrieval_madial

        args.path = args.path or MADIAL_PATH
        found = await retrieval_madial.run(args)
        found.update(command=command(), machine=machine())
        return found
    args.path = args.path or DEFAULT_PATH
    data = load_locomo(args.path)
    if args.conversations:
        data.conversations = data.conversations[:args.conversations]
    # absolute: the VectorIndex actor (--ingest actors) opens the same cache
    embedder = DiskCachedEmbedder(args.model, Path(args.cache_dir).resolve())
    texts = [e for c in data.conversations
             for e in embedded_texts(c, args.context, args.context_turns, args.context_date)]
    questions = [q.question for q in data.questions]
    t0 = time.perf_counter()
    qv = await embedder.embed_query(questions)
    await embedder.embed(texts)  # fills the disk cache; the stores embed through it
    embed_s = time.perf_counter() - t0
    qvec = dict(zip(questions, qv, strict=True))
    result: dict[str, Any] = {
        "benchmark": "retrieval", "dataset": "locomo", "path": args.path,
        "command": command(), "machine": machine(),
        "backend": args.backend, "ingest": args.ingest, "data": data.describe(),
        "context": args.context,
        "context_shape": ({"turns": args.context_turns, "date": args.context_date}
                          if args.context != "none" else None),
        "reference": "LoCoMo paper, DRAGON retriever, turns as units, 50-conversation "
                     "version (a different corpus): recall@5/10/25 = 58.8/67.5/79.9",
    }
    bm25 = bm25_rows(data, args.context, args.context_turns, args.context_date)
    corpora: dict[str, Any] = {}
    thresholds = [args.dedup_threshold]
    tuned: dict[str, Any] = {}
    per_question: dict[str, list[float]] = {}
    while thresholds:
        thr = thresholds.pop(0)
        corpus = await _build(args, data, embedder, thr)
        try:
            ev = await evaluate(corpus, data, qvec, embedder.calibration)
            name = "dedup_off" if thr >= 1.0 else f"dedup_{thr:g}"
            corpora[name] = _report(ev, bm25, corpus, args, data)
            if not corpora.get("headline_corpus"):
                corpora["headline_corpus"] = name
                per_question = {k: [m["recall@10"] for _, m in v]
                                for k, v in {**ev.rows, "bm25": bm25}.items()}
                tuned = tune(ev, corpus, data, args)
            if thr < 1.0 and corpus.merges and not args.no_dedup_off:
                thresholds.append(1.0)
        finally:
            await corpus.close()
    head = corpora.pop("headline_corpus")
    result["embedding"] = {**embedder.stats(), "corpus_and_questions_s": round(embed_s, 2)}
    result["headline_corpus"] = head
    result["headline"] = corpora[head]["headline"]
    result["corpora"] = corpora
    result["tuned"] = tuned
    result["query_embedding"] = await _time_query_embedding(embedder,
                                                            questions[:args.embed_timing])
    result["targets"] = _targets(corpora[head], tuned)
    result.update(per_question_files(args, questions, per_question, "recall@10"))
    return result



def _targets(head: Mapping[str, Any], tuned: Mapping[str, Any]) -> dict[str, Any]:
    r10 = {k: v["recall@10"] for k, v in head["headline"].items()}
    diffs = head["recall@10_differences"]
    beats = {k: {"hybrid": r10["hybrid_default"], "other": r10[k],
                 "higher": r10["hybrid_default"] > r10[k],
                 "significant": diffs[f"hybrid_default_minus_{k}"]["ci95_lo"] > 0}
             for k in ("vector_only", "keyword_only_weights", "keyword_mode", "bm25")}
    d = tuned.get("tuned_minus_default", {}).get("recall@10", {})
    best = tuned.get("in_sample_best", {}).get("recall@10")
    return {"hybrid_recall@10": {"hybrid": r10["hybrid_default"], "target": TARGET_RECALL10,
                                 "met": r10["hybrid_default"] >= TARGET_RECALL10,
                                 "in_sample_best": best},
            "hybrid_recall@10_above": beats,
            "tuned_beats_default_held_out": {"diff": d, "higher": d.get("mean", 0) > 0,
                                          "significant": d.get("ci95_lo", 0) > 0}}
