"""The snapshots a process holds, seen through ``MemorySystem.connection``."""

from __future__ import annotations

from dream_memory_actor.runtime import MemorySystem


def test_drop_snapshots_forgets_every_copy_held_here(system: MemorySystem) -> None:
    a, b = system.owner("held-a"), system.owner("held-b")
    a.add_fact("held a")
    b.add_fact("held b")
    snap_a, snap_b = a.snapshot(), b.snapshot()
    conn = system.connection
    assert conn.known(a.owner)[1] == snap_a.version
    assert conn.known(b.owner)[1] == snap_b.version

    conn.drop_snapshots()

    assert conn.known(a.owner) == (None, None)
    assert conn.known(b.owner) == (None, None)
    again = a.snapshot()  # read whole again, the same content
    assert again == snap_a
    assert conn.known(a.owner)[1] == snap_a.version
