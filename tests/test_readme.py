"""The README's Python blocks run as a reader copies them (each in a subprocess, on a
schema of its own), so they cannot drift from the code. A block meant as a fragment
says so in the HTML comment on the line before it. Every ``dream-memory`` command line
the README and docs/ show names a command, and options, that the program has."""

from __future__ import annotations

import argparse
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


def commands() -> list[str]:
    """Each ``dream-memory`` command line the README and docs/ show (without the program
    name): in inline code, in indented command blocks, and in the command table."""
    root = README.parent
    out = []
    for path in [README, *sorted((root / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        out += re.findall(r"`dream-memory ([^`]+)`", text)
        out += re.findall(r"^ {4}(?:.*\| )?dream-memory ([^#\n]+)", text, re.M)
    table = README.read_text(encoding="utf-8").split("## Command line", 1)[1].split("\n## ", 1)[0]
    for first in re.findall(r"^\|((?:[^|\\]|\\.)*)\|", table, re.M):
        out += re.findall(r"`([^`]+)`", first)
    return [c.replace("\\|", "|").strip() for c in out]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next((dict(a.choices) for a in parser._actions
                 if isinstance(a, argparse._SubParsersAction)), {})


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def test_every_command_the_readme_shows_exists_with_its_options() -> None:
    from dream_memory_actor.cli import build_parser
    from dream_memory_actor.mcp.entry import build_parser as mcp_parser

    program = build_parser()
    found = commands()
    assert len(found) >= 30
    for line in found:
        words = line.split()
        parsers = [program]
        if not words[0].startswith("-"):
            parsers = []
            for name in words[0].split("|"):
                sub = _subcommands(program).get(name)
                assert sub is not None, f"README: `dream-memory {line}`: no command {name!r}"
                parsers.append(mcp_parser() if name == "mcp" else sub)
            nested = _subcommands(parsers[0])
            if nested and len(words) > 1:
                parsers = []
                for name in words[1].split("|"):
                    assert name in nested, f"README: `dream-memory {line}`: no {name!r}"
                    parsers.append(nested[name])
        for option in re.findall(r"(?<![\w-])--[a-z][a-z-]*", line):
            assert any(option in _options(p) | _options(program) for p in parsers), (
                f"README: `dream-memory {line}`: no option {option}")
