"""The proposer: consolidation passes computed in a process of their own.

A pass reads all of an owner's memories and judges many pairs of them. In the owner's
VectorIndex replica, the process that also makes that owner's writes, it held each of
those writes up (``python -m benchmarks consolidation --parts runtime`` measures a
writer's waits during passes). Here the pass runs beside the replicas, at a lower CPU
priority, so on a busy machine the writes (and the database serving them) come first;
the proposals it returns are queued and applied through the owner's writer, one write
each. Backends whose memories live in a replica's process (``memory``) keep
their passes there.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from ..engine import MemoryEngine
from ..models import MemoryPendingItem
from .spec import SystemSpec, open_index_engine

#: How much lower than the other processes' the pass's CPU priority is (``nice``).
NICENESS = 10


class ProposerActor:
    """Run as ``_proposer.<system>`` (made by the registry on first use); private."""

    def __init__(self, spec: SystemSpec) -> None:
        self._spec = spec
        self._engine: MemoryEngine | None = None
        self._opening = asyncio.Lock()
        with contextlib.suppress(OSError):  # a platform without nice: the same priority
            os.nice(NICENESS)

    async def _open(self) -> MemoryEngine:
        if self._engine is None:
            async with self._opening:
                if self._engine is None:
                    self._engine = await open_index_engine(self._spec, setup=False)
        return self._engine

    async def propose(self, owner: str) -> list[MemoryPendingItem]:
        """What a pass proposes for ``owner`` (``MemoryEngine.propose``)."""
        return await (await self._open()).propose(owner)

    async def info(self) -> dict[str, int]:
        """This process's id and niceness."""
        return {"pid": os.getpid(), "nice": os.nice(0)}

    async def close(self) -> None:
        if self._engine is not None:
            await self._engine.close()
