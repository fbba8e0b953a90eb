"""Extraction of memories from conversations, behind the human-in-the-loop gate.

An extractor (an LLM through litellm, or the offline rule-based one) proposes
candidates; the gate (``gate.py``) writes, queues or skips each; the service
(``service.py``) does the writing for one owner and keeps the pending queue and
its audit trail; the Ray runtime runs extractors as a pool of actors (``runtime.extractor_pool``).
"""

from __future__ import annotations

from .candidates import ExtractedItem, ExtractionResult, Extractor, Usage, parse_reply
from .configured import open_extractor
from .gate import GateDecision, GateResult, Thresholds, decide, gate
from .rules import RuleBasedExtractor
from .service import ExtractionReport, ExtractionService, HitlDecision, ItemOutcome, MemoryWriter

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
