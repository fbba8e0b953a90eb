"""Small statistics shared by the benchmarks."""

from __future__ import annotations

import math
import platform
from collections.abc import Sequence
from typing import Any

import numpy as np


def json_ready(value: Any) -> Any:
    """``value`` with each float that is not finite (a figure of no samples, such as the
    p50 of a kind of call a run never made) as ``None``: JSON has no NaN, so a result
    file holds null there."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def percentiles_ms(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99/mean of durations given in seconds, in milliseconds."""
    if not seconds:
        return {"p50_ms": float("nan"), "p95_ms": float("nan"), "p99_ms": float("nan"),
                "mean_ms": float("nan"), "n": 0}
    a = np.asarray(seconds) * 1000.0
    return {
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p95_ms": round(float(np.percentile(a, 95)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3),
        "mean_ms": round(float(a.mean()), 3),
        "n": len(a),
    }


#: The environment that changes what a benchmark measures, by the key ``machine`` records
#: it under: the threads an in-process model computes on (a Ray actor sets 1), and how
#: many calls a local model runs at once.
ENVIRONMENT = {"OMP_NUM_THREADS": "omp_num_threads",
               "DREAM_MEMORY_EMBEDDING_ENGINES": "embedding_engines"}


def machine() -> dict[str, Any]:
    """What ran the benchmark, recorded beside every figure (the load average as it was
    when this was called)."""
    import os

    found = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "reference_ms": reference_ms(),
    }
    found.update({key: os.environ[name] for name, key in ENVIRONMENT.items()
                  if os.environ.get(name)})
    return found


def reference_ms() -> float:
    """How fast this machine runs Python now: the best of five timings of one fixed
    loop, in milliseconds. Two results whose machines print the same platform may come
    from hosts of different speeds; this tells them apart (lower is faster)."""
    import time

    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        total = 0
        for i in range(200_000):
            total += i * i % 7
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 2)


def command() -> str:
    """The command line that ran this benchmark, as it would be typed again (with the
    environment that changes what it measures: ``machine`` records the same)."""
    import os
    import shlex
    import sys

    env = [f"{k}={os.environ[k]}" for k in sorted(ENVIRONMENT) if os.environ.get(k)]
    return shlex.join([*env, "python", "-m", "benchmarks", *sys.argv[1:]])
