"""Extraction of memories from conversations, behind the human-in-the-loop gate.

An extractor (an LLM through litellm, or the offline rule-based one) proposes
candidates; the gate (``gate.py``) writes, queues or skips each; the service
(``service.py``) does the writing for one owner and keeps the pending queue and
its audit trail; ``pool.py`` runs extractors as a pool of Ray actors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .candidates import ExtractedItem, ExtractionResult, Extractor, Usage, parse_reply
from .gate import GateDecision, GateResult, Thresholds, decide, gate
from .rules import RuleBasedExtractor
from .service import ExtractionReport, ExtractionService, HitlDecision, ItemOutcome, MemoryWriter

if TYPE_CHECKING:
    from ..config import MemorySettings

__all__ = [
    "ExtractedItem",
    "ExtractionReport",
    "ExtractionResult",
    "ExtractionService",
    "Extractor",
    "GateDecision",
    "GateResult",
    "HitlDecision",
    "ItemOutcome",
    "MemoryWriter",
    "RuleBasedExtractor",
    "Thresholds",
    "Usage",
    "decide",
    "gate",
    "open_extractor",
    "parse_reply",
]


def open_extractor(settings: MemorySettings) -> Extractor:
    """The configured extractor: ``LLMExtractor`` for ``extraction_model``, else the
    ``RuleBasedExtractor`` (offline, explicit statements only)."""
    if settings.extraction_model:
        from .llm import LLMExtractor

        return LLMExtractor.from_settings(settings)
    return RuleBasedExtractor()
