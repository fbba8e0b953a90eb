"""A worker node removed during a write load (head + 2 workers, both placements).

Runs ``node_loss_scenario`` in a subprocess: a multi-node ``Cluster`` cannot
live in the process that holds the session's single-node runtime.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_node_loss_loses_no_acknowledged_write(pg_dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.runtime.node_loss_scenario", pg_dsn, str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    result = json.loads(out.read_text(encoding="utf-8"))
    for placement in ("sharded", "dedicated"):
        r = result[placement]
        assert r["acked"] >= r["min_acked"] and r["missing"] == [] and r["twice"] == 0, r
        assert r["unacked_present"] == [], r
        assert r["version"] == r["expected_version"], r  # no write applied twice
        assert r["memories"] == 1 and r["merge_count"] == r["stores"] - 1, r
        # Writes went on after the node was marked dead, so they reached the owner's
        # actor restarted on the other worker.
        assert r["moved_node"], r
