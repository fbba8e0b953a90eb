"""The report's section on what a memory's context costs in latency
(``python -m benchmarks context-latency``): stores, the model alone, searches."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .report_format import get, num, paragraphs, provenance, table, yes_no

#: The measures of a run, in the order shown.
_MEASURES = (("store", "store (embedding included)"),
             ("embedding", "the model alone, on what the store embeds"),
             ("search_vector_given", "search, query vector given"),
             ("search_with_embedding", "search, query embedded by it"))
_TARGETS = (("store_with_context_at_most_1.3x", "store with context at most 1.3x"),
            ("search_unchanged_vector_given", "search unchanged (vector given)"),
            ("search_unchanged_with_embedding", "search unchanged (query embedded)"))


def context_latency_section(items: Sequence[tuple[Path, dict[str, Any]]]) -> list[str]:
    """Every kept run (oldest first): one table per run, its targets and its load."""
    lines = ["## Memories that carry their context: latency", ""]
    if not items:
        return [*lines, "No context-latency results yet: run `python -m benchmarks "
                "context-latency --json`.", ""]
    lines += ["Each LoCoMo turn stored twice through `MemoryEngine.store` with the real "
              "model: alone (plain), and with the context the retrieval benchmark's "
              "`--context beside` gives it (the session's date and its previous turns). "
              "The two stores of a turn, and the two searches of a question, alternate "
              "which goes first. Ratios are context over plain: of the p50s, and the "
              "median of the per-pair ratios. \"Search unchanged\" is read as a ratio of "
              "at most 1.1. Each run says how its store embedded a context.", ""]
    for path, d in items:
        rows: list[list[Any]] = []
        for key, label in _MEASURES:
            s = d.get(key) or {}
            rows.append([label, num(get(s, "plain", "p50_ms"), ".1f"),
                         num(get(s, "plain", "p95_ms"), ".1f"),
                         num(get(s, "context", "p50_ms"), ".1f"),
                         num(get(s, "context", "p95_ms"), ".1f"),
                         num(s.get("p50_ratio_context_over_plain"), ".2f"),
                         num(get(s, "pair_ratio_context_over_plain", "median"), ".2f"),
                         num(get(s, "plain", "n"))])
        chars = get(d, "embedding", "median_chars") or {}
        lines += [f"`{d.get('model')}` on {d.get('backend')}, {num(d.get('turns'))} turns and "
                  f"{num(d.get('questions'))} questions of {len(d.get('conversations') or [])} "
                  f"conversations; context: the date and {get(d, 'context_shape', 'turns')} "
                  f"previous turns; median characters embedded: "
                  f"{num(chars.get('plain'), '.0f')} plain, {num(chars.get('context'), '.0f')} "
                  f"with context. {_embedded(d)}", ""]
        lines += table(["measure", "plain p50 ms", "p95 ms", "context p50 ms", "p95 ms",
                        "p50 ratio", "median pair ratio", "pairs"], rows)
        met = [f"{label}: {yes_no(get(d, 'targets', key, 'met'))}" for key, label in _TARGETS]
        lines += paragraphs([
            "Targets met: " + "; ".join(met) + ".",
            f"Load average at start: {get(d, 'load_average', 'start')}; at end: "
            f"{get(d, 'load_average', 'end')}. {provenance(path, d)}"])
    return lines


def _embedded(d: dict[str, Any]) -> str:
    """How the run's stores embedded a context, and what the model was sent."""
    texts = get(d, "store", "model_texts")
    if not isinstance(texts, dict):  # runs before a context's lines were embedded apart
        return ("The context joined to the turn and embedded as one text, the embedding "
                "cache off.")
    return ("The turn and each line of its context embedded apart, each arm with an "
            "embedding cache of its own: the model embedded "
            f"{num(texts.get('plain'))} texts for the plain stores and "
            f"{num(texts.get('context'))} for the stores with context.")
