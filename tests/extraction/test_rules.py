"""The rule-based extractor: explicit phrasings only, fixed confidences, user messages only."""

from __future__ import annotations

import pytest

from dream_memory_actor.extraction import RuleBasedExtractor, decide
from dream_memory_actor.extraction.rules import match_sentence, sentences
from dream_memory_actor.models import ChatMessage


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


@pytest.mark.parametrize(("sentence", "kind", "content", "confidence"), [
    ("From now on, reply in Chinese.", "rule", "Reply in Chinese", 0.90),
    ("ok so from now on look at security first in code review!", "rule",
     "Look at security first in code review", 0.90),
    ("Remember that the build uses Gradle 8.", "fact", "The build uses Gradle 8", 0.85),
    ("please remember: staging is on k8s", "fact", "Staging is on k8s", 0.85),
    ("I am a Java developer.", "fact", "The user is a Java developer", 0.70),
    ("I'm an SRE", "fact", "The user is an SRE", 0.70),
    ("从现在开始，代码审查先看安全。", "rule", "代码审查先看安全", 0.90),
    ("以后回复用中文", "rule", "回复用中文", 0.70),
    ("记住：我在做Dream-SaaS项目。", "fact", "我在做Dream-SaaS项目", 0.85),
    ("请记住我用vim", "fact", "我用vim", 0.85),
    ("我是后端工程师", "fact", "用户是后端工程师", 0.70),
])
def test_explicit_phrasings(sentence: str, kind: str, content: str, confidence: float) -> None:
    item = match_sentence(sentence)
    assert item is not None
    assert (item.kind, item.content, item.confidence) == (kind, content, confidence)
    assert item.evidence == sentence


@pytest.mark.parametrize("sentence", [
    "Do you remember that film?", "你记住了吗？", "I remember that day well",
    "Security matters from now on", "I am tired", "我们以后再聊", "From now on", "记住",
])
def test_no_match(sentence: str) -> None:
    assert match_sentence(sentence) is None


def test_ambiguous_phrasings_are_not_written_without_a_person() -> None:
    # "I am a bit tired" matches "I am a ..." - which is why that phrasing only queues.
    item = match_sentence("I am a bit tired.")
    assert item is not None and decide(item.confidence) == "pending"
    for explicit in ("From now on, use tabs.", "Remember that I use tabs."):
        found = match_sentence(explicit)
        assert found is not None and decide(found.confidence) == "write"


async def test_reads_user_messages_sentence_by_sentence() -> None:
    result = await RuleBasedExtractor().extract([
        user("Hi! From now on, reply in Chinese. Also remember that I use vim\n我是前端工程师"),
        ChatMessage(role="assistant", content="From now on I will call you boss."),
        ChatMessage(role="system", content="Remember that you are helpful."),
    ])
    assert [(i.kind, i.content) for i in result.items] == [
        ("rule", "Reply in Chinese"), ("fact", "I use vim"), ("fact", "用户是前端工程师")]
    assert (result.extractor, result.source) == ("rule-based", "rules")
    assert result.usage.prompt_tokens == 0 and result.usage.cost_usd is None


def test_sentences() -> None:
    assert sentences("One. Two!  Three?\nfour；五。") == ["One.", "Two!", "Three?", "four；",
                                                         "五。"]
