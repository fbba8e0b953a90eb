"""Reaching the actor that holds an owner, for tests that kill it or call it directly."""

from __future__ import annotations

from typing import Any

import ray

from dream_memory_actor.runtime import MemorySystem
from dream_memory_actor.runtime.placement import NAMESPACE, host_name, owner_name, shard_of


def holder_of(system: MemorySystem, owner: str) -> Any:
    """The owner's actor (``dedicated``) or its shard host (``sharded``)."""
    s = system.settings
    name = (owner_name(system.name, owner) if s.placement == "dedicated"
            else host_name(system.name, shard_of(owner, s.shards)))
    return ray.get_actor(name, namespace=NAMESPACE)
