"""LoCoMo for retrieval: the dataset as memories and questions, and the metrics.

Pure functions only (no storage, no embedder). The protocol is the one of
``shared/bench/locomo/README.md``:

- every dialogue turn is one memory of the conversation's owner, stamped with its
  session's date and time; the memory text is ``"<speaker>: <text>"`` plus
  ``" [shares <caption>]"`` when the turn shared an image (the caption is all a
  text retriever can see of it);
- "now" is the date of the last session that has turns;
- questions of categories 1-4 with evidence; malformed evidence strings are split
  on ``;`` and normalised (``"D:11:26"`` -> ``"D11:26"``, ``"D30:05"`` -> ``"D30:5"``),
  what cannot be parsed, or names no turn of the conversation, is dropped and counted;
- ``observation``, ``session_summary`` and ``event_summary`` are never read (they leak
  evidence ids).

Metrics are per question, over a ranked list in which each hit stands for a set
of dia_ids (a memory that absorbed near-duplicate turns stands for all of them).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from dream_memory_actor.text import context_lines, normalize_content, with_context

#: LoCoMo's question categories (5, adversarial, has no evidence to retrieve).
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
#: The metrics computed for every question.
METRICS = ("recall@5", "recall@10", "recall@25", "recall_all@10", "ndcg@10", "mrr")
#: Hits needed per question to compute every metric.
DEPTH = 25

_MONTHS = {m: i + 1 for i, m in enumerate((
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december"))}
_TIME = re.compile(
    r"\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*",
    re.IGNORECASE)
_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)
_OWNER_BAD = re.compile(r"[^A-Za-z0-9._:@-]")


def parse_session_time(value: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` -> 2023-05-08 13:56 UTC; ``ValueError`` otherwise."""
    m = _TIME.fullmatch(value)
    if m is None or m.group(5).lower() not in _MONTHS:
        raise ValueError(f"not a LoCoMo session time: {value!r}")
    hour, minute = int(m.group(1)), int(m.group(2))
    if not (1 <= hour <= 12 and minute < 60):
        raise ValueError(f"not a LoCoMo session time: {value!r}")
    hour = hour % 12 + (12 if m.group(3).lower() == "p" else 0)
    return datetime(int(m.group(6)), _MONTHS[m.group(5).lower()], int(m.group(4)), hour, minute,
                    tzinfo=timezone.utc)


def normalize_evidence(items: Sequence[str]) -> tuple[list[str], list[str]]:
    """The evidence ids in canonical form (order kept, each once) and the unparseable parts."""
    kept: dict[str, None] = {}
    dropped: list[str] = []
    for item in items:
        for part in str(item).split(";"):
            part = part.strip()
            if not part:
                continue
            m = _EVIDENCE.fullmatch(part)
            if m is None:
                dropped.append(part)
            else:
                kept.setdefault(f"D{int(m.group(1))}:{int(m.group(2))}", None)
    return list(kept), dropped


def owner_id_for(sample_id: str) -> str:
    """``sample_id`` in the allowed owner-id form (``validation.OWNER_ID_PATTERN``)."""
    owner = _OWNER_BAD.sub("-", sample_id.strip())
    if not owner or not owner[0].isalnum():
        owner = "c" + owner
    return owner[:128]


@dataclass(frozen=True)
class Turn:
    dia_id: str
    session: int
    speaker: str
    text: str
    at: datetime
    caption: str | None = None

    @property
    def content(self) -> str:
        """The memory text: who said it, what, and the shared image's caption if any."""
        tail = f" [shares {self.caption}]" if self.caption else ""
        return f"{self.speaker}: {self.text}{tail}"


#: How a turn is stored (``retrieval --context``): ``none``, the turn alone; ``text``,
#: its context written into its text (both signals see it, and a hit returns it);
#: ``beside``, the turn stored with its context (``VectorMemory.context``: embedded and
#: searched with it, while the memory's content, what a hit returns, stays the turn).
CONTEXTS = ("none", "text", "beside")


def turn_context(conv: Conversation, i: int, turns: int = 1, date: bool = True) -> str:
    """What the conversation says around turn ``i`` that the turn itself does not: its
    session's date and the session's ``turns`` previous turns (none for its first), as
    the extraction path gives a memory (``extraction_context_turns`` and ``_date``)."""
    turn = conv.turns[i]
    before = [t for t in conv.turns[max(0, i - turns):i] if t.session == turn.session]
    parts = [f"{turn.at.day} {turn.at:%B %Y}"] if date else []
    return "\n".join(parts + [t.content for t in before])


