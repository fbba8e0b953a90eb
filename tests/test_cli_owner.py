"""``dream-memory export|import|forget`` against PostgreSQL (embedded)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from dream_memory_actor.config import MemorySettings
from tests.test_cli import _env, _json, _populate, _run


def test_export_forget_import(monkeypatch: pytest.MonkeyPatch, pg_dsn: str, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    _env(monkeypatch, backend="postgres", postgres_dsn=pg_dsn,
         postgres_schema=f"t_{uuid.uuid4().hex[:12]}")
    _populate(MemorySettings())
    before = _json(capsys, "snapshot", "--owner", "alice")
    assert isinstance(before, dict)
    out_file = tmp_path / "alice.jsonl"

    rc, out, _ = _run(capsys, "export", "--owner", "alice", "--output", str(out_file))
    assert rc == 0 and "exported alice" in out
    header = json.loads(out_file.read_text().splitlines()[0])
    assert header["format"] == "dream-memory-export" and header["owner"] == "alice"

    # import into an owner that has data: refused, one line on stderr
    rc, _, err = _run(capsys, "import", "--input", str(out_file))
    assert rc == 1 and err.startswith("error: ") and "forget it first" in err

    rc, _, err = _run(capsys, "forget", "--owner", "alice")
    assert rc == 2 and "--yes" in err
    assert _json(capsys, "snapshot", "--owner", "alice")["version"] == before["version"]
    tomb = _json(capsys, "forget", "--owner", "alice", "--yes", "--by", "admin")
    assert isinstance(tomb, dict) and tomb["by"] == "admin" and tomb["counts"]["memories"] == 1
    assert _json(capsys, "snapshot", "--owner", "alice")["version"] == 0

    counts = _json(capsys, "import", "--input", str(out_file))
    assert isinstance(counts, dict) and counts["counts"]["memory"] == 1
    after = _json(capsys, "snapshot", "--owner", "alice")
    assert isinstance(after, dict)
    for key in ("rules", "facts", "status", "pending"):
        assert after[key] == before[key], key
    hits = _json(capsys, "search", "--owner", "alice", "Kubernetes helm")
    assert isinstance(hits, list) and hits[0]["memory"]["content"].startswith("went live")

    # a copy under another owner, beside the original
    copied = _json(capsys, "import", "--input", str(out_file), "--as", "alice-copy")
    assert isinstance(copied, dict) and copied["owner"] == "alice-copy"
    assert copied["counts"] == counts["counts"]
    copy = _json(capsys, "snapshot", "--owner", "alice-copy")
    assert isinstance(copy, dict)
    for key in ("rules", "facts", "status", "pending"):
        assert copy[key] == after[key], key
    hits = _json(capsys, "search", "--owner", "alice-copy", "Kubernetes helm")
    assert isinstance(hits, list) and hits[0]["memory"]["owner"] == "alice-copy"
    rc, _, err = _run(capsys, "import", "--input", str(out_file), "--as", "bad owner!")
    assert rc != 0 and err.startswith("error: ") and "owner" in err, err

    # a document that is not one: refused, nothing written
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "header", "format": "dream-memory-export", "version": 7}\n')
    rc, _, err = _run(capsys, "import", "--input", str(bad))
    assert rc == 1 and "version 7 is not supported" in err
