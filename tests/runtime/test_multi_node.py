"""Agents on every node of a head + 3 worker cluster sharing owners while a worker
joins and another leaves (``benchmarks.multi_node``, run in a subprocess: a
multi-node ``Cluster`` cannot live in the process holding the session's runtime)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_agents_on_every_node_lose_nothing_while_nodes_come_and_go(pg_dsn: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "multi-node", "--json", "--churn-only",
         "--rounds", "1", "--postgres-dsn", pg_dsn],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    # Ray's raylets share the process's stdout: the result is the JSON object at its end
    start = proc.stdout.rfind('{\n  "backend"')
    assert start >= 0, proc.stdout[-4000:]
    result = json.loads(proc.stdout[start:])
    c = result["churn"]
    assert c["acked"] > 0 and c["missing"] == [] and c["twice"] == 0, c
    assert c["converged"], c  # every agent, on every node, reads the same snapshots
    assert c["owners_on_leaving_node"] and c["replaced_on_live_nodes"], c
    assert c["joined_node_writes"] > 0, c  # the agent on the new node wrote
    assert c["agents_lost_with_the_node"] >= 1 and c["agents_at_end"] == 4, c
