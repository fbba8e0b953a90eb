"""The report's section on the consolidation pass (``python -m benchmarks
consolidation``): retrieval before and after a pass, the labelled pairs in one owner,
and a pass over a large owner timed beside a writer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .report_format import get, num, paragraphs, provenance, table, yes_no


def _points(stat: Any, scale: float, f: str = ".1f") -> str:
    if not isinstance(stat, Mapping):
        return "-"
    return (f"{num(scale * stat['mean'], f)} [{num(scale * stat['ci95_lo'], f)}, "
            f"{num(scale * stat['ci95_hi'], f)}]")


def _kinds(counts: Any) -> str:
    c = counts if isinstance(counts, Mapping) else {}
    return " / ".join(str(c.get(k, 0)) for k in ("merge", "supersede", "expire"))


def _quality_row(name: str, owners: Any, figures: Mapping[str, Any], paired: Any,
                 scale: float) -> list[Any]:
    f = figures
    return [name, owners, f"{num(f.get('memories_before'))} → {num(f.get('memories_after'))}",
            _kinds(f.get("proposals")), f"{num(f.get('applied'))} / {num(f.get('refused'))}",
            _points(get(paired, "before"), scale), _points(get(paired, "after"), scale),
            _points(get(paired, "after_minus_before"), scale, "+.2f"),
            num(get(paired, "questions_changed")),
            _points(get(paired, "strict", "after_minus_before"), scale, "+.2f"),
            yes_no(f.get("undo_exact"))]


def consolidation_section(items: Sequence[tuple[Path, dict[str, Any]]]) -> list[str]:
    """The newest run: retrieval before and after, the pairs, the scale pass."""
    lines = ["## Consolidation: a pass over an owner's look-alike memories", ""]
    runtime = [(p, d) for p, d in items if "runtime" in (d.get("parts") or {})]
    items = [(p, d) for p, d in items if set(d.get("parts") or {}) - {"runtime"}]
    if not items:
        return [*lines, "No consolidation results yet: run `python -m benchmarks "
                "consolidation --json`.", ""]
    return [*lines, *_passes(*items[-1]), *(_runtime(*runtime[-1]) if runtime else [])]


def _passes(path: Path, d: Mapping[str, Any]) -> list[str]:
    """What one run's passes did to retrieval, to the pairs, and at scale."""
    lines: list[str] = []
    parts = d.get("parts") or {}
    cuts = next((c for c in (get(parts, "locomo", "cuts"), get(parts, "scale", "cuts"))
                 if isinstance(c, Mapping)), {})
    lines += [f"Model `{d.get('model')}`, dedup threshold {num(cuts.get('dedup_threshold'))} "
              f"(raw cosine cuts, rewording: latin {num(get(cuts, 'latin', 'paraphrase'))}, "
              f"CJK {num(get(cuts, 'cjk', 'paraphrase'))}), no judge model. Each owner is "
              "built with the write path's judgement off (every memory stored beside the "
              "others, as an imported owner looks), then one pass proposes and applies "
              "every proposal (`consolidate(apply_all=True)`), and every applied proposal "
              "is undone. A merge's kept memory stands for the items of all it merged; a "
              "superseded memory's items are no longer found. Quality on the in-memory "
              "backend; proposals as merge / supersede / expire; the difference is after "
              "minus before, paired by question, with a bootstrap 95% interval; strict: a "
              "merge's kept memory standing only for its own items. Undo exact: memories, "
              "embeddings, histories and every question's figure as before the pass.", ""]
    rows: list[list[Any]] = []
    lo = parts.get("locomo") or {}
    for context, r in sorted((lo.get("by_context") or {}).items()):
        t = r.get("totals") or {}
        rows.append(_quality_row(f"LoCoMo, context {context}, recall@10", t.get("owners"),
                                 t, r.get("recall@10"), 100))
    for lang, r in sorted((get(parts, "madial", "languages") or {}).items()):
        rows.append(_quality_row(f"MADial {lang}, gold recall@5", 1, r, r.get("gold@5"), 100))
    if rows:
        lines += table(["data", "owners", "memories", "proposals", "applied / refused",
                        "before", "after", "difference", "questions changed",
                        "difference, strict", "undo exact"],
                       rows)
    shown = [f"- MADial {lang}, {e.get('kind')}: "
             + " / ".join(f"“{t}”" for t in e.get("texts") or []) + f" — {e.get('reason')}"
             for lang, r in sorted((get(parts, "madial", "languages") or {}).items())
             for e in (r.get("examples") or {}).get("merge", [])]
    if shown:
        lines += ["The merges a pass applied on MADial (up to five a language; each text a "
                  "memory of its own in the dataset, the kept one last):", "", *shown, ""]
    pairs = get(parts, "pairs", "languages") or {}
    if pairs:
        lines += ["The labelled look-alike pairs, every pair of a language in one owner "
                  "(the first memory stored before the second), one pass: the pairs whose "
                  "two memories one proposal touches. A `distinct` pair should never be "
                  "touched; an `update` should be superseded by its newer memory; a "
                  "`duplicate` merged.", ""]
        prow = []
        for lang, r in sorted(pairs.items()):
            for label in ("distinct", "update", "duplicate"):
                x = get(r, "labels", label) or {}
                prow.append([lang, label, num(x.get("pairs")), num(x.get("touched_both")),
                             num(x.get("merge")), num(x.get("supersede")),
                             num(x.get("supersede_newest_kept")),
                             num(len(r.get("across_pairs") or []))])
        lines += table(["lang", "label", "pairs", "touched both", "merged", "superseded",
                        "superseded, newer kept", "proposals across pairs (language)"],
                       prow)
        touched = [f"- distinct pair touched ({lang}, {w.get('kind')}): "
                   + " / ".join(f"“{t}”" for t in w.get("texts") or [])
                   + f" — {w.get('reason')}"
                   for lang, r in sorted(pairs.items())
                   for w in r.get("distinct_touched") or []]
        lines += [*touched, ""] if touched else []
    s = parts.get("scale")
    if s:
        w = s.get("writer") or {}
        c = s.get("consolidate") or {}
        lines += [f"A pass over one owner of {num(s.get('memories'), ',.0f')} memories on "
                  f"PostgreSQL ({s.get('postgres')}), at most {num(s.get('max_proposals'))} "
                  "proposals a pass, while a writer stores to the same owner every "
                  f"{num(w.get('interval_ms'), '.0f')} ms; a write's wait runs from when it "
                  "was due to when it returned.", ""]
        lines += table(
            ["step", "seconds", "proposals", "applied / refused", "writes", "longest wait ms",
             "wait p50 ms"],
            [["writer alone", "-", "-", "-", num(get(w, "no_pass", "writes")),
              num(get(w, "no_pass", "longest_wait_ms")),
              num(get(w, "no_pass", "wait_p50_ms"), ".1f")],
             ["`propose`", num(get(s, "propose", "s")), num(get(s, "propose", "proposals")),
              "-", num(get(w, "during_propose", "writes")),
              num(get(w, "during_propose", "longest_wait_ms")),
              num(get(w, "during_propose", "wait_p50_ms"), ".1f")],
             ["`consolidate(apply_all=True)`", num(c.get("s")), _kinds(c.get("proposals")),
              f"{num(c.get('applied'))} / {num(c.get('refused'))}",
              num(get(w, "during_consolidate", "writes")),
              num(get(w, "during_consolidate", "longest_wait_ms")),
              num(get(w, "during_consolidate", "wait_p50_ms"), ".1f")]])
        u = s.get("uncapped") or {}
        if u:
            found = u.get("found") or {}
            planted = u.get("planted") or {}
            lines += [f"The same pass without the cap (`proposals`, {num(u.get('s'))} s): "
                      f"{num(u.get('proposals'))} proposals (merge / supersede / expire "
                      f"{_kinds(u.get('counts'))}). Of the planted variants, restated "
                      f"texts merged with the text they restate: "
                      f"{num(found.get('restated_right', 0))} of "
                      f"{num(planted.get('restated'))}; updated texts superseding the "
                      f"text they update: {num(found.get('updated_right', 0))} of "
                      f"{num(planted.get('updated'))}, merged with it (wrong): "
                      f"{num(found.get('updated_merge', 0))}; proposals touching no "
                      f"planted pair: {num(found.get('touching_no_planted_pair', 0))}.", ""]
        one = c.get("longest_proposal_write_ms")
        waits = [get(w, k, "longest_wait_ms") for k in ("during_propose", "during_consolidate")]
        waited = max((x for x in waits if isinstance(x, (int, float))), default=None)
        wait_met = ("-" if one is None or waited is None
                    else "met" if waited <= 2 * one else "not met")
        lines += [f"One proposal's write: p50 {num(get(c, 'proposal_write', 'p50_ms'), '.1f')}"
                  f" ms, longest {num(one)} ms. Targets: a pass under "
                  f"{num(get(s, 'targets', 'pass_under_s'), '.0f')} s: "
                  f"{'met' if get(s, 'targets', 'pass_met') else 'not met'}; no write waiting "
                  f"during the pass longer than about one proposal's write (at most twice the "
                  f"longest; the longest wait {num(waited)} ms): {wait_met}. Load average "
                  f"after this part: {_load(s.get('load_after'))}.", ""]
    notes = [f"Load average (1, 5, 15 min) before: {_load(d.get('load_before'))}; after: "
             f"{_load(d.get('load_after'))}. {provenance(path, d)}"]
    return [*lines, *paragraphs(notes)]


