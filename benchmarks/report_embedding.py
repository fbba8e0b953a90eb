"""The report's section on the local embedding models: query-embedding latency and
ingest rate (``python -m benchmarks embedding-speed``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .report_format import get, num, paragraphs, provenance, table


def embedding_speed_section(items: Sequence[tuple[Path, dict[str, Any]]]) -> list[str]:
    """Every kept run (oldest first): one row per model, with the machine's load."""
    lines = ["## Local embedding models: query latency and ingest rate", ""]
    if not items:
        return [*lines, "No embedding-speed results yet: run `python -m benchmarks "
                "embedding-speed --json`.", ""]
    lines += ["One search query embedded at a time (the query role, no cache), and "
              "memories stored one at a time through `MemoryEngine.store` on the in-memory "
              "backend (embedding, dedup check and write): the ingest rate includes the "
              "embedding. Texts: the library's labelled pairs, English and Chinese "
              "alternating. The models take turns in rounds, so a busy spell of the shared "
              "machine hits each alike; its load average is given with each run, since "
              "these figures move with it. Model loading is not counted (load s). Among "
              "stores: the queries again while one writer stores memories meanwhile (- in "
              "runs from before it was measured).", ""]
    rows: list[list[Any]] = []
    notes: list[str] = []
    for path, d in items:
        for m in d.get("models") or []:
            rows.append([f"`{m.get('model')}`", num(m.get("dim")),
                         num(get(m, "query_embedding", "p50_ms"), ".1f"),
                         num(get(m, "query_embedding", "p95_ms"), ".1f"),
                         num(get(m, "query_embedding_among_stores", "p50_ms"), ".1f"),
                         num(get(m, "ingest", "memories_per_s"), ",.1f"),
                         num(get(m, "ingest", "memories"), ",.0f"),
                         num(m.get("load_s"), ".1f"), f"`{path.name}`"])
        up = d.get("uptime") or {}
        notes.append(f"`{path.name}`: load before: {up.get('before', '-')}; after: "
                     f"{up.get('after', '-')}; nice {num(d.get('nice'))}. {provenance(path, d)}")
    lines += table(["model", "dims", "query embedding p50 ms", "p95 ms",
                    "among stores: p50 ms", "ingest memories/s",
                    "memories stored", "load s", "file"], rows)
    return [*lines, *paragraphs(notes)]
