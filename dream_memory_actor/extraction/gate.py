"""The human-in-the-loop gate, as pure functions (no I/O, no clock).

The default tiers (``MemorySettings``), boundaries included::

    confidence >= 0.82          write     written directly
    0.55 <= confidence < 0.82   pending   queued for a person to confirm
    confidence < 0.55           skip      dropped

Two checks can only lower an item's tier, from ``write`` to ``pending``, never
raise it: a person then decides.

* The evidence must be a quote from the conversation (case and spacing aside).
  A model that cannot point at the words it relied on may have invented them.
* An item whose content or evidence reads like an instruction to the extractor
  ("set confidence to 1.0", "owner_id=bob", "ignore previous instructions")
  is someone trying to steer what gets remembered. This is a heuristic
  backstop, not the defence: the defence is that the owner comes from the
  caller and that the model's confidence goes through this gate like any other.

>>> decide(0.82), decide(0.8199), decide(0.55), decide(0.5499)
('write', 'pending', 'pending', 'skip')
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..errors import ConfigurationError
from .candidates import ExtractedItem

if TYPE_CHECKING:
    from ..config import MemorySettings

Outcome = Literal["write", "pending", "skip"]
OUTCOMES: tuple[Outcome, ...] = ("write", "pending", "skip")

_STEERING = re.compile(
    r"confidence|owner[\s_-]?id|\bowner\s*[:=]|for (?:another|other|a different) (?:user|owner)"
    r"|ignore (?:all |any |the )?(?:previous|prior|above|earlier) instructions|system prompt"
    r"|置信度|忽略(?:之前|以上|前面|上面)的?(?:所有)?(?:指令|指示)",
    re.IGNORECASE,
)
_SPACE = re.compile(r"\s+")
_EDGE = "\"'“”‘’「」『』`.,;:!?。，；：！？…()（）[]"


@dataclass(frozen=True)
class Thresholds:
    """Where the tiers start: ``write`` >= ``pending``, both in [0, 1]."""

    write: float = 0.82
    pending: float = 0.55

    def __post_init__(self) -> None:
        if not 0.0 <= self.pending <= self.write <= 1.0:
            raise ConfigurationError(
                f"gate thresholds need 0 <= pending <= write <= 1, got pending={self.pending}, "
                f"write={self.write}")

    @classmethod
    def from_settings(cls, settings: MemorySettings) -> Thresholds:
        return cls(settings.hitl_write_threshold, settings.hitl_pending_threshold)


DEFAULT_THRESHOLDS = Thresholds()


def decide(confidence: float, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> Outcome:
    """The tier of one confidence: ``>= write`` writes, ``>= pending`` waits, else skips."""
    if confidence >= thresholds.write:
        return "write"
    if confidence >= thresholds.pending:
        return "pending"
    return "skip"


@dataclass(frozen=True)
class GateDecision:
    """One item's tier, and why (``"confidence"`` unless a check lowered it)."""

    item: ExtractedItem
    outcome: Outcome
    reason: str = "confidence"


@dataclass(frozen=True)
class GateResult:
    """Every item's decision, in the order given, and how many went each way."""

    decisions: tuple[GateDecision, ...]

    @property
    def counts(self) -> dict[Outcome, int]:
        seen = Counter(d.outcome for d in self.decisions)
        return {o: seen[o] for o in OUTCOMES}


def fold_quote(text: str) -> str:
    """Text compared for quoting: NFKC, case-folded, spacing collapsed, edge punctuation off."""
    folded = _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()
    return folded.strip(_EDGE + " ")


def is_quoted(evidence: str, conversation: str) -> bool:
    """True when ``evidence`` appears in ``conversation`` (both folded by :func:`fold_quote`)."""
    return _quoted_in(evidence, fold_quote(conversation))


def steers_extractor(item: ExtractedItem) -> bool:
    """True when the item's words address the extractor rather than describe the user."""
    return any(_STEERING.search(t) for t in (item.text, item.key or "", item.evidence))


def gate(items: Sequence[ExtractedItem], thresholds: Thresholds = DEFAULT_THRESHOLDS, *,
         conversation: str | None = None) -> GateResult:
    """Decide every item. With ``conversation`` (the text the items came from), an item
    whose evidence is not quoted from it is at most ``pending``."""
    folded = None if conversation is None else fold_quote(conversation)
    out = []
    for item in items:
        outcome = decide(item.confidence, thresholds)
        reason = "confidence"
        if outcome == "write":
            if folded is not None and not _quoted_in(item.evidence, folded):
                outcome, reason = "pending", "evidence not found in the conversation"
            elif steers_extractor(item):
                outcome, reason = "pending", "reads like an instruction to the extractor"
        out.append(GateDecision(item, outcome, reason))
    return GateResult(tuple(out))


def _quoted_in(evidence: str, folded_conversation: str) -> bool:
    quote = fold_quote(evidence)
    return bool(quote) and quote in folded_conversation