def _runtime(path: Path, d: Mapping[str, Any]) -> list[str]:
    """A writer's waits during passes on a Ray memory system (the ``runtime`` part)."""
    r = get(d, "parts", "runtime") or {}
    phases = r.get("phases") or {}
    names = {"no_pass": "writer alone", "propose": "`propose` (proposals only)",
             "consolidate_apply_all": "`consolidate(apply_all=True)`"}
    rows = [[names.get(k, k), num(p.get("pass_s", p.get("s"))), num(p.get("writes")),
             num(p.get("wait_p50_ms"), ".1f"), num(p.get("wait_p95_ms"), ".1f"),
             num(p.get("longest_wait_ms"))]
            for k in names for p in phases.get(k) or []]
    lines = [f"On a Ray memory system over PostgreSQL, an owner of "
             f"{num(r.get('memories'), ',.0f')} memories and a writer storing through its "
             f"handle every {num(get(r, 'writer', 'interval_ms'), '.0f')} ms; the passes "
             "are computed by the system's proposer, a process of its own at a lower CPU "
             "priority (`runtime.proposer`). One row a pass.", "",
             *table(["while", "seconds", "writes", "wait p50 ms", "wait p95 ms",
                     "longest wait ms"], rows)]
    notes = [f"Load average (1, 5, 15 min) before: {_load(d.get('load_before'))}; after: "
             f"{_load(d.get('load_after'))}. {provenance(path, d)}"]
    return [*lines, *paragraphs(notes)]


def _load(x: Any) -> str:
    if not isinstance(x, Mapping):
        return "-"
    return ", ".join(num(x.get(k)) for k in ("1m", "5m", "15m"))
