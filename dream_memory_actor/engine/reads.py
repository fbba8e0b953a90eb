"""Which memories searches found, written in batches (``VectorStore.note_reads``).

A consolidation pass proposes to let a memory expire only when it has been neither
changed nor read for ``consolidation_expire_after_days``: reads must be recorded, but
a search must not pay a write for it. :class:`ReadLog` keeps the latest time each
memory was found in this process and hands the batch over once it is
``FLUSH_AFTER_S`` old or holds ``FLUSH_AT`` memories (and when the engine closes):
one write per owner per batch, off the search's path. A process that stops
without closing loses at most its last batch, which only makes a memory look
less recently read than it was by those seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import datetime

#: A batch is written once it is this old (seconds) ...
FLUSH_AFTER_S = 5.0
#: ... or holds this many memories.
FLUSH_AT = 1000


class ReadLog:
    """The reads noted since the last batch, by owner (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._reads: dict[str, dict[str, datetime]] = {}
        self._count = 0
        self._since: float | None = None

    def note(self, found: Iterable[tuple[str, str]], at: datetime) -> None:
        """``found``: (owner, memory id) pairs a search returned at ``at``."""
        for owner, memory_id in found:
            seen = self._reads.setdefault(owner, {})
            if memory_id not in seen:
                self._count += 1
            seen[memory_id] = at
            if self._since is None:
                self._since = self._clock()

    @property
    def due(self) -> bool:
        return self._since is not None and (
            self._count >= FLUSH_AT or self._clock() - self._since >= FLUSH_AFTER_S)

    def take(self) -> dict[str, dict[str, datetime]]:
        """The batch, by owner; the log starts empty again."""
        batch, self._reads, self._count, self._since = self._reads, {}, 0, None
        return batch
