"""``dream-memory supersede`` and ``dream-memory history`` on PostgreSQL (the settings
come from ``DREAM_MEMORY_*``, as for every command)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from dream_memory_actor import MemoryEngine, cli
from dream_memory_actor.config import MemorySettings


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch, pg_dsn: str) -> MemorySettings:
    for key in [k for k in __import__("os").environ if k.startswith("DREAM_MEMORY_")]:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("DREAM_MEMORY_BACKEND", "postgres")
    monkeypatch.setenv("DREAM_MEMORY_POSTGRES_DSN", pg_dsn)
    monkeypatch.setenv("DREAM_MEMORY_POSTGRES_SCHEMA", f"t_{uuid.uuid4().hex[:12]}")
    return MemorySettings()


def _rule(settings: MemorySettings, text: str) -> str:
    async def go() -> str:
        engine = await MemoryEngine.open(settings)
        try:
            return (await engine.structured.add_rule("alice", text)).id
        finally:
            await engine.close()

    return asyncio.run(go())


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_supersede_then_history(settings: MemorySettings,
                                capsys: pytest.CaptureFixture[str]) -> None:
    old = _rule(settings, "Indent with spaces")
    rc, out, err = _run(capsys, "supersede", "--owner", "alice", "--id", old, "--content",
                        "Indent with tabs", "--by", "ops", "--reason", "style guide", "--json")
    assert rc == 0, err
    new = json.loads(out)
    assert new["content"] == "Indent with tabs"
    rc, out, _ = _run(capsys, "history", "--owner", "alice", "--id", new["id"], "--json")
    chain = json.loads(out)
    assert rc == 0 and [v["id"] for v in chain["versions"]] == [old, new["id"]]
    assert chain["versions"][0]["reason"] == "style guide"
    rc, out, _ = _run(capsys, "history", "--owner", "alice", "--id", old)
    assert rc == 0 and "superseded by" in out and "current since" in out
    rc, out, _ = _run(capsys, "history", "--owner", "alice", "--as-of", "2000-01-01T00:00:00")
    assert rc == 0 and "rules: (none)" in out
    rc, out, _ = _run(capsys, "history", "--owner", "alice", "--status", "mood", "--json")
    assert rc == 0 and json.loads(out) == []


def test_supersede_and_history_take_id_prefixes(settings: MemorySettings,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    old = _rule(settings, "Review security first")
    rc, out, err = _run(capsys, "supersede", "--owner", "alice", "--id", old[:8], "--content",
                        "Review security and tests first", "--json")
    assert rc == 0, err
    new = json.loads(out)["id"]
    rc, out, err = _run(capsys, "history", "--owner", "alice", "--id", new[:8], "--json")
    assert rc == 0, err
    assert [v["id"] for v in json.loads(out)["versions"]] == [old, new]
    # an earlier version's id works too, in full or by its start (supersede prints it so)
    rc, out, _ = _run(capsys, "history", "--owner", "alice", "--id", old, "--json")
    assert rc == 0 and len(json.loads(out)["versions"]) == 2
    rc, out, err = _run(capsys, "history", "--owner", "alice", "--id", old[:8], "--json")
    assert rc == 0, err
    assert [v["id"] for v in json.loads(out)["versions"]] == [old, new]


@pytest.mark.parametrize("argv", [
    ["supersede", "--owner", "alice", "--id", "no-such-id", "--content", "x"],
    ["supersede", "--owner", "a b", "--id", "x", "--content", "x"],
    ["supersede", "--owner", "alice", "--id", "x", "--content", " "],
    ["history", "--owner", "alice", "--id", "no-such-id"],
    ["history", "--owner", "alice", "--as-of", "yesterday"],
    ["history", "--owner", "alice", "--status", "bad key!"],
])
def test_bad_input_is_one_line_and_status_1(settings: MemorySettings,
                                            capsys: pytest.CaptureFixture[str],
                                            argv: list[str]) -> None:
    rc, out, err = _run(capsys, *argv)
    assert rc == 1 and out == "" and err.startswith("error: ") and err.count("\n") == 1
