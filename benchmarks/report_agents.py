"""The report's section on many agents sharing owners (``agents``), and its README row."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .report_format import command, engines, get, num, paragraphs, provenance, table

KINDS = (("snapshot", "snapshot read"), ("search", "search"), ("store", "store"),
         ("l1_write", "L1 write"))
CHECKS = (("lost", "lost"), ("duplicates", "duplicates"), ("double_applied", "double-applied"))


def _ms(x: Any) -> str:
    """Milliseconds, two decimals below 10, one above; ``-`` when not measured."""
    v = num(x, ".2f")
    return v if v == "-" or float(v) < 10 else num(x, ".1f")


def _mix(d: Mapping[str, Any]) -> str:
    mix = d.get("mix") or {}
    return "/".join(num(100 * float(mix[k]), "g") for k, _ in KINDS if k in mix) or "-"


def _checks(d: Mapping[str, Any]) -> str:
    return "/".join(str(d.get(k, "-")) for k, _ in CHECKS)


def _team_wait(d: Mapping[str, Any]) -> str:
    return _ms(get(d, "writer_wait", "l1_write_while_storing", "max_ms"))


def _model(d: Mapping[str, Any]) -> str:
    """The run's model, with its engines where the run set them (``embedding_engines``)."""
    n = engines(d)
    return str(d.get("embedding_model", "-")) + ("" if n is None else f", {n} engines")


def agents_section(items: Sequence[tuple[Path, dict[str, Any]]]) -> list[str]:
    """Every ``agents`` run (oldest first); nothing when there is none."""
    if not items:
        return []
    lines = ["## Many agents sharing owners", "",
             "Agents in Ray tasks, each working for one of a few owners and all for a "
             "shared team owner, mixing snapshot reads, searches (their owner's memories "
             "and the team's), L2 stores of texts of their own and L1 writes "
             "(`python -m benchmarks agents`); the mix is the share of each, in that "
             "order. Latencies are p50 / p95 ms per operation. Team L1 write while "
             "storing: the longest L1 write on the team owner while a store on it was in "
             "flight (the whole call, so an upper bound of its wait for the owner's "
             "writer). Checks: lost / duplicates / double-applied, from the replay of "
             "every owner's acknowledged writes.", ""]
    rows = []
    for path, d in items:
        lat = [f"{_ms(get(d, 'latency_by_kind', k, 'p50_ms'))} / "
               f"{_ms(get(d, 'latency_by_kind', k, 'p95_ms'))}" for k, _ in KINDS]
        load = get(d, "machine", "load_average", "before")
        rows.append([d.get("backend", "-"), d.get("placement", "-"),
                     _model(d), d.get("agents", "-"),
                     f"{d.get('owners', '-')} + team", _mix(d), num(d.get("ops"), ",.0f"),
                     num(d.get("ops_per_s"), ",.0f"), *lat, _team_wait(d), _checks(d),
                     " ".join(str(x) for x in load) if isinstance(load, list) else "-",
                     f"`{path.name}`"])
    lines += table(["backend", "placement", "model", "agents", "owners", "mix", "ops",
                     "ops/s", *(f"{label} ms" for _, label in KINDS),
                     "team L1 write while storing ms", "checks", "load before", "file"],
                    rows)
    return [*lines, *paragraphs([f"Newest: {provenance(*items[-1])}"])]


def agents_rows(results: Mapping[str, Sequence[tuple[Path, dict[str, Any]]]]
                ) -> list[tuple[str, str, str]]:
    """The README's row: the newest ``agents`` run on PostgreSQL with the default mix and
    engines (what a user starts with), else the newest on PostgreSQL, if any."""
    runs = [d for _, d in results.get("agents", []) if d.get("backend") == "postgres"]
    if not runs:
        return []
    usual = [d for d in runs if _mix(d) == "50/25/15/10" and engines(d) is None]
    d = (usual or runs)[-1]
    p95 = ", ".join(f"{label} {_ms(get(d, 'latency_by_kind', k, 'p95_ms'))}"
                    for k, label in KINDS)
    checks = ", ".join(f"{d.get(k, '-')} {label}" for k, label in CHECKS)
    return [(f"{d.get('agents')} agents on {d.get('owners')} owners and a team owner, "
             f"mix {_mix(d)} % (snapshot reads / searches / stores / L1 writes), "
             f"{d.get('embedding_model')}",
             f"{num(d.get('ops_per_s'), ',.0f')} ops/s; p95 ms: {p95}; team L1 write while "
             f"storing at most {_team_wait(d)} ms; {checks}",
             f"`{command(d)}`")]
