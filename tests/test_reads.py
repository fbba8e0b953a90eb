"""ReadLog: which memories searches found, handed over in batches."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from dream_memory_actor.engine.reads import FLUSH_AFTER_S, FLUSH_AT, ReadLog

T = datetime(2026, 5, 1, tzinfo=timezone.utc)


def test_a_batch_is_due_when_old_enough_or_large_enough() -> None:
    now = [0.0]
    log = ReadLog(clock=lambda: now[0])
    assert not log.due and log.take() == {}
    log.note([("a", "m1"), ("b", "m2")], T)
    log.note([("a", "m1")], T + timedelta(seconds=1))  # the latest time is kept
    assert not log.due
    now[0] = FLUSH_AFTER_S
    assert log.due
    assert log.take() == {"a": {"m1": T + timedelta(seconds=1)}, "b": {"m2": T}}
    assert not log.due and log.take() == {}
    log.note((("a", f"m{i}") for i in range(FLUSH_AT)), T)
    assert log.due  # large enough before it is old
    assert len(log.take()["a"]) == FLUSH_AT
