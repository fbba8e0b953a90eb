"""Every ``dream-memory`` command on an owner, in text and with ``--json``, for each
outcome its operation can return: the exit status is the outcome's, a success prints
its answer (JSON that parses with ``--json``) and nothing on stderr, a refusal prints
one ``error:`` line and nothing on stdout, and no path prints a traceback.

Each outcome is played twice on owners prepared alike, once per output mode, since a
write changes what the next one finds. The state lives in the embedded PostgreSQL
between invocations, as for a person running the commands one after another.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dream_memory_actor import MemoryEngine
from dream_memory_actor.config import MemorySettings
from dream_memory_actor.embedding.hashing import HashingEmbedder
from dream_memory_actor.models import MemoryPendingItem, utcnow
from dream_memory_actor.storage.ops import AddPending, AddRule, SetStatus

from .test_cli import _run, pg_env

__all__ = ["pg_env"]  # the fixture, imported for the tests below

_owners = itertools.count()

Prepare = Callable[[MemoryEngine, str], Any]


class Outcomes:
    """Plays outcomes of the commands on the storage of ``settings``; prepares owners
    with an engine of its own on that storage (the one the commands open: with an
    embedder when the test gave them one), on a loop of its own."""

    def __init__(self, capsys: pytest.CaptureFixture[str], settings: MemorySettings) -> None:
        self.capsys = capsys
        self.settings = settings
        self._loop = asyncio.new_event_loop()
        self._engine: MemoryEngine | None = None

    def engine(self, fn: Callable[[MemoryEngine], Any]) -> Any:
        """``fn(engine)``, awaited."""
        async def go() -> Any:
            if self._engine is None:
                self._engine = await MemoryEngine.open(self.settings)
            return await fn(self._engine)

        return self._loop.run_until_complete(go())

    def close(self) -> None:
        if self._engine is not None:
            self._loop.run_until_complete(self._engine.close())
        self._loop.close()

    def play(self, argv: Callable[[str, Any], Sequence[str]], *, rc: int = 0,
             prepare: Prepare | None = None) -> tuple[str, Any]:
        """Run ``argv(owner, prepared)`` as text on one owner and with ``--json`` on
        another, each first ``prepare``d; both end with ``rc``. Returns the text output
        and the parsed JSON (on a refusal: the two error lines)."""
        answers = []
        for mode in ("text", "json"):
            owner = f"{mode}-{next(_owners)}"
            ready = None if prepare is None else self.engine(lambda e, o=owner: prepare(e, o))
            extra = ["--json"] if mode == "json" else []
            code, out, err = _run(self.capsys, *argv(owner, ready), *extra)
            assert "Traceback" not in out + err, err
            assert code == rc, (mode, argv(owner, ready), out, err)
            if rc == 0:
                assert err == "" and out.strip(), (mode, err)
                answers.append(json.loads(out) if mode == "json" else out)
            else:
                lines = err.strip().splitlines()
                assert out == "" and len(lines) == 1 and lines[0].startswith("error: "), (
                    mode, out, err)
                answers.append(lines[0])
        return answers[0], answers[1]


@pytest.fixture
def cli(pg_env: MemorySettings, capsys: pytest.CaptureFixture[str]) -> Iterator[Outcomes]:
    """The commands on a keyword-only store (no embedding model configured)."""
    outcomes = Outcomes(capsys, pg_env)
    yield outcomes
    outcomes.close()


@pytest.fixture
def embedded_cli(pg_env: MemorySettings, capsys: pytest.CaptureFixture[str],
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[Outcomes]:
    """The commands with an embedder whose vectors put texts that share words near each
    other (feature hashing), so a store meets each judgement of its nearest memory."""
    plain = MemoryEngine.open.__func__  # type: ignore[attr-defined]

    async def open_hashing(cls: type[MemoryEngine], settings: MemorySettings | None = None,
                           /, **kw: Any) -> MemoryEngine:
        kw["embedder"] = kw.get("embedder") or HashingEmbedder(64)
        return await plain(cls, settings, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(MemoryEngine, "open", classmethod(open_hashing))
    outcomes = Outcomes(capsys, pg_env)
    yield outcomes
    outcomes.close()


def store(*texts: str) -> Prepare:
    async def go(engine: MemoryEngine, owner: str) -> list[str]:
        return [(await engine.store(owner, t)).memory.id for t in texts]
    return go


# -- store, store-many ----------------------------------------------------------------------


def test_store_with_an_embedder(embedded_cli: Outcomes) -> None:
    play = embedded_cli.play
    frankfurt = "the staging db is in Frankfurt"
    text, data = play(lambda o, _: ["store", "--owner", o, frankfurt])
    assert text.startswith("stored ") and "apart" not in text
    assert data["judgement"] is None and not data["merged"] and data["memory"]["has_embedding"]

    text, data = play(lambda o, _: ["store", "--owner", o, "The staging db is in Frankfurt."],
                      prepare=store(frankfurt))
    assert text.startswith("merged into ") and data["merged"] and data["judgement"] == "duplicate"
    assert data["similarity"] > 0.99

    text, data = play(lambda o, _: ["store", "--owner", o, "the staging db is in Oslo"],
                      prepare=store(frankfurt))
    assert ", superseding " in text and data["superseded"] and data["judgement"] == "update"

    text, data = play(lambda o, _: ["store", "--owner", o,
                                    "the staging db is in Oslo, in a desk at the office"],
                      prepare=store("the staging db is in Oslo"))
    assert ", kept apart from " in text and data["judgement"] == "unsure"

    text, data = play(lambda o, _: ["store", "--owner", o,
                                    "the staging admin server listens on 8080"],
                      prepare=store("the staging web server listens on 8080"))
    assert ", kept apart from " in text and data["judgement"] == "distinct"
    assert 0 < data["similarity"] < 1


def test_store_on_a_keyword_only_store(cli: Outcomes) -> None:
    """Without an embedder no similarity is measured: the same text is merged, a changed
    value supersedes, and a near one is judged by its words alone and kept apart."""
    text, data = cli.play(lambda o, _: ["store", "--owner", o, "we deploy with helm"],
                          prepare=store("we deploy with helm"))
    assert text.startswith("merged into ") and "(the same text)" in text
    assert data["merged"] and data["similarity"] is None
    assert data["memory"]["has_embedding"] is False
    text, data = cli.play(lambda o, _: ["store", "--owner", o, "we deploy with argo"],
                          prepare=store("we deploy with helm"))
    assert ", kept apart from " in text and data["judgement"] == "unsure"
    assert data["similarity"] is None and not data["merged"]
    text, data = cli.play(lambda o, _: ["store", "--owner", o, "the cluster runs version 1.29"],
                          prepare=store("the cluster runs version 1.27"))
    assert data["superseded"] and data["judgement"] == "update" and data["similarity"] is None
    cli.play(lambda o, _: ["store", "--owner", o, "x", "--metadata", "[1]"], rc=1)
    cli.play(lambda o, _: ["store", "--owner", o, " "], rc=1)


def test_store_many(embedded_cli: Outcomes, tmp_path: Path) -> None:
    batch = tmp_path / "batch.txt"
    batch.write_text("the staging db is in Oslo\n"
                     '{"content": "we deploy with helm", "metadata": {"agent": "ops"}}\n',
                     encoding="utf-8")
    text, data = embedded_cli.play(lambda o, _: ["store-many", "--owner", o, str(batch)],
                                   prepare=store("the staging db is in Frankfurt",
                                                 "we deploy with helm"))
    assert [line.split(" ")[0] for line in text.splitlines()] == ["stored", "merged"]
    assert [(r["superseded"], r["merged"]) for r in data] == [(True, False), (False, True)]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n", encoding="utf-8")
    embedded_cli.play(lambda o, _: ["store-many", "--owner", o, str(empty)], rc=1)
    embedded_cli.play(lambda o, _: ["store-many", "--owner", o, str(tmp_path / "none.txt")],
                      rc=1)


# -- update, memory-history, list, search ---------------------------------------------------


def test_update_and_memory_history(embedded_cli: Outcomes) -> None:
    play = embedded_cli.play

    async def superseded(engine: MemoryEngine, owner: str) -> dict[str, str]:
        old = (await engine.store(owner, "the staging db is in Frankfurt")).memory.id
        new = (await engine.store(owner, "the staging db is in Oslo")).memory.id
        gone = (await engine.store(owner, "we deploy with helm")).memory.id
        await engine.delete(owner, gone)
        return {"old": old, "new": new, "gone": gone}

    text, data = play(lambda o, m: ["update", "--owner", o, "--id", m["new"][:8], "--content",
                                    "the staging db is in Lisbon"], prepare=superseded)
    assert text.startswith("updated ") and data["content"] == "the staging db is in Lisbon"
    text, data = play(lambda o, m: ["update", "--owner", o, "--id", m["new"], "--content",
                                    "the staging db is in Oslo", "--metadata", '{"a": 1}'],
                      prepare=superseded)
    assert data["metadata"] == {"a": 1}
    for which in ("old", "gone"):  # superseded, deleted
        play(lambda o, m, w=which: ["update", "--owner", o, "--id", m[w], "--content", "x y"],
             rc=1, prepare=superseded)
    play(lambda o, _: ["update", "--owner", o, "--id", "nope", "--content", "x"], rc=1)

    # the chain of a memory, from its current id, from an earlier one, and none
    for which in ("new", "old"):
        text, data = play(lambda o, m, w=which: ["memory-history", "--owner", o, "--id", m[w]],
                          prepare=superseded)
        assert text.startswith("2 version(s)") and "current" in text
        assert [v["content"] for v in data] == ["the staging db is in Frankfurt",
                                                "the staging db is in Oslo"]
    for gone in (lambda o, m: m["gone"], lambda o, m: "nope"):  # deleted, never there
        play(lambda o, m, g=gone: ["memory-history", "--owner", o, "--id", g(o, m)], rc=1,
             prepare=superseded)


def test_list_and_search(cli: Outcomes) -> None:
    play = cli.play
    text, data = play(lambda o, _: ["list", "--owner", o])
    assert text.startswith("0 memory(ies)") and data == []
    two = store("we deploy with helm", "用户喜欢喝乌龙茶")
    text, data = play(lambda o, _: ["list", "--owner", o, "--limit", "1"], prepare=two)
    assert text.startswith("1 memory(ies)") and len(data) == 1
    text, data = play(lambda o, _: ["list", "--owner", o, "--offset", "5"], prepare=two)
    assert data == []
    text, data = play(lambda o, _: ["list", "--owner", o, "--filter", '{"agent": "x"}'],
                      prepare=two)
    assert data == []
    play(lambda o, _: ["list", "--owner", o, "--filter", "[1]"], rc=1)

    text, data = play(lambda o, _: ["search", "--owner", o, "乌龙茶"], prepare=two)
    assert text.startswith("1 hit(s)") and "vector n/a" in text
    assert data[0]["vector_score"] is None and data[0]["mode"] == "keyword"
    text, data = play(lambda o, _: ["search", "--owner", o, "kubernetes"], prepare=two)
    assert text.startswith("0 hit(s)") and data == []
    play(lambda o, _: ["search", "--owner", o, " "], rc=1)


def test_search_with_an_embedder(embedded_cli: Outcomes) -> None:
    text, data = embedded_cli.play(lambda o, _: ["search", "--owner", o, "deploy helm"],
                                   prepare=store("we deploy with helm"))
    assert data[0]["vector_score"] is not None and "vector n/a" not in text


# -- rules, facts, status, snapshot ---------------------------------------------------------


def test_add_rule_and_fact(cli: Outcomes) -> None:
    for kind in ("rule", "fact"):
        command = f"add-{kind}"
        text, data = cli.play(lambda o, _, c=command: [c, "--owner", o, "Reply in Chinese"])
        assert text.startswith(f"{kind} ") and data[kind]["content"] == "Reply in Chinese"

        async def added(engine: MemoryEngine, owner: str, k: str = kind) -> None:
            add = engine.structured.add_rule if k == "rule" else engine.structured.add_fact
            await add(owner, "Reply in Chinese")

        # the same text again: the item there is kept and answered
        text, data = cli.play(lambda o, _, c=command: [c, "--owner", o, "reply in chinese"],
                              prepare=added)
        assert data[kind]["content"] == "Reply in Chinese"
        # another value of it: queued as its correction
        text, data = cli.play(lambda o, _, c=command: [c, "--owner", o, "Reply in English"],
                              prepare=added)
        assert text.startswith("queued for review as pending ")
        assert data[kind] is None and data["pending"]["supersedes"]
        cli.play(lambda o, _, c=command: [c, "--owner", o, "x", "--source", ""], rc=1)


def test_set_and_delete_status(cli: Outcomes) -> None:
    text, data = cli.play(lambda o, _: ["set-status", "--owner", o, "mood", "focused"])
    assert "until" not in text and data["status"] == {"mood": "focused"}
    text, data = cli.play(lambda o, _: ["set-status", "--owner", o, "mood", "tired", "--ttl",
                                        "3600"])
    assert "(until " in text and data["status"] == {"mood": "tired"}
    cli.play(lambda o, _: ["set-status", "--owner", o, "mood", "x", "--ttl", "-1"], rc=1)

    async def mood(engine: MemoryEngine, owner: str) -> None:
        await engine.apply(owner, [SetStatus("mood", "focused")])

    text, data = cli.play(lambda o, _: ["delete", "--owner", o, "--status", "mood"],
                          prepare=mood)
    assert text.startswith("deleted status mood") and data["deleted"] == "status"
    cli.play(lambda o, _: ["delete", "--owner", o, "--status", "mood"], rc=1)


def test_delete(cli: Outcomes) -> None:
    async def three(engine: MemoryEngine, owner: str) -> dict[str, str]:
        s = engine.structured
        return {"rule": (await s.add_rule(owner, "Reply in Chinese")).id,
                "fact": (await s.add_fact(owner, "The user is a Java developer")).id,
                "memory": (await engine.store(owner, "we deploy with helm")).memory.id}

    for kind in ("rule", "fact", "memory"):
        text, data = cli.play(lambda o, ids, k=kind: ["delete", "--owner", o, ids[k][:10]],
                              prepare=three)
        assert text.startswith(f"deleted {kind} ") and data["deleted"] == kind
    cli.play(lambda o, _: ["delete", "--owner", o, "zzzz"], rc=1, prepare=three)
    cli.play(lambda o, _: ["delete", "--owner", o, ""], rc=1, prepare=three)

    async def twins(engine: MemoryEngine, owner: str) -> None:
        await engine.apply(owner, [AddRule("Reply in Chinese", id=f"{owner}-1"),
                                   AddRule("Keep answers short", id=f"{owner}-2")])

    error, _ = cli.play(lambda o, _: ["delete", "--owner", o, o], rc=1, prepare=twins)
    assert "2 items start with" in error


def test_snapshot(cli: Outcomes) -> None:
    text, data = cli.play(lambda o, _: ["snapshot", "--owner", o])
    assert "(no rules, facts or status)" in text and data["version"] == 0

    async def full(engine: MemoryEngine, owner: str) -> None:
        await engine.structured.add_rule(owner, "Reply in Chinese")
        await engine.structured.add_fact(owner, "用户是 Java 开发者")
        await engine.apply(owner, [SetStatus("sprint", "42", ttl_s=3600), AddPending(
            MemoryPendingItem(kind="status", key="mood", value="tired", confidence=0.5,
                              expires_at=utcnow() + timedelta(days=1)))])

    text, data = cli.play(lambda o, _: ["snapshot", "--owner", o], prepare=full)
    assert "1 pending item(s)" in text and "sprint=42" in text
    assert data["status"] == {"sprint": "42"} and len(data["pending"]) == 1


# -- the pending queue and the audit trail ----------------------------------------------------


def queued(*items: MemoryPendingItem) -> Prepare:
    async def go(engine: MemoryEngine, owner: str) -> dict[str, str]:
        fresh = [i.model_copy(update={"id": f"{owner}-{n}"}) for n, i in enumerate(items)]
        await engine.apply(owner, [AddPending(i) for i in fresh])
        return {i.kind: i.id for i in fresh}
    return go


TEA = MemoryPendingItem(kind="fact", content="The user likes green tea", confidence=0.6,
                        evidence="I like green tea")
MOOD = MemoryPendingItem(kind="status", key="mood", value="tired", confidence=0.5,
                         expires_at=utcnow() + timedelta(days=30))
NOTE = MemoryPendingItem(kind="memory", content="the release train leaves on Thursdays",
                         confidence=0.5)


def test_pending_list_confirm_and_reject(cli: Outcomes) -> None:
    play = cli.play
    text, data = play(lambda o, _: ["pending", "list", "--owner", o])
    assert text.startswith("0 pending item(s)") and data == []
    text, data = play(lambda o, _: ["pending", "list", "--owner", o],
                      prepare=queued(TEA, MOOD, NOTE))
    assert "evidence: 'I like green tea'" in text and ", expires " in text and len(data) == 3

    # found: each kind is written, an edit instead of its text
    for kind, edit, written in (("fact", None, "The user likes green tea"),
                                ("status", "sleepy", "sleepy"),
                                ("memory", None, "the release train leaves on Thursdays")):
        extra = [] if edit is None else ["--edit", edit]
        text, data = play(lambda o, ids, k=kind, x=extra: [
            "pending", "confirm", "--owner", o, "--id", ids[k], "--by", "ann", *x],
            prepare=queued(TEA, MOOD, NOTE))
        assert text.startswith("confirmed ") and f"written: {written}" in text
        assert data["applied"] and data["entry"]["written"] == written
        assert ("memory id: " in text) == (kind == "memory") == (data["memory_id"] is not None)
    text, data = play(lambda o, ids: ["pending", "reject", "--owner", o, "--id", ids["fact"]],
                      prepare=queued(TEA))
    assert text.startswith("rejected ") and data["entry"]["action"] == "rejected"

    # not found, and a start two ids share
    for action in ("confirm", "reject"):
        play(lambda o, _, a=action: ["pending", a, "--owner", o, "--id", "nope"], rc=1)
        play(lambda o, ids, a=action: ["pending", a, "--owner", o, "--id", o], rc=1,
             prepare=queued(TEA, MOOD))

    # decided before: the same decision again is answered as it stands, the other refused
    async def decided(engine: MemoryEngine, owner: str) -> dict[str, str]:
        ids: dict[str, str] = await queued(TEA, MOOD)(engine, owner)
        await engine.structured.decide(owner, ids["fact"], "confirmed", "ann")
        await engine.structured.decide(owner, ids["status"], "rejected", "ann")
        return ids

    text, data = play(lambda o, ids: ["pending", "confirm", "--owner", o, "--id", ids["fact"]],
                      prepare=decided)
    assert "(decided before; nothing changed)" in text and data["applied"] is False
    text, data = play(lambda o, ids: ["pending", "reject", "--owner", o, "--id", ids["status"]],
                      prepare=decided)
    assert "(decided before; nothing changed)" in text and data["applied"] is False
    error, _ = play(lambda o, ids: ["pending", "reject", "--owner", o, "--id", ids["fact"]],
                    rc=1, prepare=decided)
    assert "already confirmed" in error
    error, _ = play(lambda o, ids: ["pending", "confirm", "--owner", o, "--id", ids["status"]],
                    rc=1, prepare=decided)
    assert "already rejected" in error

    # a correction whose rule was superseded meanwhile cannot be confirmed
    async def stale(engine: MemoryEngine, owner: str) -> str:
        s = engine.structured
        rule = await s.add_rule(owner, "Reply in Chinese")
        fix = await s.add_rule(owner, "Reply in English")
        assert isinstance(fix, MemoryPendingItem)
        await s.supersede(owner, rule.id, "Reply in French", by="ann")
        return fix.id

    play(lambda o, pid: ["pending", "confirm", "--owner", o, "--id", pid], rc=1, prepare=stale)

    text, data = play(lambda o, _: ["audit", "--owner", o], prepare=decided)
    assert text.startswith("2 decision(s)") and [e["action"] for e in data] == [
        "rejected", "confirmed"]
    text, data = play(lambda o, _: ["audit", "--owner", o])
    assert text.startswith("0 decision(s)") and data == []


# -- supersede and history ----------------------------------------------------------------


def test_supersede_and_history(cli: Outcomes) -> None:
    play = cli.play

    async def chain(engine: MemoryEngine, owner: str) -> dict[str, str]:
        s = engine.structured
        rule = await s.add_rule(owner, "Indent with spaces")
        fact = await s.add_fact(owner, "The user is a Java developer")
        other = await s.add_rule(owner, "Review security first")
        new = await s.supersede(owner, rule.id, "Indent with tabs", by="ann", reason="style")
        await engine.apply(owner, [SetStatus("mood", "focused"), SetStatus("sprint", "1",
                                                                           ttl_s=60)])
        await engine.apply(owner, [SetStatus("mood", "tired")])
        return {"old": rule.id, "new": new.id, "fact": fact.id, "other": other.id}

    for which in ("new", "fact"):
        text, data = play(lambda o, ids, w=which: [
            "supersede", "--owner", o, "--id", ids[w], "--content", "Something else entirely",
            "--by", "bob"], prepare=chain)
        assert " superseded by " in text and data["content"] == "Something else entirely"
    # onto the text of another rule: closed in its favour, that rule answered
    text, data = play(lambda o, ids: ["supersede", "--owner", o, "--id", ids["new"],
                                      "--content", "Review security first"], prepare=chain)
    assert data["content"] == "Review security first"
    for argv in (lambda o, ids: ["supersede", "--owner", o, "--id", ids["old"], "--content",
                                 "Indent with care"],  # superseded already
                 lambda o, ids: ["supersede", "--owner", o, "--id", ids["new"], "--content",
                                 "indent with tabs"],  # its own text
                 lambda o, ids: ["supersede", "--owner", o, "--id", "nope", "--content", "x"]):
        play(argv, rc=1, prepare=chain)

    for which in ("old", "new"):
        text, data = play(lambda o, ids, w=which: ["history", "--owner", o, "--id", ids[w]],
                          prepare=chain)
        assert "2 version(s)" in text and "superseded by" in text and "current since" in text
        assert [v["content"] for v in data["versions"]] == ["Indent with spaces",
                                                             "Indent with tabs"]
    play(lambda o, _: ["history", "--owner", o, "--id", "nope"], rc=1, prepare=chain)
    text, data = play(lambda o, _: ["history", "--owner", o, "--status", "mood"],
                      prepare=chain)
    assert text.startswith("2 value(s) of mood") and [c["value"] for c in data] == [
        "focused", "tired"]
    text, data = play(lambda o, _: ["history", "--owner", o, "--status", "nothing"])
    assert text.startswith("0 value(s)") and data == []
    for at in ("2000-01-01T00:00:00", (utcnow() + timedelta(days=1)).isoformat()):
        text, data = play(lambda o, _, t=at: ["history", "--owner", o, "--as-of", t],
                          prepare=chain)
        assert text.startswith("owner ") and isinstance(data["rules"], list)


# -- forget, export, import -----------------------------------------------------------------


def test_forget(cli: Outcomes) -> None:
    cli.play(lambda o, _: ["forget", "--owner", o], rc=2, prepare=store("we deploy with helm"))
    text, data = cli.play(lambda o, _: ["forget", "--owner", o, "--yes", "--by", "admin"],
                          prepare=store("we deploy with helm"))
    assert text.startswith("forgot ") and data["counts"]["memories"] == 1
    text, data = cli.play(lambda o, _: ["forget", "--owner", o, "--yes"])  # nothing to erase
    assert set(data["counts"].values()) == {0}


def test_export_and_import(cli: Outcomes, tmp_path: Path,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    play = cli.play
    files: dict[str, Path] = {}

    def to(owner: str) -> str:
        files[owner] = tmp_path / f"{owner}.jsonl"
        return str(files[owner])

    text, data = play(lambda o, _: ["export", "--owner", o, "--output", to(o)],
                      prepare=store("we deploy with helm"))
    assert text.startswith("exported ") and data["records"] == 1
    text, data = play(lambda o, _: ["export", "--owner", o, "--output", to(o)])
    assert data["records"] == 0  # an owner with nothing: a header and an end record
    play(lambda o, _: ["export", "--owner", o, "--output", str(tmp_path / "no" / "dir")],
         rc=1, prepare=store("we deploy with helm"))
    play(lambda o, _: ["export", "--owner", o, "--output", str(tmp_path)], rc=1)

    # import: a document of its own owner, once forgotten; refused while it holds data
    async def exported(engine: MemoryEngine, owner: str) -> str:
        await engine.store(owner, "we deploy with helm")
        path = tmp_path / f"{owner}-doc.jsonl"
        path.write_text("".join(line + "\n" for line in await engine.export(owner)))
        return str(path)

    async def exported_and_forgotten(engine: MemoryEngine, owner: str) -> str:
        path = await exported(engine, owner)
        await engine.forget(owner, by="admin")
        return path

    text, data = play(lambda o, path: ["import", "--input", path],
                      prepare=exported_and_forgotten)
    assert text.startswith("imported ") and data["counts"]["memory"] == 1
    error, _ = play(lambda o, path: ["import", "--input", path], rc=1, prepare=exported)
    assert "forget it first" in error
    text, data = play(lambda o, path: ["import", "--input", path, "--as", f"{o}-copy"],
                      prepare=exported)
    assert data["owner"].endswith("-copy")
    play(lambda o, path: ["import", "--input", path, "--as", "bad owner!"], rc=1,
         prepare=exported)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "header", "format": "dream-memory-export", "version": 7}\n')
    play(lambda o, _: ["import", "--input", str(bad)], rc=1)
    def from_stdin(engine: MemoryEngine, owner: str) -> Any:
        async def go() -> None:
            path = await exported_and_forgotten(engine, owner)
            monkeypatch.setattr("sys.stdin", io.StringIO(Path(path).read_text("utf-8")))
        return go()

    text, data = play(lambda o, _: ["import", "--input", "-"], prepare=from_stdin)
    assert data["counts"]["memory"] == 1
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00")
    for path in (binary, tmp_path / "missing.jsonl", tmp_path):
        play(lambda o, _, p=path: ["import", "--input", str(p)], rc=1)
