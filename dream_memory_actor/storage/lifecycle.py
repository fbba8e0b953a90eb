"""What every store has: a content limit, ``setup`` and ``close``."""

from __future__ import annotations

from ..limits import DEFAULT_LIMITS, Limits

DEFAULT_MAX_CONTENT_BYTES = 32 * 1024


class _Lifecycle:
    """``setup`` prepares storage (migrations), ``close`` releases it; both safe to repeat."""

    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES
    #: The other size caps (``open_stores`` sets those of the settings).
    limits: Limits = DEFAULT_LIMITS

    async def setup(self) -> None:
        """Create or migrate what the backend needs. Safe to call more than once."""

    async def close(self) -> None:
        """Release connections. Safe to call more than once."""
