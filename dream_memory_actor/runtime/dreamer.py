"""Consolidation passes on a schedule: each owner once it has been idle for a while.

Off unless ``consolidation_idle_s`` is set. The registry runs a :class:`Dreamer`
every ``consolidation_idle_s / 4`` (at least a second, at most five minutes): it
asks a VectorIndex replica when each owner's memories last changed, and runs a pass
(``consolidate``, through the owner's handle, so through its actor and writer) for
at most ``consolidation_owners_per_run`` owners whose memories have not changed for
``consolidation_idle_s`` and have changed since their last pass here, least recently
changed first. The passes only queue proposals (a person decides each, unless the
owner opted into ``consolidation_auto_apply``), and a proposal is never queued twice,
so a pass repeated after a restart is harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from ..models import utcnow

log = logging.getLogger(__name__)

#: How often the schedule is looked at, within these bounds (seconds).
MIN_INTERVAL_S, MAX_INTERVAL_S = 1.0, 300.0


def interval(idle_s: float) -> float:
    """How often a :class:`Dreamer` runs for an idle time of ``idle_s``."""
    return min(max(idle_s / 4, MIN_INTERVAL_S), MAX_INTERVAL_S)


class Dreamer:
    """Picks the owners due for a pass and runs theirs (see the module docstring)."""

    def __init__(self, changes: Callable[[], Awaitable[Mapping[str, datetime]]],
                 run: Callable[[str], Awaitable[Any]], idle_s: float, per_run: int,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self._changes = changes
        self._run = run
        self._idle = timedelta(seconds=idle_s)
        self._per_run = per_run
        self._clock = clock
        #: Each owner's last change its last pass here saw.
        self._passed: dict[str, datetime] = {}
        #: Owners whose last pass failed: tried again after the others.
        self._failed: set[str] = set()

    async def run_once(self) -> list[str]:
        """Run the passes due now; the owners passed (a failed pass is logged and tried
        again, after the owners not tried yet)."""
        changed = await self._changes()
        cutoff = self._clock() - self._idle
        due = sorted((owner in self._failed, at, owner) for owner, at in changed.items()
                     if at <= cutoff and self._passed.get(owner) != at)
        done = []
        for _, at, owner in due[:self._per_run]:
            try:
                await self._run(owner)
            except Exception:
                log.warning("consolidation pass of an idle owner failed", exc_info=True)
                self._failed.add(owner)
                continue
            self._failed.discard(owner)
            self._passed[owner] = at
            done.append(owner)
        return done
