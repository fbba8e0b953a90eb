"""Bad input: typed errors from one hierarchy, checked by properties (hypothesis)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dream_memory_actor import validation as check
from dream_memory_actor.errors import (
    DreamMemoryError,
    InvalidContent,
    InvalidEmbedding,
    InvalidInput,
    InvalidOwnerId,
    InvalidQuery,
)
from dream_memory_actor.models import ChatMessage
from dream_memory_actor.storage.memory import InMemoryStructuredStore, InMemoryVectorStore
from dream_memory_actor.validation import l1 as check_l1

owner_ok = st.from_regex(check.OWNER_ID_PATTERN, fullmatch=True)


@given(owner_ok)
def test_valid_owner_ids_pass(owner: str) -> None:
    assert check.owner_id(owner) == owner


@given(st.text(max_size=200).filter(lambda s: not check.OWNER_ID_PATTERN.fullmatch(s)))
def test_invalid_owner_ids_are_typed_errors(owner: str) -> None:
    with pytest.raises(InvalidOwnerId):
        check.owner_id(owner)


@given(st.text(alphabet=" \t\n\r\u00a0\u2003", max_size=50))
def test_whitespace_only_content_is_rejected(text: str) -> None:
    with pytest.raises(InvalidContent):
        check.content(text, 1024)


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=12))
def test_embeddings_must_be_finite_and_of_the_dimension(values: list[float]) -> None:
    ok = len(values) == 4 and all(math.isfinite(v) for v in values) and any(values)
    if ok:
        assert check.embedding(values, 4) == values
    else:
        with pytest.raises(InvalidEmbedding):
            check.embedding(values, 4)


def test_errors_are_one_hierarchy_and_value_errors() -> None:
    for cls in (InvalidOwnerId, InvalidContent, InvalidEmbedding):
        assert issubclass(cls, InvalidInput) and issubclass(cls, DreamMemoryError)
        assert issubclass(cls, ValueError)


bad_owner = st.one_of(st.text(max_size=140).filter(
    lambda s: not check.OWNER_ID_PATTERN.fullmatch(s)), st.integers(), st.none())
bad_text = st.one_of(st.text(alphabet=" \n\t", max_size=10),
                     st.text(min_size=1, max_size=20).map(lambda s: s + "\x00"),
                     st.integers())


@settings(max_examples=60, deadline=None)
@given(owner=bad_owner, text=st.text(min_size=1, max_size=50))
async def test_bad_owner_writes_nothing(owner: object, text: str) -> None:
    s, v = InMemoryStructuredStore(), InMemoryVectorStore(4)
    with pytest.raises(InvalidInput):
        await s.add_rule(owner, text)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        await v.store(owner, text)  # type: ignore[arg-type]
    assert s._snapshots == {} and not any(v._rows_of.values())


@settings(max_examples=60, deadline=None)
@given(text=bad_text, emb=st.one_of(st.none(), st.lists(st.floats(), max_size=6)))
async def test_bad_content_or_embedding_writes_nothing(text: object, emb: object) -> None:
    s, v = InMemoryStructuredStore(), InMemoryVectorStore(4)
    with pytest.raises(InvalidInput):
        await s.add_fact("alice", text)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        await v.store("alice", text, embedding=emb)  # type: ignore[arg-type]
    assert s._snapshots == {} and await v.count("alice") == 0


def test_conversation_ids_use_the_owner_id_alphabet() -> None:
    assert check.conversation_id("c1:x") == "c1:x"
    for bad in ("", "bad conv!", "{tag}", 3, None):
        with pytest.raises(InvalidQuery):
            check.conversation_id(bad)


def test_message_lists() -> None:
    msg = ChatMessage(role="user", content="  hi  ")
    assert check.messages((msg,)) == [msg]
    assert check.message(msg, 1024).content == "hi"
    for bad in ("hi", msg, {"role": "user"}, [msg, "x"], 3):
        with pytest.raises(InvalidQuery):
            check.messages(bad)
    with pytest.raises(InvalidQuery):
        check.messages([], empty_ok=False)
    with pytest.raises(InvalidQuery):
        check.messages([msg] * 3, max_count=2)
    with pytest.raises(InvalidContent):
        check.message(ChatMessage(role="user", content=" \n"), 1024)


def test_ops_are_normalized_and_refused_as_a_whole() -> None:
    from dream_memory_actor.storage.ops import AddRule, SetStatus

    out = check_l1.ops([AddRule("  keep tests green  "), SetStatus("mood", " ok ", 60)], 1024)
    assert [getattr(o, "content", None) or getattr(o, "value", None) for o in out] == [
        "keep tests green", "ok"]
    for bad in ([], "AddRule", [AddRule("x", source="")], [SetStatus("k", "v", -1)],
                [SetStatus("k", "v", True)], ["not an op"]):
        with pytest.raises(InvalidQuery):
            check_l1.ops(bad, 1024)


@pytest.mark.parametrize(("fn", "good", "bad"), [
    (check.offset, 0, [-1, True, 1.0, "1"]),
    (check.window, check.MAX_WINDOW, [0, check.MAX_WINDOW + 1, True]),
    (check.min_version, None, [-1, False, 1.5]),
    (check.timeout, 3600, [0, 3601, True, "1"]),
    (check.decider, "alice", ["", "x" * 65, "a\x00b", None]),
    (check.source, "user", ["", "x" * 65, 7]),
    (check.op_id, "op-1", ["", "x" * 129, None]),
])
def test_small_rules(fn: Any, good: object, bad: list[object]) -> None:
    assert fn(good) == good
    for value in bad:
        with pytest.raises(InvalidQuery):
            fn(value)
