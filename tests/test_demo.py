"""The README's first command: the demo runs end to end (in a subprocess, its own Ray)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import fresh_schema


@pytest.mark.slow
def test_demo_runs_and_shows_memory_at_work(pg_dsn: str) -> None:
    env = {**os.environ, "DREAM_MEMORY_POSTGRES_DSN": pg_dsn,
           "DREAM_MEMORY_POSTGRES_SCHEMA": fresh_schema(),
           "DREAM_MEMORY_DEMO_LOCAL": "0"}  # keyword search: no model load in three actors
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, "-m", "agents_demo"], env=env, capture_output=True,
                         text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "the rule-based extractor" in text  # says which extractor ran
    assert "written: [rule] Look at security first in code review" in text
    assert "queued: [fact] The user is a Java developer" in text
    assert "- rules: Look at security first in code review" in text  # the later prompt
    assert "confirmed by demo-user" in text  # the audit trail
