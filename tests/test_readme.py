"""The README's Python blocks run as a reader copies them (each in a subprocess, on a
schema of its own), so they cannot drift from the code. A block meant as a fragment
says so in the HTML comment on the line before it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import fresh_schema

README = Path(__file__).resolve().parents[1] / "README.md"
NOT_RUN = "<!-- not run by tests/test_readme.py"


def blocks() -> list[tuple[int, str]]:
    """``(line, code)`` of each ```python block of the README not marked as a fragment."""
    text = README.read_text(encoding="utf-8")
    out = []
    for m in re.finditer(r"```python\n(.*?)```", text, re.S):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        if not before.startswith(NOT_RUN):
            out.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


def test_the_readme_has_blocks_to_run() -> None:
    assert len(blocks()) >= 2  # the API in one screen, and without Ray


@pytest.mark.slow
@pytest.mark.parametrize(("line", "code"), blocks(), ids=lambda v: f"line-{v}"
                         if isinstance(v, int) else "")
def test_readme_block_runs(line: int, code: str, pg_dsn: str, tmp_path: Path) -> None:
    env = {**os.environ, "DREAM_MEMORY_POSTGRES_DSN": pg_dsn,
           "DREAM_MEMORY_POSTGRES_SCHEMA": fresh_schema(), "HF_HUB_OFFLINE": "1"}
    env.pop("RAY_ADDRESS", None)
    script = tmp_path / f"readme_{line}.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, f"README.md line {line}:\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"README.md line {line} printed nothing"
