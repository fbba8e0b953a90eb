"""Placement without Ray: names, the stable hash, the live set."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from dream_memory_actor.errors import ConfigurationError
from dream_memory_actor.runtime.placement import (
    LiveSet,
    owner_name,
    parse_read_task_name,
    read_task_name,
    shard_of,
    stable_hash,
    system_name,
)


def test_stable_hash_is_the_same_in_another_process() -> None:
    code = ("from dream_memory_actor.runtime.placement import stable_hash;"
            "print(stable_hash('alice'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONHASHSEED": "123"})
    assert int(out.stdout) == stable_hash("alice")


def test_owners_spread_over_shards() -> None:
    counts = Counter(shard_of(f"user-{i}", 8) for i in range(8000))
    assert set(counts) == set(range(8))
    assert min(counts.values()) > 800  # 1000 expected each


def test_actor_names_are_private() -> None:
    assert owner_name("prod", "alice@example.com").startswith("_")


@pytest.mark.parametrize("question", [
    ("alice@example.com", None, None, None),
    ("team:a.b_c-d", 0, "0b7c9a4e-1d2f-4f3a-9a43-5b7f0e2c1d3e", 12),
    ("x" * 128, 99, None, 3),
])
def test_read_task_name_round_trip(question: tuple) -> None:  # type: ignore[type-arg]
    assert parse_read_task_name(read_task_name(*question)) == question


@pytest.mark.parametrize("name", [
    None, "", "_Host.read", "HostActor.read", "read alice - -", "read alice - - - -",
    "read  - - -", "write alice - - -", "read alice x - -", "read alice - tok v1",
])
def test_other_task_names_are_not_reads(name: str | None) -> None:
    assert parse_read_task_name(name) is None


@pytest.mark.parametrize("bad", ["", "has space", "x" * 49, "-lead", "a/b", None])
def test_bad_system_names(bad: object) -> None:
    with pytest.raises(ConfigurationError):
        system_name(bad)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_live_set_lru_order_and_cap() -> None:
    clock = Clock()
    live: LiveSet[str] = LiveSet(cap=2, idle_timeout_s=10, clock=clock)
    live.add("a", "A")
    live.add("b", "B")
    live.touch("a")
    assert list(live.lru()) == ["b", "a"] and live.full
    with pytest.raises(RuntimeError):
        live.add("c", "C")
    assert live.pop("b") == "B" and live.evicted == 1
    live.add("c", "C")
    assert len(live) == 2 and live.high_water == 2


def test_live_set_idle() -> None:
    clock = Clock()
    live: LiveSet[str] = LiveSet(cap=5, idle_timeout_s=10, clock=clock)
    live.add("a", "A")
    clock.t = 5
    live.add("b", "B")
    clock.t = 12
    assert live.idle() == ["a"]
    live.touch("a")
    clock.t = 16
    assert live.idle() == ["b"]


def test_live_set_needs_a_cap() -> None:
    with pytest.raises(ConfigurationError):
        LiveSet(cap=0, idle_timeout_s=1)
