"""The schedule of consolidation passes: owners idle for a while, once per change."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from dream_memory_actor.runtime.dreamer import Dreamer, interval
from tests.runtime.conftest import start_system
from tests.runtime.test_consolidation_runtime import _document

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


async def test_idle_owners_get_one_pass_per_change_least_recent_first() -> None:
    now = [T0]
    changed = {"a": T0 - timedelta(hours=3), "b": T0 - timedelta(hours=2),
               "c": T0 - timedelta(minutes=5)}
    ran: list[str] = []

    async def changes() -> dict[str, datetime]:
        return dict(changed)

    async def run(owner: str) -> None:
        if owner == "broken":
            raise RuntimeError("the owner's actor is gone")
        ran.append(owner)

    dreamer = Dreamer(changes, run, idle_s=3600, per_run=1, clock=lambda: now[0])
    assert await dreamer.run_once() == ["a"]  # bounded per run, the oldest change first
    assert await dreamer.run_once() == ["b"]
    assert await dreamer.run_once() == []  # c changed 5 minutes ago: not idle yet
    now[0] = T0 + timedelta(hours=1)
    assert await dreamer.run_once() == ["c"]
    assert await dreamer.run_once() == []  # nothing changed since each one's pass
    changed["a"] = T0 - timedelta(minutes=30)  # written again, then idle
    changed["broken"] = T0 - timedelta(days=1)
    assert await dreamer.run_once() == []  # the oldest fails: it goes to the back
    assert await dreamer.run_once() == ["a"]
    assert await dreamer.run_once() == []  # and is tried again when the others are done
    assert ran == ["a", "b", "c", "a"]
    dreamer = Dreamer(changes, run, idle_s=3600, per_run=5, clock=lambda: now[0])
    changed.pop("broken")
    assert await dreamer.run_once() == ["b", "a", "c"]


def test_interval_bounds() -> None:
    assert interval(0.1) == 1.0 and interval(60) == 15.0 and interval(86400) == 300.0


@pytest.mark.parametrize("placement", ["sharded"])
def test_a_system_runs_passes_for_idle_owners(ray_runtime: None, pg_dsn: str,
                                              placement: str) -> None:
    system = start_system(pg_dsn, placement, "test-dreamer", consolidation_idle_s=0.5)
    try:
        owner = "rt-dreamer"
        h = system.owner(owner)
        h.import_document(_document(owner, ["t10: Alice likes green tea",
                                            "t10: alice likes green tea."]))
        deadline = time.monotonic() + 20
        while not h.snapshot().pending and time.monotonic() < deadline:
            time.sleep(0.25)
        (proposal,) = h.snapshot().pending
        assert proposal.kind == "merge" and proposal.source == "consolidation"
        assert len(h.list()) == 2  # proposed, not applied: a person decides
    finally:
        system.shutdown(grace_period_s=1)
