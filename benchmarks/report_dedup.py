"""The report's section on the write path's judgement of look-alike memories
(``python -m benchmarks dedup``): label against outcome, per model and language."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .report_format import paragraphs, provenance, table

#: What each label should become, and the outcomes the targets count as wrong.
_RIGHT = {"duplicate": "merged", "update": "superseded", "distinct": "kept"}


def dedup_section(items: Sequence[tuple[Path, dict[str, Any]]]) -> list[str]:
    """The newest run of each model: one row per model, language and label."""
    lines = ["## Look-alike memories: what a store does with them", ""]
    if not items:
        return [*lines, "No dedup results yet: run `python -m benchmarks dedup --path "
                "PAIRS --model M --json`.", ""]
    lines += ["Each labelled pair is stored in a fresh owner, the first memory then the "
              "second, on the in-memory backend, and the outcome of the second store read "
              "back: merged into the first (`merged`), superseding it with the first kept "
              "in its history (`superseded`), or stored beside it (`kept`). A `distinct` "
              "pair must never be merged or superseded; an `update` never merged silently; "
              "a `duplicate` is right when merged. The calibration pairs (related and "
              "unrelated texts of the model's calibration) count how many were merged.", ""]
    newest: dict[str, tuple[Path, dict[str, Any], dict[str, Any]]] = {}
    for path, d in items:
        for run in d.get("runs") or []:
            newest[str(run.get("model"))] = (path, d, run)
    rows: list[list[Any]] = []
    cal_rows: list[list[Any]] = []
    held_rows: list[list[Any]] = []
    notes: list[str] = []
    for model, (path, d, run) in sorted(newest.items()):
        confusion: Mapping[str, Mapping[str, Mapping[str, int]]] = run.get("confusion") or {}
        for lang, labels in sorted(confusion.items()):
            for label in ("distinct", "update", "duplicate"):
                got = labels.get(label) or {}
                total = sum(got.values())
                rows.append([f"`{model}`", lang, label, total,
                             *(got.get(o, 0) for o in ("merged", "superseded", "kept")),
                             f"{got.get(_RIGHT[label], 0)}/{total}"])
        held: Mapping[str, Mapping[str, Mapping[str, int]]] = run.get("held_apart_pairs") or {}
        for lang, labels in sorted(held.items()):
            for label, got in sorted(labels.items()):
                held_rows.append([f"`{model}`", lang, label, sum(got.values()),
                                  *(got.get(o, 0) for o in ("merged", "superseded", "kept"))])
        for name, got in sorted((run.get("calibration_pairs") or {}).items()):
            cal_rows.append([f"`{model}`", name, sum(got.values()), got.get("merged", 0)])
        notes.append(f"`{model}`: {provenance(path, d)} Load before: "
                     f"{(d.get('machine') or {}).get('load_average', '-')}; after: "
                     f"{d.get('load_average_after', '-')}.")
    lines += table(["model", "lang", "label", "pairs", "merged", "superseded", "kept",
                    "right"], rows)
    if cal_rows:
        lines += table(["model", "calibration pairs", "pairs", "merged"], cal_rows)
    if held_rows:
        lines += ["The shipped pairs the calibration holds apart from its fit, written apart "
                  "from the labelled file: a `paraphrase` should merge, a `distinct` event "
                  "(another person, place, date or amount) should never be merged or "
                  "superseded.", ""]
        lines += table(["model", "lang", "held-apart pairs", "pairs", "merged", "superseded",
                        "kept"], held_rows)
    return [*lines, *paragraphs(notes)]