def turn_texts(conv: Conversation, context: str, turns: int = 1, date: bool = True
               ) -> list[tuple[str, str]]:
    """Each turn's stored text and the text the keyword signal searches for it, by
    ``context`` mode (``beside``: as the store joins content and context,
    ``text.with_context``)."""
    out = []
    for i, t in enumerate(conv.turns):
        if context == "none":
            out.append((t.content, t.content))
            continue
        around = turn_context(conv, i, turns, date)
        if not around:
            out.append((t.content, t.content))
            continue
        if context == "text":
            full = f"{around}\n{t.content}"
            out.append((full, full))
        else:
            out.append((t.content, with_context(normalize_content(t.content),
                                                "\n".join(context_lines(around)))))
    return out


def embedded_texts(conv: Conversation, context: str, turns: int = 1, date: bool = True
                   ) -> list[str]:
    """The texts the stores of ``conv``'s turns send to the model, by ``context`` mode:
    each turn's text, and with ``beside`` its context's lines too, each embedded apart
    (``CachedEmbedder.embed_memories``)."""
    if context != "beside":
        return [text for text, _ in turn_texts(conv, context, turns, date)]
    out = []
    for i, t in enumerate(conv.turns):
        out += [normalize_content(t.content),
                *context_lines(turn_context(conv, i, turns, date))]
    return list(dict.fromkeys(out))


@dataclass(frozen=True)
class Question:
    conversation: str
    index: int  #: position in the conversation's ``qa`` list
    question: str
    category: int
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    owner: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]
    now: datetime


@dataclass
class Dataset:
    conversations: list[Conversation]
    #: What was read, kept and dropped (see :func:`parse_conversation`).
    counts: Counter[str] = field(default_factory=Counter)

    @property
    def questions(self) -> list[Question]:
        return [q for c in self.conversations for q in c.questions]

    def describe(self) -> dict[str, Any]:
        by_cat = Counter(CATEGORIES[q.category] for q in self.questions)
        return {"conversations": len(self.conversations),
                "turns": sum(len(c.turns) for c in self.conversations),
                "questions_used": len(self.questions),
                "questions_by_category": dict(sorted(by_cat.items())),
                **dict(sorted(self.counts.items()))}


def _session_numbers(conv: Mapping[str, Any]) -> list[int]:
    nums = [int(k.split("_")[1]) for k in conv
            if re.fullmatch(r"session_\d+", k) and isinstance(conv[k], list) and conv[k]]
    return sorted(nums)


def parse_conversation(raw: Mapping[str, Any], counts: Counter[str]) -> Conversation:
    """One conversation of the LoCoMo file; adds to ``counts`` what it read and dropped."""
    sample_id = str(raw["sample_id"])
    conv = raw["conversation"]
    turns: list[Turn] = []
    last: datetime | None = None
    for n in _session_numbers(conv):
        at = parse_session_time(conv[f"session_{n}_date_time"])
        last = at if last is None else max(last, at)
        for t in conv[f"session_{n}"]:
            caption = t.get("blip_caption") or None
            turns.append(Turn(str(t["dia_id"]).strip(), n, str(t["speaker"]), str(t["text"]), at,
                              str(caption) if caption else None))
    if last is None:
        raise ValueError(f"conversation {sample_id!r} has no sessions with turns")
    known = {t.dia_id for t in turns}
    questions: list[Question] = []
    for i, qa in enumerate(raw.get("qa", [])):
        counts["questions_total"] += 1
        cat = int(qa.get("category", 0))
        if cat not in CATEGORIES:
            counts[f"skipped_category_{cat}"] += 1
            continue
        ids, bad = normalize_evidence(qa.get("evidence") or [])
        counts["evidence_unparseable_dropped"] += len(bad)
        unknown = [e for e in ids if e not in known]
        counts["evidence_unknown_id_dropped"] += len(unknown)
        ids = [e for e in ids if e in known]
        if not ids:
            counts["skipped_no_evidence"] += 1
            continue
        questions.append(Question(sample_id, i, str(qa["question"]), cat, tuple(ids)))
    return Conversation(sample_id, owner_id_for(sample_id), tuple(turns), tuple(questions), last)


