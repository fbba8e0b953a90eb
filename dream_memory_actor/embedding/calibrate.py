"""Fit a model's calibration on the shipped labelled pairs, and measure it.

::

    python -m dream_memory_actor.embedding.calibrate --model local:multilingual-e5-small
    python -m dream_memory_actor.embedding.calibrate --model openai/text-embedding-3-small \\
        --output my-calibration.json      # then embedding_calibration: my-calibration.json

The model is opened from the settings (``DREAM_MEMORY_*`` variables, e.g. the
API base and key of a litellm model), with ``--model`` as ``embedding_model``.
The curves are fitted on the fit part of ``data/pairs.tsv`` and ``data/distinct.tsv``
and printed as JSON
(``--output`` also writes them to a file; ``--update-shipped`` writes them into
the package's ``data/calibrations.json``, for the local models). Then the share
of held-apart pairs merged at the dedup threshold is printed per label and
language: on the test part, which the fit never saw.

A model fitted on several languages also gets a memory curve per language,
fitted on that language's pairs alone: a multilingual model puts the pairs of one
language much closer than another's (multilingual-e5-small's related Chinese pairs
sit near its English paraphrases), so on one curve for all of them a calibrated
dedup threshold would merge too much in one language and too little in the other.
The write path judges a new memory on the curve of its script, and the merge
rates below are measured the same way.

English-only models (:data:`ENGLISH_ONLY`) are fitted on the English pairs only:
their cosines between Chinese texts carry no meaning (unrelated Chinese pairs
score as high as related ones), and a monotone map cannot give them one. Their
memory curve is the English one, so they carry no curve per language.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path

import numpy as np

from .base import CachedEmbedder, Embedder
from .calibration import Calibration, Pair, _shipped, fit_curve, labelled_pairs

__all__ = ["ENGLISH_ONLY", "fit", "main", "merge_rates", "pair_scores"]

#: Models fitted (and tested) on English pairs only.
ENGLISH_ONLY = frozenset({"local:all-MiniLM-L6-v2",
                          "local:sentence-transformers/all-MiniLM-L6-v2"})
LANGS = ("en", "zh")


def fit_langs(model: str) -> tuple[str, ...]:
    return ("en",) if model in ENGLISH_ONLY else LANGS


async def pair_scores(embedder: Embedder | CachedEmbedder, pairs: Sequence[Pair]
                      ) -> tuple[list[float], list[float]]:
    """Raw cosines of each pair: memory-to-memory, and query (``a``) to memory (``b``)."""
    cached = embedder if isinstance(embedder, CachedEmbedder) else CachedEmbedder(embedder)
    texts = list(dict.fromkeys([p.a for p in pairs] + [p.b for p in pairs]))
    queries = list(dict.fromkeys(p.a for p in pairs))
    mem = dict(zip(texts, np.asarray(await cached.embed(texts)), strict=True))
    qry = dict(zip(queries, np.asarray(await cached.embed_query(queries)), strict=True))

    def cos(u: np.ndarray, v: np.ndarray) -> float:
        return float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))

    memory = [cos(mem[p.a], mem[p.b]) for p in pairs]
    query = [cos(qry[p.a], mem[p.b]) for p in pairs]
    return memory, query


def _by_label(pairs: Sequence[Pair], scores: Sequence[float]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"unrelated": [], "related": [], "paraphrase": [],
                                   "distinct": []}
    for p, s in zip(pairs, scores, strict=True):
        out[p.label].append(s)
    return out


async def fit(embedder: Embedder | CachedEmbedder, model: str,
              langs: Iterable[str] | None = None) -> Calibration:
    """The calibration of ``embedder`` fitted on the fit pairs of ``langs`` (the distinct
    pairs guard the memory curves only, see :mod:`.calibration`), with a memory curve
    per language when there are several."""
    wanted = tuple(langs or fit_langs(model))
    pairs = labelled_pairs("fit", wanted)
    memory, query = await pair_scores(embedder, pairs)
    by_query = _by_label(pairs, query)
    by_query.pop("distinct")
    fitted = tuple(dict.fromkeys(p.lang for p in pairs))
    memory_langs = () if len(fitted) < 2 else tuple(
        (lang, fit_curve(_by_label(*_of_lang(pairs, memory, lang)))) for lang in sorted(fitted))
    return Calibration(model, fit_curve(_by_label(pairs, memory)), fit_curve(by_query),
                       memory_langs)


def _of_lang(pairs: Sequence[Pair], scores: Sequence[float], lang: str
             ) -> tuple[list[Pair], list[float]]:
    kept = [(p, s) for p, s in zip(pairs, scores, strict=True) if p.lang == lang]
    return [p for p, _ in kept], [s for _, s in kept]


async def merge_rates(embedder: Embedder | CachedEmbedder, calibration: Calibration,
                      threshold: float = 0.85, split: str = "test",
                      langs: Iterable[str] = LANGS) -> dict[str, dict[str, float]]:
    """Share of pairs whose calibrated memory cosine is above ``threshold`` (would merge),
    per language and label, on the held-apart pairs by default; each language is cut on
    its own memory curve when the calibration has one, as the write path does."""
    pairs = labelled_pairs("test" if split == "test" else "fit", langs)
    memory, _ = await pair_scores(embedder, pairs)
    out: dict[str, dict[str, float]] = {}
    for lang in dict.fromkeys(p.lang for p in pairs):
        raw = calibration.dedup_threshold(threshold, lang)
        for label, scores in _by_label(*_of_lang(pairs, memory, lang)).items():
            merged = sum(1 for s in scores if s > raw)
            out.setdefault(lang, {})[label] = merged / len(scores) if scores else 0.0
    return out


def update_shipped(calibration: Calibration, langs: Sequence[str]) -> Path:
    path = Path(str(resources.files(__package__).joinpath("data/calibrations.json")))
    data = _shipped()
    models = data.setdefault("models", {})
    entry = calibration.to_json()
    # "langs" says what the curves of all languages were fitted on, so it sits by them
    models[calibration.model] = {"model": entry["model"], "memory": entry["memory"],
                                 "query": entry["query"], "langs": list(langs), **entry}
    data["models"] = dict(sorted(models.items()))
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


async def _run(args: argparse.Namespace) -> int:
    from ..config import MemorySettings
    from . import open_inner_embedder

    settings = MemorySettings(embedding_model=args.model)
    inner = await open_inner_embedder(settings)
    assert inner is not None
    embedder = CachedEmbedder(inner, max_entries=100_000)
    langs = tuple(args.langs.split(",")) if args.langs else fit_langs(args.model)
    calibration = await fit(embedder, args.model, langs)
    print(json.dumps(calibration.to_json(), indent=2))
    if args.output:
        Path(args.output).write_text(json.dumps(calibration.to_json(), indent=2) + "\n",
                                     encoding="utf-8")
        print(f"written to {args.output}", file=sys.stderr)
    if args.update_shipped:
        print(f"written to {update_shipped(calibration, langs)}", file=sys.stderr)
    threshold = settings.dedup_threshold
    rates = await merge_rates(embedder, calibration, threshold, langs=LANGS)
    print(f"held-apart pairs merged at dedup_threshold={threshold} "
          f"(raw cosine > {calibration.dedup_threshold(threshold):.4f} on the curve of all "
          f"languages); fitted on {','.join(langs)}:", file=sys.stderr)
    for lang, by_label in rates.items():
        cells = "  ".join(f"{label} {share:6.1%}" for label, share in by_label.items())
        print(f"  {lang} (raw > {calibration.dedup_threshold(threshold, lang):.4f}): {cells}",
              file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dream_memory_actor.embedding.calibrate",
        description="Fit an embedding model's calibration on the shipped labelled pairs.")
    parser.add_argument("--model", required=True,
                        help="an embedding_model value, e.g. local:multilingual-e5-small")
    parser.add_argument("--langs", help="comma-separated languages to fit on (default: en,zh; "
                                        "en for English-only models)")
    parser.add_argument("--output", help="also write the calibration to this JSON file")
    parser.add_argument("--update-shipped", action="store_true",
                        help="write it into the package's data/calibrations.json")
    return asyncio.run(_run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
