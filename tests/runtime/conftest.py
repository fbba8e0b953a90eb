"""One Ray runtime per test session; memory systems on fresh PostgreSQL schemas.

Ray starts once (7-12 s; the ``ray_runtime`` fixture of tests/conftest.py).
Systems are session-scoped per placement, so pytest runs all tests of one
placement, then shuts that system down before starting the other: at most one
system's actors are alive at a time. Actors take no CPU slot
(``num_cpus=0``), so two cores are enough.

Multi-node tests cannot share this runtime (``ray.cluster_utils.Cluster`` starts
its own head and cannot coexist with ``ray.init`` in one process): they run
``node_loss_scenario`` in a subprocess, see ``test_node_loss.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.runtime import MemorySystem
from tests.conftest import fresh_schema
from tests.runtime.embedders import TopicEmbedder

PLACEMENTS = ["sharded", "dedicated"]
#: The shared systems' cap: small, so the passivation tests exercise it.
CAP = 4


def settings_for(pg_dsn: str, placement: str, **overrides: Any) -> MemorySettings:
    """Settings on a fresh schema of the session's PostgreSQL."""
    values: dict[str, Any] = {
        "backend": "postgres", "postgres_dsn": pg_dsn, "postgres_schema": fresh_schema(),
        "postgres_pool_max": 4, "placement": placement, "shards": 2,
        "max_live_owners": CAP, "idle_timeout_s": 600.0,
    }
    values.update(overrides)
    return MemorySettings(**values)


def start_system(pg_dsn: str, placement: str, name: str, **overrides: Any) -> MemorySystem:
    return MemorySystem.start(settings_for(pg_dsn, placement, **overrides), name=name,
                              embedder_factory=TopicEmbedder, call_timeout_s=60.0)


@pytest.fixture(scope="session", params=PLACEMENTS)
def system(request: pytest.FixtureRequest, ray_runtime: None, pg_dsn: str
           ) -> Iterator[MemorySystem]:
    """The shared system of one placement (cap 4, no idle passivation during the tests)."""
    placement = request.param
    s = start_system(pg_dsn, placement, f"test-{placement}")
    try:
        yield s
    finally:
        s.shutdown(grace_period_s=1)
