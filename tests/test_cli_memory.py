"""store, list, add-rule, add-fact, set-status, delete, audit; id prefixes; --version;
plain help; no warnings on a host without XDG_RUNTIME_DIR."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from dream_memory_actor import cli
from dream_memory_actor.config import MemorySettings

from .test_cli import _json, _populate, _run, memory_env, pg_env

__all__ = ["memory_env", "pg_env"]  # the fixtures, imported for the tests below


def test_version_and_plain_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"dream-memory {cli.version()}"
    texts = []
    for argv in (["--help"], *([c, "--help"] for c in (
            "store", "list", "add-rule", "add-fact", "set-status", "delete", "audit",
            "pending", "snapshot", "search", "consolidate", "undo-proposal", "doctor",
            "system"))):
        with pytest.raises(SystemExit):
            cli.main(argv)
        texts.append(capsys.readouterr().out)
    for text in texts:
        assert "``" not in text and ":class:" not in text and ":mod:" not in text
    for command in texts[1:-2]:  # the commands on an owner's memory
        if command.startswith("usage: dream-memory pending"):
            continue  # its options are on list, confirm and reject
        assert "--json" in command and "--owner" in command and "--system" in command


def test_every_command_has_json() -> None:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():  # type: ignore[union-attr]
        if name in ("mcp", "demo", "pending", "review"):
            continue  # mcp, review: servers; demo: a narrative; pending: on its actions
        assert any("--json" in a.option_strings for a in p._actions), name


def test_write_read_and_delete_with_id_prefixes(pg_env: MemorySettings,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    o = ["--owner", "carol"]
    rule: Any = _json(capsys, "add-rule", *o, "In code review, look at security first")
    fact: Any = _json(capsys, "add-fact", *o, "The user is a Java developer", "--source", "cli")
    assert fact["fact"]["source"] == "cli" and rule["version"] == 1
    status: Any = _json(capsys, "set-status", *o, "current_project", "dream-saas",
                        "--ttl", "3600")
    assert status["status"] == {"current_project": "dream-saas"}
    stored: Any = _json(capsys, "store", *o, "went live on Kubernetes with helm",
                        "--metadata", '{"agent": "deploy"}')
    assert stored["memory"]["metadata"] == {"agent": "deploy"}
    listed: Any = _json(capsys, "list", *o)
    assert [m["id"] for m in listed] == [stored["memory"]["id"]]
    rc, out, _ = _run(capsys, "snapshot", *o)
    assert "security first" in out and "current_project=dream-saas" in out

    # ids by their start; a start shared by two ids is refused, naming them
    for item, kind in ((rule["rule"]["id"], "rule"), (fact["fact"]["id"], "fact"),
                       (stored["memory"]["id"], "memory")):
        done: Any = _json(capsys, "delete", *o, item[:12])
        assert done == {"deleted": kind, "id": item}
    rc, _, err = _run(capsys, "delete", *o, "zzzz")
    assert rc == 1 and err.startswith("error: carol has no memory, rule or fact")
    assert _json(capsys, "delete", *o, "--status", "current_project")["deleted"] == "status"  # type: ignore[index]
    rc, _, err = _run(capsys, "delete", *o, "--status", "current_project")
    assert rc == 1 and "current_project" in err
    snap: Any = _json(capsys, "snapshot", *o)
    assert snap["rules"] == snap["facts"] == [] and snap["status"] == {}


def test_the_l2_lifecycle_from_the_command_line(pg_env: MemorySettings, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    o = ["--owner", "dana"]
    batch = tmp_path / "batch.txt"
    batch.write_text('we deploy with helm\n\n'
                     '{"content": "the staging db is in Frankfurt", "metadata": {"agent": "ops"}}\n'
                     "用户喜欢喝乌龙茶\n", encoding="utf-8")
    stored: Any = _json(capsys, "store-many", *o, str(batch))
    assert [r["memory"]["content"] for r in stored] == [
        "we deploy with helm", "the staging db is in Frankfurt", "用户喜欢喝乌龙茶"]
    ops_only: Any = _json(capsys, "list", *o, "--filter", '{"agent": "ops"}')
    assert [m["content"] for m in ops_only] == ["the staging db is in Frankfurt"]
    hits: Any = _json(capsys, "search", *o, "staging db", "--filter", '{"agent": "nobody"}')
    assert hits == []
    mid = ops_only[0]["id"]
    new: Any = _json(capsys, "update", *o, "--id", mid[:8], "--content",
                     "the staging db moved to Oslo")
    assert new["id"] == mid and new["metadata"] == {"agent": "ops"}
    versions: Any = _json(capsys, "memory-history", *o, "--id", mid[:8])
    assert [v["content"] for v in versions] == ["the staging db is in Frankfurt",
                                                "the staging db moved to Oslo"]
    rc, _, err = _run(capsys, "list", *o, "--filter", "not json")
    assert rc == 1 and err.startswith("error: --filter is not JSON")
    rc, _, err = _run(capsys, "update", *o, "--id", "nope", "--content", "x")
    assert rc == 1 and "nope" in err


def test_pending_by_prefix_and_audit(pg_env: MemorySettings,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    _populate(pg_env)
    items: Any = _json(capsys, "pending", "list", "--owner", "alice")
    assert len(items) == 2
    first, second = items
    common = next((first["id"][:n] for n in range(len(first["id"]), -1, -1)
                   if second["id"].startswith(first["id"][:n])), "")
    rc, _, err = _run(capsys, "pending", "confirm", "--owner", "alice", "--id", common)
    if common:  # the ids start alike: refused, nothing decided
        assert rc == 1 and "start with" in err
    done: Any = _json(capsys, "pending", "confirm", "--owner", "alice",
                      "--id", first["id"][:len(common) + 4], "--by", "ops")
    assert done["entry"]["pending_id"] == first["id"] and done["applied"]
    _json(capsys, "pending", "reject", "--owner", "alice", "--id", second["id"][:len(common) + 4])
    trail: Any = _json(capsys, "audit", "--owner", "alice")
    assert [(e["pending_id"], e["action"]) for e in trail] == [
        (second["id"], "rejected"), (first["id"], "confirmed")]
    rc, out, _ = _run(capsys, "audit", "--owner", "alice", "--limit", "1")
    assert rc == 0 and "1 decision(s)" in out and "rejected" in out


def test_bad_input_is_one_line(pg_env: MemorySettings,
                               capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["store", "--owner", "a", "x", "--metadata", "{not json"],
                 ["store", "--owner", "a", "x", "--metadata", '{"merge_count": 1}'],
                 ["set-status", "--owner", "a", "bad key", "v"],
                 ["add-rule", "--owner", "a", "   "],
                 ["list", "--owner", "a", "--limit", "0"],
                 ["audit", "--owner", "bad owner"]):
        rc, out, err = _run(capsys, *argv)
        assert rc == 1 and out == "" and len(err.strip().splitlines()) == 1, (argv, err)
    assert _json(capsys, "list", "--owner", "a") == []


def test_no_warning_on_a_headless_host() -> None:
    """The embedded PostgreSQL with XDG_RUNTIME_DIR unset, as on a server or a container."""
    base = Path(tempfile.mkdtemp(prefix="dm-test-headless-"))
    base.chmod(0o755)  # the PostgreSQL user must reach it
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DREAM_MEMORY_") and k != "XDG_RUNTIME_DIR"}
    env.update(DREAM_MEMORY_BACKEND="postgres", DREAM_MEMORY_DATA_DIR=str(base / "data"),
               PYTHONPATH=os.getcwd(), PYTHONWARNINGS="default")
    try:
        for argv in (["--version"], ["snapshot", "--owner", "a"],
                     ["add-fact", "--owner", "a", "The user is a Java developer"]):
            done = subprocess.run([sys.executable, "-m", "dream_memory_actor.cli", *argv],
                                  env=env, capture_output=True, text=True, timeout=180)
            assert done.returncode == 0, done.stderr
            assert "Warning" not in done.stderr and "XDG" not in done.stderr, (argv, done.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_mcp_without_the_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    for name in [m for m in sys.modules if m.startswith("dream_memory_actor.mcp")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if the mcp extra were not installed
    rc, _, err = _run(capsys, "mcp", "--help")
    assert rc == 1 and "pip install 'dream-memory-actor[mcp]'" in err
    assert "Traceback" not in err


def test_store_takes_a_context_line_by_line(memory_env: None,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    o = ["--owner", "carol"]
    got: Any = _json(capsys, "store", *o, "Bob: which breed?", "--context", "8 May 2023",
                     "--context", "Ann: I adopted a dog.")
    assert got["memory"]["content"] == "Bob: which breed?"
    assert got["memory"]["context"] == "8 May 2023\nAnn: I adopted a dog."
    one: Any = _json(capsys, "store", *o, "Ann: a beagle.", "--context", "8 May 2023")
    assert one["memory"]["context"] == "8 May 2023"
    rc, _, err = _run(capsys, "store", *o, "Ann: a beagle.", "--context", " ")
    assert rc == 1 and "context must not be empty" in err