def parse_dataset(raw: Sequence[Mapping[str, Any]]) -> Dataset:
    data = Dataset([])
    owners: set[str] = set()
    for item in raw:
        conv = parse_conversation(item, data.counts)
        if conv.owner in owners:
            raise ValueError(f"two conversations map to owner id {conv.owner!r}")
        owners.add(conv.owner)
        data.conversations.append(conv)
    return data


def load_locomo(path: str | Path) -> Dataset:
    """Read a LoCoMo JSON file (a list of conversations); a clear error when it is missing."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"LoCoMo data not found at {str(p)!r}: the dataset stays out of the repository; "
            "pass --path to locomo_dev7.json (see shared/bench/locomo/README.md)")
    return parse_dataset(json.loads(p.read_text(encoding="utf-8")))


# -- metrics ----------------------------------------------------------------------------


def question_metrics(ranked: Sequence[Collection[str]], evidence: Collection[str]
                     ) -> dict[str, float]:
    """The metrics of one question: ``ranked`` is best first, each hit a set of dia_ids.

    recall@k: share of the evidence ids among the first k hits; recall_all@10: 1 if
    all of them are; nDCG@10 with binary gains (a hit is relevant if it brings an
    evidence id not seen higher up); MRR: 1 / rank of the first relevant hit (within
    the hits given, 0 if none).
    """
    ev = set(evidence)
    if not ev:
        raise ValueError("a question needs at least one evidence id")
    seen: set[str] = set()
    gains: list[int] = []
    covered_at: list[int] = []  # evidence ids covered within the first i+1 hits
    for hit in ranked:
        new = (set(hit) & ev) - seen
        seen |= new
        gains.append(1 if new else 0)
        covered_at.append(len(seen))

    def covered(k: int) -> int:
        return covered_at[min(k, len(covered_at)) - 1] if covered_at and k > 0 else 0

    dcg = sum(g / np.log2(i + 2) for i, g in enumerate(gains[:10]))
    idcg = sum(1 / np.log2(i + 2) for i in range(min(len(ev), 10)))
    first = next((i for i, g in enumerate(gains) if g), None)
    return {
        "recall@5": covered(5) / len(ev),
        "recall@10": covered(10) / len(ev),
        "recall@25": covered(25) / len(ev),
        "recall_all@10": 1.0 if covered(10) == len(ev) else 0.0,
        "ndcg@10": float(dcg / idcg),
        "mrr": 0.0 if first is None else 1.0 / (first + 1),
    }


def bootstrap_ci(values: Sequence[float], *, seed: int = 0, resamples: int = 1000,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (resampling the values, fixed seed)."""
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = a[rng.integers(0, a.size, size=(resamples, a.size))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    return (float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail)))


def mean_ci(values: Sequence[float], seed: int = 0, resamples: int = 1000) -> dict[str, float]:
    """The mean and its bootstrap 95% interval, rounded for reports."""
    lo, hi = bootstrap_ci(values, seed=seed, resamples=resamples)
    return {"mean": round(float(np.mean(values)), 4), "ci95_lo": round(lo, 4),
            "ci95_hi": round(hi, 4)}


def summarize(rows: Sequence[tuple[int, Mapping[str, float]]], *, seed: int = 0,
              resamples: int = 1000) -> dict[str, Any]:
    """Means with bootstrap 95% intervals, overall and per category.

    ``rows`` holds one ``(category, question_metrics)`` per question.
    """
    def block(sel: Sequence[Mapping[str, float]]) -> dict[str, Any]:
        return {"n": len(sel), **{m: mean_ci([r[m] for r in sel], seed, resamples)
                                  for m in METRICS}}

    out: dict[str, Any] = {"overall": block([r for _, r in rows]), "by_category": {}}
    for cat, name in CATEGORIES.items():
        sel = [r for c, r in rows if c == cat]
        if sel:
            out["by_category"][name] = block(sel)
    return out


def paired_difference(a: Sequence[float], b: Sequence[float], *, seed: int = 0,
                      resamples: int = 1000) -> dict[str, float]:
    """Mean of ``a - b`` over the same questions, with a paired bootstrap 95% interval."""
    if len(a) != len(b):
        raise ValueError("a paired difference needs the same questions on both sides")
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    return mean_ci(d.tolist(), seed, resamples)
