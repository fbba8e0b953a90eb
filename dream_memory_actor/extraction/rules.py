"""A deterministic, rule-based extractor for explicit statements. It is not an LLM.

Used when no ``extraction_model`` is configured, so the demo and the tests run
offline. It reads only the user's messages, sentence by sentence, and matches
a few explicit phrasings at the start of a sentence. It quotes; it does not
paraphrase or infer. Questions ("do you remember that film?") are ignored.

The confidences are fixed per phrasing and say how often such a sentence means
what the extracted item says, not how sure a model is:

========================================  ======  ==========  ======================================
phrasing (sentence start)                 kind    confidence  why
========================================  ======  ==========  ======================================
"from now on ...", "从现在开始/从今以后..."  rule    0.90        an explicit standing instruction
"remember that ...", "(请)记住..."          fact    0.85        the user asks for it to be kept
"以后..."                                   rule    0.70        also "later/after" ("以后再说"): ask
"I am a/an ...", "I'm a/an ..."             fact    0.70        also "I am a bit tired": ask
"我是..."                                   fact    0.70        also "我是说..." ("I mean"): ask
========================================  ======  ==========  ======================================

With the default gate the first two are written and the others wait for a
person. The evidence of each item is the sentence it came from. Explicit
corrections ("from now on X instead of Y", "以后不要...", "...改成...") are
matched first: see ``corrections`` for their forms.

>>> import asyncio
>>> from dream_memory_actor.models import ChatMessage
>>> r = asyncio.run(RuleBasedExtractor().extract(
...     [ChatMessage(role="user", content="From now on, reply in Chinese.")]))
>>> [(i.kind, i.content, i.confidence) for i in r.items]
[('rule', 'Reply in Chinese', 0.9)]
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..models import ChatMessage, ExtractedKind
from .candidates import ExtractedItem, ExtractionResult
from .corrections import TRAILING, capitalized, match_correction

# A sentence ends at . ! ? ; (ASCII or full-width) or a line break.
_SENTENCE = re.compile(r"[^.!?;。！？；\n]+[.!?;。！？；]*")
_LEADING = re.compile(r"^(?:(?:ok(?:ay)?|so|and|also|oh|hey|well|please|pls)\b[\s,]*)+",
                      re.IGNORECASE)


@dataclass(frozen=True)
class Phrasing:
    """One explicit phrasing: a pattern with a ``rest`` group, and what it yields."""

    pattern: re.Pattern[str]
    kind: ExtractedKind
    confidence: float
    content: Callable[[str], str]


PHRASINGS: tuple[Phrasing, ...] = (
    Phrasing(re.compile(r"^from now on\b[\s,:]*(?P<rest>.+)$", re.IGNORECASE | re.DOTALL),
             "rule", 0.90, capitalized),
    Phrasing(re.compile(r"^(?:从现在开始|从现在起|从今以后|今后)[，,：:\s]*(?P<rest>.+)$",
                        re.DOTALL), "rule", 0.90, capitalized),
    Phrasing(re.compile(r"^remember(?: that)?\b[\s,:]*(?P<rest>.+)$", re.IGNORECASE | re.DOTALL),
             "fact", 0.85, capitalized),
    Phrasing(re.compile(r"^请?记住[，,：:\s]*(?P<rest>.+)$", re.DOTALL), "fact", 0.85, capitalized),
    Phrasing(re.compile(r"^以后[，,：:\s]*(?P<rest>.+)$", re.DOTALL), "rule", 0.70, capitalized),
    Phrasing(re.compile(r"^(?:i am|i'm|i’m)\s+(?P<rest>an?\s+.+)$", re.IGNORECASE | re.DOTALL),
             "fact", 0.70, lambda rest: f"The user is {rest}"),
    Phrasing(re.compile(r"^我是(?P<rest>.+)$", re.DOTALL), "fact", 0.70,
             lambda rest: f"用户是{rest}"),
)


def sentences(text: str) -> list[str]:
    """The sentences of ``text``, each with its closing punctuation, stripped."""
    return [s.strip() for s in _SENTENCE.findall(text) if s.strip()]


def match_sentence(sentence: str) -> ExtractedItem | None:
    """The item one sentence states explicitly, or ``None``."""
    if sentence.rstrip().endswith(("?", "？")):
        return None
    body = _LEADING.sub("", sentence.strip()).rstrip(TRAILING)
    correction = match_correction(body, sentence)
    if correction is not None:
        return correction
    for p in PHRASINGS:
        m = p.pattern.match(body)
        if m is None:
            continue
        rest = m.group("rest").strip().rstrip(TRAILING)
        if len(rest) < 2:
            return None
        return ExtractedItem(kind=p.kind, content=p.content(rest), confidence=p.confidence,
                             evidence=sentence)
    return None


class RuleBasedExtractor:
    """Explicit statements of the user, by fixed phrasings (see the module doc). Offline."""

    name = "rule-based"
    source = "rules"

    async def extract(self, messages: Sequence[ChatMessage]) -> ExtractionResult:
        t0 = time.perf_counter()
        items: list[ExtractedItem] = []
        for message in messages:
            if message.role != "user":
                continue  # the assistant's words are not the user's statements
            for sentence in sentences(message.content):
                item = match_sentence(sentence)
                if item is not None:
                    items.append(item)
        return ExtractionResult(items=tuple(items), extractor=self.name, source=self.source,
                                total_s=time.perf_counter() - t0)

    def __repr__(self) -> str:
        return "RuleBasedExtractor()"
