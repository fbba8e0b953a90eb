"""Which way the operator's commands go: ``--system`` / ``DREAM_MEMORY_SYSTEM``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dream_memory_actor import cli
from dream_memory_actor.mcp.entry import build_parser as mcp_parser


def test_no_system_named_no_ray(tmp_path: object) -> None:
    """Without a system named, a command runs on the storage without importing Ray."""
    code = ("import os, sys\n"
            "for k in [k for k in os.environ if k.startswith('DREAM_MEMORY_')]: del os.environ[k]\n"
            "os.environ['DREAM_MEMORY_BACKEND'] = 'memory'\n"
            "from dream_memory_actor import cli\n"
            "rc = cli.main(['pending', 'list', '--owner', 'alice'])\n"
            "assert rc == 0, rc\n"
            "assert 'ray' not in sys.modules, 'ray was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "0 pending item(s) for alice" in done.stdout


def test_system_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DREAM_MEMORY_SYSTEM", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    args = cli.build_parser().parse_args(["pending", "reject", "--owner", "a", "--id", "p1"])
    assert args.system is None and args.route_ray_address == "auto"
    assert mcp_parser().parse_args([]).ray_system is None

    monkeypatch.setenv("DREAM_MEMORY_SYSTEM", "prod")
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    args = cli.build_parser().parse_args(["snapshot", "--owner", "a"])
    assert args.system == "prod" and args.route_ray_address == "ray://head:10001"
    mcp = mcp_parser().parse_args([])
    assert mcp.ray_system == "prod" and mcp.ray_address == "ray://head:10001"
    named = cli.build_parser().parse_args(["pending", "list", "--owner", "a", "--system", "x"])
    assert named.system == "x"
