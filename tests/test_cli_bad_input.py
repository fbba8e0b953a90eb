"""The ``dream-memory`` command without Ray, and with arguments a shell can pass by mistake:
each ends in a one-line ``error: ...`` and a non-zero exit, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(args: list[str | bytes], tmp_path: Path, *, without_ray: bool = False,
         **env: str) -> subprocess.CompletedProcess[str]:
    paths = [str(ROOT)]
    if without_ray:
        # As if Ray were not installed: ``import ray`` fails and ``find_spec`` finds nothing.
        site = tmp_path / "no_ray"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text('import sys\nsys.modules["ray"] = None\n')
        paths.insert(0, str(site))
    full = {k: v for k, v in os.environ.items() if not k.startswith("DREAM_MEMORY_")}
    full.update({"PYTHONPATH": os.pathsep.join(paths), "DREAM_MEMORY_BACKEND": "memory",
                 "HF_HUB_OFFLINE": "1", **env})
    return subprocess.run([sys.executable, "-m", "dream_memory_actor.cli", *args],
                          capture_output=True, text=True, env=full, cwd=tmp_path, timeout=120,
                          check=False)


def _no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr


@pytest.mark.parametrize("args", [["--help"], ["doctor", "--skip", "backend"],
                                  ["snapshot", "--owner", "alice"],
                                  ["search", "--owner", "alice", "helm"]])
def test_commands_without_ray_work(tmp_path: Path, args: list[str]) -> None:
    done = _run(list(args), tmp_path, without_ray=True)
    _no_traceback(done)
    assert done.returncode == 0, done.stdout + done.stderr
    if args[0] == "doctor":
        assert "note     ray: not installed" in done.stdout


def test_the_ray_check_proves_ray_is_absent(tmp_path: Path) -> None:
    """The stand-in really hides Ray: the command that needs it says so in one line."""
    done = _run(["system", "status"], tmp_path, without_ray=True)
    _no_traceback(done)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "error: the optional dependency 'ray' is not installed; install it with: "
        "pip install 'dream-memory-actor[ray]'"]


@pytest.mark.parametrize("args", [
    [b"search", b"--owner", b"\xff", b"x"],
    [b"search", b"--owner", b"alice", b"\xff\xfe"],
    [b"pending", b"confirm", b"--owner", b"alice", b"--id", b"\xff", b"--by", b"ann"],
    [b"pending", b"confirm", b"--owner", b"alice", b"--id", b"p1", b"--by", b"\xfe"],
    [b"pending", b"confirm", b"--owner", b"alice", b"--id", b"p1", b"--edit", b"a\xffb"],
    [b"search", b"--owner", b"alice", b"x", b"--limit", b"99999999999999999999"],
    [b"search", b"--owner", b"alice", b"x", b"--limit", b"0"],
    [b"snapshot", b"--owner", b"a" * 200],
    [b"consolidate", b"--owner", b"alice", b"--by", b"\xfe"],
    [b"undo-proposal", b"--owner", b"alice", b"\xff"],
    [b"undo-proposal", b"--owner", b"a" * 200, b"p1"],
])
def test_bad_arguments_are_one_error_line(tmp_path: Path, args: list[str | bytes]) -> None:
    done = _run(args, tmp_path)
    _no_traceback(done)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr


@pytest.mark.parametrize(("name", "value"), [("DREAM_MEMORY_SHARDS", "abc"),
                                             ("DREAM_MEMORY_MAX_STATUS_KEYS", "-1"),
                                             ("DREAM_MEMORY_DEDUP_THRESHOLD", "nan")])
def test_a_bad_setting_is_one_error_line(tmp_path: Path, name: str, value: str) -> None:
    done = _run(["snapshot", "--owner", "alice"], tmp_path, **{name: value})
    _no_traceback(done)
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    setting = name.removeprefix("DREAM_MEMORY_").lower()
    assert line.startswith("error: invalid settings: ") and setting in line


def test_a_bad_number_is_argparse_usage(tmp_path: Path) -> None:
    done = _run(["search", "--owner", "alice", "x", "--limit", "ten"], tmp_path)
    _no_traceback(done)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith("invalid int value: 'ten'")
