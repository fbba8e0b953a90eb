"""actor-overhead: snapshot read and search through the actors vs a bare Ray call and a
direct backend call, measured in the same run.

Sequential calls from the driver, interleaved in rounds so every kind sees the
same machine load; a ratio is the median over rounds of the two kinds' rates in
the same round. ``bare_sync`` is a no-op method of a plain Ray actor,
``bare_sync_arg`` the same with an argument holding a snapshot read's question (what
an argument costs a call), ``bare_sync_named`` the no-op with the question in its task
name instead (how a snapshot read asks), ``bare_sync_ft`` the no-op
with the owner actors' options (restarts, task retries, call threads),
``bare_async`` / ``bare_async_arg`` the same on an async actor (what the owner
actors were before they became threaded actors, see runtime/threaded.py); ``direct``
calls the backend through a ``MemoryEngine`` in this process (for ``memory``
that is a dictionary lookup, for ``postgres`` one query). Target: snapshot
read rate >= 0.8 x the bare Ray call rate. ``snapshot`` is an agent re-reading
its snapshot (an unchanged one is confirmed by version, not re-sent);
``snapshot_transfer`` forgets the local copy first, so every call carries it.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import time
from collections.abc import Callable
from typing import Any

from .stats import command, machine, percentiles_ms

QUERY = "kubernetes deployment with helm"


class _Bare:
    def ping(self) -> None:
        return None

    def ping_arg(self, query: Any) -> None:
        return None


class _BareAsync:
    async def ping(self) -> None:
        return None

    def ping_arg(self, query: Any) -> None:
        return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .runtime_args import add_runtime_arguments

    add_runtime_arguments(parser)
    parser.add_argument("--calls", type=int, default=2000, help="calls per kind")
    parser.add_argument("--rounds", type=int, default=20)


async def _timed(fn: Callable[[], Any], n: int, out: list[float]) -> None:
    for _ in range(n):
        t0 = time.perf_counter()
        result = fn()
        if inspect.isawaitable(result):
            await result
        out.append(time.perf_counter() - t0)


def _summary(samples: list[float]) -> dict[str, Any]:
    total = sum(samples)
    return {"calls_per_s": round(len(samples) / total, 1) if total else None,
            **percentiles_ms(samples)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import ray

    from dream_memory_actor.engine import MemoryEngine
    from dream_memory_actor.runtime.placement import read_task_name
    from dream_memory_actor.runtime.registry import BASE_OPTIONS, HOLDER_OPTIONS

    from .runtime_args import system_from_args

    with system_from_args(args, "bench-overhead") as system:
        owner = "bench-overhead"
        h = system.owner(owner)
        for i in range(5):
            h.add_rule(f"rule number {i}: review security first")
            h.add_fact(f"fact number {i}: the user writes Java")
        h.set_status("project", "dream-saas")
        for i in range(20):
            h.store(f"memory {i}: went live on kubernetes with helm, release {i}")

        engine = await MemoryEngine.open(system.settings)
        if system.settings.backend == "memory":  # its own process: give it the same data
            snap = h.snapshot()
            from dream_memory_actor.storage.ops import AddFact, AddRule, SetStatus

            await engine.apply(owner, [*(AddRule(r.content) for r in snap.rules),
                                       *(AddFact(f.content) for f in snap.facts),
                                       *(SetStatus(k, v) for k, v in snap.status.items())])
            for m in h.list(limit=100):
                await engine.store(owner, m.content)
        conn = system.connection

        token, version = conn.known(owner)
        question = read_task_name(owner, None, token, version)  # as a snapshot read asks
        query = [owner, None, token, version]  # the same question as an argument

        def transfer() -> Any:
            conn.drop_snapshots()  # hold no copy: the actor sends the snapshot
            return h.snapshot()

        bare: Any = ray.remote(num_cpus=0)(_Bare).remote()
        # The same no-op with the options the owner actors run with (restarts, task
        # retries, call threads): what Ray's fault tolerance costs a call.
        bare_ft: Any = ray.remote(_Bare).options(**BASE_OPTIONS, **HOLDER_OPTIONS).remote()
        bare_async: Any = ray.remote(num_cpus=0)(_BareAsync).remote()
        kinds: dict[str, Callable[[], Any]] = {
            "bare_sync": lambda: ray.get(bare.ping.remote()),
            "bare_sync_arg": lambda: ray.get(bare.ping_arg.remote(query)),
            "bare_sync_named": lambda: ray.get(bare.ping.options(name=question).remote()),
            "bare_sync_ft": lambda: ray.get(bare_ft.ping.remote()),
            "bare_async": lambda: ray.get(bare_async.ping.remote()),
            # The argument's cost on an async actor (what the owner actors once were).
            "bare_async_arg": lambda: ray.get(bare_async.ping_arg.remote(query)),
            "snapshot": h.snapshot,
            # The same read from a process that holds no copy: the snapshot is sent.
            "snapshot_transfer": transfer,
            "search": lambda: h.search(QUERY, limit=10),
            "direct_snapshot": lambda: engine.snapshot(owner),
            "direct_search": lambda: engine.search(owner, QUERY),
        }
        samples: dict[str, list[float]] = {k: [] for k in kinds}
        #: per kind, its rate in each round: ratios are taken round by round
        rates: dict[str, list[float]] = {k: [] for k in kinds}
        try:
            for fn in kinds.values():  # warm up: worker processes, caches, pools
                await _timed(fn, 50, [])
            per_round = max(1, args.calls // args.rounds)
            for _ in range(args.rounds):
                for name, fn in kinds.items():
                    took: list[float] = []
                    await _timed(fn, per_round, took)
                    samples[name] += took
                    rates[name].append(len(took) / sum(took))
        finally:
            await engine.close()
            ray.kill(bare)
            ray.kill(bare_ft)
            ray.kill(bare_async)
    res = {k: _summary(v) for k, v in samples.items()}

    def ratio(a: str, b: str) -> float:
        """The median over rounds of a's rate over b's in the same round: on a shared
        machine the rates drift between rounds (a bare call ran 900-1350/s in
        consecutive runs here), a pair measured back to back much less."""
        return round(statistics.median(x / y for x, y in zip(rates[a], rates[b],
                                                                strict=True)), 3)

    return {
        "benchmark": "actor-overhead",
        "backend": args.backend,
        "placement": args.placement,
        **res,
        "ratios": {
            "snapshot_vs_bare_sync": ratio("snapshot", "bare_sync"),
            "snapshot_vs_bare_sync_arg": ratio("snapshot", "bare_sync_arg"),
            "snapshot_vs_bare_sync_named": ratio("snapshot", "bare_sync_named"),
            "bare_sync_arg_vs_bare_sync": ratio("bare_sync_arg", "bare_sync"),
            "bare_sync_named_vs_bare_sync": ratio("bare_sync_named", "bare_sync"),
            "snapshot_vs_bare_sync_ft": ratio("snapshot", "bare_sync_ft"),
            "snapshot_vs_bare_async": ratio("snapshot", "bare_async"),
            "snapshot_vs_bare_async_arg": ratio("snapshot", "bare_async_arg"),
            "snapshot_transfer_vs_bare_sync": ratio("snapshot_transfer", "bare_sync"),
            "snapshot_vs_direct": ratio("snapshot", "direct_snapshot"),
            "search_vs_bare_async": ratio("search", "bare_async"),
            "search_vs_direct": ratio("search", "direct_search"),
        },
        "ratio_method": "median over rounds of the two rates measured in the same round",
        "rounds": args.rounds,
        "target_snapshot_vs_bare": 0.8,
        "machine": machine(),
        "command": command(),
    }
