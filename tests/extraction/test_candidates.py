"""The strict parser of an extractor's reply: pure, no server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dream_memory_actor.errors import MalformedExtraction
from dream_memory_actor.extraction.candidates import (
    MAX_ITEMS,
    ExtractedItem,
    check_items,
    parse_reply,
)

GOOD: dict[str, Any] = {"kind": "rule", "content": "Reply in Chinese", "confidence": 0.9,
                        "evidence": "from now on answer in Chinese"}


def reply(*items: dict[str, Any], **extra: Any) -> str:
    return json.dumps({"items": list(items), **extra})


def test_a_good_reply() -> None:
    status = {"kind": "status", "key": "current_project", "value": "dream-saas",
              "confidence": 0.7, "evidence": "I'm on dream-saas this week"}
    items = parse_reply(reply(GOOD, status))
    assert [i.kind for i in items] == ["rule", "status"]
    assert items[0].text == "Reply in Chinese" and items[1].text == "dream-saas"
    assert parse_reply('{"items": []}') == ()


def test_code_fences_and_unknown_keys_are_tolerated() -> None:
    (item,) = parse_reply(f"```json\n{reply(dict(GOOD, owner='bob', note='x'))}\n```")
    assert item.content == "Reply in Chinese"
    assert not hasattr(item, "owner")  # whose memory it is never comes from the reply


def test_an_integer_confidence_is_a_number() -> None:
    (item,) = parse_reply(reply(dict(GOOD, confidence=1)))
    assert item.confidence == 1.0


@pytest.mark.parametrize("text", [
    "", "   ", "not json", '{"items": [', "[]", '"items"', "null", '{"candidates": []}',
    '{"items": {}}', '{"items": [1]}',
])
def test_not_the_expected_json(text: str) -> None:
    with pytest.raises(MalformedExtraction):
        parse_reply(text)


@pytest.mark.parametrize("change", [
    {"kind": "opinion"},
    {"content": None},
    {"content": "   "},
    {"content": 42},
    {"confidence": None},
    {"confidence": "0.9"},
    {"confidence": True},
    {"confidence": 1.01},
    {"confidence": -0.1},
    {"evidence": ""},
    {"evidence": None},
    {"evidence": "x" * 2001},
], ids=repr)
def test_a_bad_item_rejects_the_whole_reply(change: dict[str, Any]) -> None:
    bad = {k: v for k, v in dict(GOOD, **change).items() if v is not None}
    with pytest.raises(MalformedExtraction):
        parse_reply(reply(GOOD, bad))


@pytest.mark.parametrize("item", [
    {"kind": "status", "value": "tired"},
    {"kind": "status", "key": "bad key!", "value": "tired"},
    {"kind": "status", "key": "mood", "value": " "},
], ids=repr)
def test_status_items_need_a_key_and_a_value(item: dict[str, Any]) -> None:
    with pytest.raises(MalformedExtraction):
        parse_reply(reply(dict(item, confidence=0.9, evidence="so tired")))


def test_missing_fields_are_named_but_the_reply_is_not_quoted() -> None:
    secret = "my card number is 4111 1111"
    with pytest.raises(MalformedExtraction) as info:
        parse_reply(reply({"kind": "fact", "content": secret}))
    assert "confidence" in str(info.value) and "evidence" in str(info.value)
    assert secret not in str(info.value)


def test_nan_and_infinity_are_refused() -> None:
    for constant in ("NaN", "Infinity", "-Infinity"):
        text = reply(GOOD).replace("0.9", constant)
        with pytest.raises(MalformedExtraction):
            parse_reply(text)


def test_limits() -> None:
    with pytest.raises(MalformedExtraction):
        parse_reply(reply(*[GOOD] * (MAX_ITEMS + 1)))
    with pytest.raises(MalformedExtraction, match="cannot be stored"):
        parse_reply(reply(dict(GOOD, content="x" * 40_000)))
    with pytest.raises(MalformedExtraction, match="cannot be stored"):
        parse_reply(reply(dict(GOOD, content="a\x00b")))


def test_check_items_normalizes_text() -> None:
    item = ExtractedItem(kind="fact", content="  spaced  ", confidence=0.9, evidence="e")
    assert check_items([item], 1024)[0].content == "spaced"
