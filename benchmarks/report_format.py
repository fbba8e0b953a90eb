"""Formatting shared by the report's sections: tables, numbers, provenance lines."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: How the benchmarks are run (the prefix of a command rebuilt from a result's options).
RUN = "python -m benchmarks"


def machine(d: Mapping[str, Any]) -> str:
    m = d.get("machine") or {}
    threads = (f", the model on {m['omp_num_threads']} thread(s) (OMP_NUM_THREADS)"
               if m.get("omp_num_threads") else "")
    speed = (f", a reference Python loop in {m['reference_ms']} ms (lower is faster)"
             if m.get("reference_ms") else "")
    return (f"{m.get('cpus', '?')} CPUs, {m.get('platform', '?')}, Python "
            f"{m.get('python', '?')}{threads}{speed}")


def command(d: Mapping[str, Any]) -> str:
    """The command that produced ``d``: as recorded, else rebuilt from its options."""
    if d.get("command"):
        return str(d["command"])
    if d.get("benchmark") == "search-latency":
        sample = (d.get("store_path") or {}).get("ops")
        extra = f" --store-sample {sample}" if sample is not None else ""
        return (f"{RUN} search-latency --backend {d.get('backend')} --owners "
                f"{d.get('owners')} --per-owner {d.get('per_owner')}{extra} --json "
                "(reconstructed)")
    if d.get("benchmark") == "concurrency":
        return (f"{RUN} concurrency --backend {d.get('backend')} --placement "
                f"{d.get('placement')} --writers {d.get('writers')} --tasks {d.get('tasks')} "
                "--json  (reconstructed)")
    if d.get("benchmark") == "extraction":
        calls = get(d, "pool", "calls") or get(d, "local", "calls")
        return (f"{RUN} extraction --calls {calls} --concurrency {d.get('concurrency')} "
                f"--delay-ms {num(d.get('delay_ms'), 'g')} --items {d.get('items_per_call')} "
                "--json (reconstructed)")
    return "(not recorded)"


def provenance(path: Path, d: Mapping[str, Any]) -> str:
    return f"Machine: {machine(d)}. Command: `{command(d)}`. File: `{path.name}`."


def pct(x: Any) -> str:
    return "-" if x is None else f"{100 * float(x):.1f}"


def table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return [*out, ""]


def ci(stat: Mapping[str, Any]) -> str:
    return f"{pct(stat['mean'])} [{pct(stat['ci95_lo'])}, {pct(stat['ci95_hi'])}]"


def engines(d: Mapping[str, Any]) -> str | None:
    """How many engines the run's local model had, where the run set it
    (``embedding_engines``)."""
    n = get(d, "machine", "embedding_engines")
    return None if n is None else str(n)


def get(d: Any, *keys: str) -> Any:
    """``d[k1][k2]...``, or ``None`` where a level is missing or not a mapping."""
    for key in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(key)
    return d


def num(x: Any, spec: str = "") -> str:
    """A number formatted with ``spec``, ``-`` when absent or not a number."""
    if x is None or isinstance(x, bool):
        return "-"
    try:
        return format(float(x), spec) if spec else str(x)
    except (TypeError, ValueError):
        return "-"


def positive(x: Any) -> float | None:
    """``x`` as a float when it is a finite positive number (what a log can take)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) and x > 0 else None


def yes_no(x: Any) -> str:
    return "yes" if x is True else "no" if x is False else "-"


def factor(f: float) -> str:
    return f"{f:,.0f}" if abs(f - round(f)) < 0.05 else f"{f:.1f}"


def paragraphs(lines: Sequence[str]) -> list[str]:
    """Each line its own Markdown paragraph."""
    return [x for line in lines for x in (line, "")]
