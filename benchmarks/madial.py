"""MADial-Bench for retrieval: memories, queries and metrics (pure functions).

The protocol of ``shared/bench/madial/README.md``:

- each memory's ``event`` is one memory of its user, stamped with its ``time``
  (a date, taken as midnight UTC); "now" is the day after the newest memory;
- for each dialogue the query is the user's turns before the first ``test-turn``
  index (every line not spoken by ``<Assistant>``, without the speaker tag and the
  quotes), joined with spaces;
- the gold memory is the first ``relevant-id``; every listed id is relevant.

Metrics per dialogue: gold recall@1/3/5 (the gold memory in the top k), MRR@10 of
the gold memory, and whether any relevant memory is in the top 5.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

#: The metrics computed for every dialogue.
METRICS = ("gold@1", "gold@3", "gold@5", "mrr@10", "any@5")
#: Hits needed per dialogue to compute every metric.
DEPTH = 10
LANGUAGES = ("en", "zh")

_SPEAKER = re.compile(r"^\s*<([^>]+)>\s*:\s*")


@dataclass(frozen=True)
class Memory:
    id: str
    text: str
    at: datetime
    scene: str = ""
    emotion: str = ""

    def context(self, fields: Sequence[str]) -> str | None:
        """What the record says beside the event (``retrieval --context beside``): its
        date, scene and emotion, those of ``fields``."""
        parts = {"time": f"{self.at.day} {self.at:%B %Y}", "scene": self.scene,
                 "emotion": self.emotion}
        return ", ".join(parts[f] for f in fields if parts[f]) or None


@dataclass(frozen=True)
class Dialogue:
    query: str
    gold: str
    relevant: frozenset[str]


@dataclass
class MadialSet:
    language: str
    owner: str
    memories: list[Memory]
    dialogues: list[Dialogue]
    now: datetime

    def describe(self) -> dict[str, Any]:
        return {"language": self.language, "memories": len(self.memories),
                "dialogues": len(self.dialogues), "now": self.now.isoformat()}


def _utterance(line: str) -> tuple[str | None, str]:
    """(speaker or None, text without tag and quotes) of one dialogue line."""
    m = _SPEAKER.match(line)
    speaker = m.group(1).strip() if m else None
    text = line[m.end():] if m else line
    return speaker, text.strip().strip('"“”').strip()


def query_of(lines: Sequence[str], test_turn: int) -> str:
    """The user's turns before ``test_turn``, joined with spaces."""
    parts = []
    for line in lines[:test_turn]:
        if line.strip() in ("<BOD>", "<EOD>"):
            continue
        speaker, text = _utterance(line)
        if speaker == "Assistant" or not text:
            continue
        parts.append(text)
    return " ".join(parts)


def parse(memory_lines: Sequence[str], dialogue_lines: Sequence[str], language: str
          ) -> MadialSet:
    memories = []
    for line in memory_lines:
        if not line.strip():
            continue
        for key, m in json.loads(line).items():
            at = datetime.strptime(m["time"], "%Y-%m-%d").replace(tzinfo=timezone.utc)
            memories.append(Memory(str(m.get("id", key)), str(m["event"]), at,
                                   str(m.get("scene") or ""), str(m.get("emotion") or "")))
    known = {m.id for m in memories}
    dialogues = []
    for line in dialogue_lines:
        if not line.strip():
            continue
        d = json.loads(line)
        relevant = [str(i) for i in d["relevant-id"]]
        if not relevant or relevant[0] not in known:
            raise ValueError(f"dialogue's gold memory {relevant[:1]} is not in the memory file")
        dialogues.append(Dialogue(query_of(d["dialogue"], int(min(d["test-turn"]))),
                                  relevant[0], frozenset(relevant)))
    now = max(m.at for m in memories) + timedelta(days=1)
    return MadialSet(language, f"madial-{language}-user1", memories, dialogues, now)


def load_madial(folder: str | Path, language: str) -> MadialSet:
    """The ``language`` half in ``folder`` (``madial_dev_<lang>_{memory,dialogue}.jsonl``)."""
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}, got {language!r}")
    base = Path(folder)
    mem, dia = (base / f"madial_dev_{language}_{part}.jsonl" for part in ("memory", "dialogue"))
    for p in (mem, dia):
        if not p.is_file():
            raise FileNotFoundError(
                f"MADial file {p} is missing: the benchmark reads the data from outside the "
                "repository (see --path)")
    return parse(mem.read_text("utf-8").splitlines(), dia.read_text("utf-8").splitlines(),
                 language)


def dialogue_metrics(ranked: Sequence[str], d: Dialogue) -> dict[str, float]:
    """The metrics of one dialogue for a ranked list of memory ids."""
    top = list(ranked[:DEPTH])
    rank = top.index(d.gold) + 1 if d.gold in top else None
    return {
        "gold@1": float(rank is not None and rank <= 1),
        "gold@3": float(rank is not None and rank <= 3),
        "gold@5": float(rank is not None and rank <= 5),
        "mrr@10": 0.0 if rank is None else 1.0 / rank,
        "any@5": float(any(i in d.relevant for i in top[:5])),
    }
