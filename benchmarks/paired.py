"""One run's per-question figures against another's: ``--questions-out`` writes them,
``--paired-with`` reads a file of another run (other code or settings, the same
questions) and reports this run minus that one, question by question, with a paired
bootstrap interval (``locomo.paired_difference``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .locomo import paired_difference


def per_question_files(args: Any, questions: Sequence[str],
                       values: Mapping[str, Sequence[float]], metric: str) -> dict[str, Any]:
    """Write ``values`` (row -> one figure per question) to ``args.questions_out``;
    with ``args.paired_with``, the paired differences as ``{"paired_with": ...}``."""
    if getattr(args, "questions_out", None):
        Path(args.questions_out).write_text(json.dumps(
            {"metric": metric, "questions": list(questions),
             "values": {k: list(v) for k, v in values.items()}}), encoding="utf-8")
    path = getattr(args, "paired_with", None)
    if not path:
        return {}
    other = json.loads(Path(path).read_text(encoding="utf-8"))
    if other.get("questions") != list(questions) or other.get("metric") != metric:
        raise SystemExit(f"{Path(path).name}: not the same questions and {metric}")
    theirs = other["values"]
    return {"paired_with": {
        "file": Path(path).name, "metric": metric,
        "this_minus_that": {k: paired_difference(list(v), theirs[k], seed=args.seed,
                                                  resamples=args.resamples)
                            for k, v in values.items() if k in theirs}}}
