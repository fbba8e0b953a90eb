"""The extractor the settings name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .candidates import Extractor
from .rules import RuleBasedExtractor

if TYPE_CHECKING:
    from ..config import MemorySettings


def open_extractor(settings: MemorySettings) -> Extractor:
    """The configured extractor: ``LLMExtractor`` for ``extraction_model``, else the
    ``RuleBasedExtractor`` (offline, explicit statements only)."""
    if settings.extraction_model:
        from .llm import LLMExtractor

        return LLMExtractor.from_settings(settings)
    return RuleBasedExtractor()
