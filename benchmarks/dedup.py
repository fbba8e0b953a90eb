"""What a store does with a memory that looks like a stored one, per label and language.

``python -m benchmarks dedup --path PAIRS.jsonl [--model M ...] --json``: for each
labelled pair of the file (one JSON object a line: ``lang``, ``a``, ``b``, ``label``
in duplicate / update / distinct), ``a`` is stored into a fresh owner, then ``b``,
through ``MemoryEngine.store`` on the in-memory backend (the judgement is the same
on every backend: ``storage.dedup``). What the second store did is its outcome:
``merged`` (a duplicate), ``superseded`` (an update, both kept in the history),
``kept`` (stored beside: distinct or unsure). The confusion of label against
outcome is reported per language, for each model and with no embedder
(``none``). The shipped calibration pairs that are unrelated or related
(``embedding/data/pairs.tsv``) are stored the same way and counted as a check:
none of them should be merged or superseded. So are the shipped pairs the
calibration holds apart from its fit (its ``test`` split), paraphrases and distinct
events (``data/distinct.tsv``): written apart from the labelled file, they show
how the judgement does on pairs it was not worked out on; a paraphrase should merge,
a distinct event never.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.embedding import open_embedder
from dream_memory_actor.embedding.calibration import labelled_pairs
from dream_memory_actor.engine import MemoryEngine
from dream_memory_actor.models import StoreResult
from dream_memory_actor.storage.memory import InMemoryStructuredStore, InMemoryVectorStore

from .stats import command, machine

MODELS = ("local:multilingual-e5-small", "local:use-multilingual", "local:all-MiniLM-L6-v2",
          "none")
ENGLISH_ONLY = frozenset({"local:all-MiniLM-L6-v2"})


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--path", required=True, help="labelled pairs, one JSON object a line")
    p.add_argument("--model", action="append", choices=MODELS,
                   help="embedding model (repeatable; default: all, and none)")


def outcome(r: StoreResult) -> str:
    if r.merged:
        return "merged"
    return "superseded" if r.superseded else "kept"


async def _engine(model: str) -> MemoryEngine:
    settings = MemorySettings(backend="memory",
                              embedding_model=None if model == "none" else model)
    embedder = await open_embedder(settings)
    return MemoryEngine(settings, InMemoryStructuredStore(),
                        InMemoryVectorStore(None if embedder is None else embedder.dim),
                        embedder)


async def _judged(engine: MemoryEngine, pairs: Sequence[tuple[str, str]], kind: str
                  ) -> list[StoreResult]:
    """The second store's result of each pair, each pair in an owner of its own."""
    out = []
    for i, (a, b) in enumerate(pairs):
        owner = f"{kind}-{i}"
        await engine.store(owner, a)
        out.append(await engine.store(owner, b))
    return out


def _by_lang(pairs: Sequence[tuple[str, str]], results: Sequence[StoreResult]
             ) -> dict[str, dict[str, dict[str, int]]]:
    """Outcome counts per language and label of ``pairs`` (lang, label)."""
    found: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    for (lang, label), res in zip(pairs, results, strict=True):
        found[lang][label][outcome(res)] += 1
    return {lang: {label: dict(c) for label, c in by.items()} for lang, by in found.items()}


async def run_model(model: str, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    engine = await _engine(model)
    langs = ("en",) if model in ENGLISH_ONLY else ("en", "zh")
    rows = [r for r in rows if r["lang"] in langs]
    results = await _judged(engine, [(r["a"], r["b"]) for r in rows], "labelled")
    mistakes = []
    for r, res in zip(rows, results, strict=True):
        got = outcome(res)
        want = {"duplicate": "merged", "update": "superseded", "distinct": "kept"}[r["label"]]
        if got != want:
            mistakes.append({"id": r.get("id"), "label": r["label"], "outcome": got,
                             "judgement": res.judgement, "reason": res.reason})
    shipped = [p for p in labelled_pairs() if p.lang in langs]
    checks = [p for p in shipped if p.label in ("unrelated", "related")]
    check_results = await _judged(engine, [(p.a, p.b) for p in checks], "calibration")
    check: dict[str, Counter[str]] = defaultdict(Counter)
    for p, res in zip(checks, check_results, strict=True):
        check[f"{p.label}-{p.lang}"][outcome(res)] += 1
    held = [p for p in shipped if p.split == "test" and p.label in ("paraphrase", "distinct")]
    held_results = await _judged(engine, [(p.a, p.b) for p in held], "held-apart")
    await engine.close()
    return {
        "model": model,
        "confusion": _by_lang([(r["lang"], r["label"]) for r in rows], results),
        "calibration_pairs": {k: dict(v) for k, v in check.items()},
        "held_apart_pairs": _by_lang([(p.lang, p.label) for p in held], held_results),
        "mistakes": mistakes,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rows = [json.loads(line) for line in Path(args.path).read_text(encoding="utf-8").splitlines()
            if line.strip()]
    before = {**machine(), "load_average": os.getloadavg()}
    models = args.model or list(MODELS)
    runs = [await run_model(m, rows) for m in models]
    return {"benchmark": "dedup", "command": command(), "pairs": Path(args.path).name,
            "machine": before, "load_average_after": os.getloadavg(), "runs": runs}
