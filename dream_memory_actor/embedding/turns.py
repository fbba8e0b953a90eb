"""Whose texts an in-process model embeds next: a search's query before memory texts.

The model embeds one call at a time on each of its engines (most have one; see
``multilingual.engines_for``). When callers wait for it, the longest waiting
query goes first, then the longest waiting memory texts: a search is what an agent
waits on, while a store's embedding is one part of a longer write. Without an order,
a search arriving behind a few stores waited for all of them (``python -m benchmarks
agents``, 16 agents, the default mix: search p95 645 ms with store p50 617 ms). So
that a stream of searches never starves the stores, memory texts that wait get the
model after ``QUERY_STREAK`` query turns in a row.

Calls that wait are not joined into one batch of the model. multilingual-e5-small embeds
a batch of 16 LoCoMo turns at about 0.75 of the time of 16 calls of one, and joining the
waiting calls, measured in alternating pairs, did not pay: memory texts joined, a query
waited behind a batch of up to 32 (``agents``: search p95 75 -> 300-340 ms) for writers'
throughput within the noise (``concurrency``, 32 writers of one owner: 68 -> 70 ops/s);
queries alone joined, nothing changed beyond the noise (searches seldom wait together).

A model may keep engines for queries alone (``query_slots``; multilingual-e5-small
keeps one): a search's query then never waits for a store's text, only for other
queries. ``python -m benchmarks agents`` (16 agents, the default mix, two cores), with
and without the kept engine in alternating runs, two pairs: search p95 66-68 -> 51-52
ms and p99 190-221 -> 136-166 ms, for search p50 6.4-7.3 -> 7.2-8.5 ms (a query's
embedding now shares the cores with a store's) and 21 MB more.

A model may also have engines that memory texts take only while no query has asked for
the model for ``QUIET_S`` seconds (``idle_slots``: the cores its other calls leave
idle, see ``multilingual.idle_engines_for``). Writers storing at once then use every
core, and once a search comes, memory texts go back to their ``slots`` as their calls
end: a query shares the cores with those calls at most, never waits for them.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

#: The most query turns in a row while memory texts wait for the model.
QUERY_STREAK = 4
#: Seconds without a query after which memory texts may take the idle slots too.
QUIET_S = 2.0


class ModelTurns:
    """``slots`` holders at a time (engines for any call), ``query_slots`` more for
    queries only and ``idle_slots`` more for memory texts while no query has come for
    ``QUIET_S`` seconds; queries first, each kind in arrival order; bound to the event
    loop it was made in (:meth:`for_loop`)."""

    def __init__(self, slots: int = 1, query_slots: int = 0, idle_slots: int = 0) -> None:
        self.loop = asyncio.get_running_loop()
        self.slots = max(1, slots)
        self.query_slots = max(0, query_slots)
        self.idle_slots = max(0, idle_slots)
        self._last_query = -QUIET_S  # loop time a query last asked for a turn
        self._held = [0, 0]  # turns held by queries, by memory texts
        self._streak = 0  # query turns given in a row where memory texts could have gone
        self._waiting: tuple[deque[asyncio.Future[None]], deque[asyncio.Future[None]]] = (
            deque(), deque())

    @classmethod
    def for_loop(cls, current: ModelTurns | None, slots: int = 1, query_slots: int = 0,
                 idle_slots: int = 0) -> ModelTurns:
        """``current`` when it belongs to the running loop, else a new one for it."""
        if current is not None and current.loop is asyncio.get_running_loop():
            return current
        return cls(slots, query_slots, idle_slots)

    @asynccontextmanager
    async def turn(self, query: bool) -> AsyncIterator[None]:
        """``async with turns.turn(query):`` holds the model for one call."""
        await self._acquire(query)
        try:
            yield
        finally:
            self._release(query)

    def _may_start(self, query: bool) -> bool:
        """Whether a turn of this kind may start now: a query on an engine kept for
        queries or one for any call that memory texts leave (they take those first); a
        memory text on one for any call that queries leave, or an idle one."""
        queries, memories = self._held
        if query:
            return queries < self.query_slots + self.slots - min(memories, self.slots)
        idle = self.idle_slots if self.loop.time() - self._last_query >= QUIET_S else 0
        return memories + max(0, queries - self.query_slots) < self.slots + idle

    async def _acquire(self, query: bool) -> None:
        if query:
            self._last_query = self.loop.time()
        if self._may_start(query):
            self._held[0 if query else 1] += 1
            return
        queue = self._waiting[0 if query else 1]
        granted = self.loop.create_future()
        queue.append(granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release(query)  # the turn came as the caller left: pass it on
            elif granted in queue:  # (a release may have dropped it already)
                queue.remove(granted)
            raise

    def _release(self, query: bool) -> None:
        self._held[0 if query else 1] -= 1
        queries, memories = self._waiting
        while True:
            for q in (queries, memories):  # a caller that left keeps its future, done
                while q and q[0].done():
                    q.popleft()
            query_may = bool(queries) and self._may_start(True)
            memory_may = bool(memories) and self._may_start(False)
            if query_may and (not memory_may or self._streak < QUERY_STREAK):
                self._streak = self._streak + 1 if memory_may else 0
                self._held[0] += 1
                queries.popleft().set_result(None)
            elif memory_may:
                self._streak = 0
                self._held[1] += 1
                memories.popleft().set_result(None)
            else:
                return
