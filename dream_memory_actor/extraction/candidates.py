"""What an extractor returns, and the strict parser of an LLM's reply.

An extractor reads messages and returns an :class:`ExtractionResult`: a list
of :class:`ExtractedItem` (kind, content or key/value, confidence, evidence)
with the tokens and cost it took. The LLM's reply must be one JSON object::

    {"items": [{"kind": "rule", "content": "Reply in Chinese",
                "confidence": 0.93, "evidence": "from now on answer in Chinese",
                "supersedes": "Reply in English"}]}

(``supersedes`` is optional: what the rule or fact corrects, see ``corrections``.)

:func:`parse_reply` accepts exactly that (a Markdown code fence around it is
tolerated) and raises :class:`~dream_memory_actor.errors.MalformedExtraction`
for anything else. One bad item rejects the whole reply: a model that got one
item wrong is not trusted with the others, and nothing of it is written.
Unknown keys are ignored, an ``owner`` key included: whose memory it is comes
from the caller, never from the reply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, model_validator

from .. import validation as check
from ..errors import InvalidInput, MalformedExtraction
from ..models import ChatMessage, ExtractedKind

#: At most this many items in one reply.
MAX_ITEMS = 100
#: The evidence is a quote, not a document.
MAX_EVIDENCE_CHARS = 2000
#: A reply longer than this is refused before it is parsed.
MAX_REPLY_CHARS = 1_000_000

_FENCE = re.compile(r"^```[A-Za-z]*\s*\n(?P<body>.*)\n\s*```$", re.DOTALL)


class ExtractedItem(BaseModel):
    """One candidate memory: a ``rule``, a ``fact``, a ``status`` (``key``/``value``)
    or a semantic ``memory``, with the extractor's confidence and its evidence.

    >>> ExtractedItem(kind="status", key="mood", value="tired", confidence=0.6,
    ...               evidence="I'm so tired today").text
    'tired'
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    kind: ExtractedKind
    content: StrictStr | None = None
    key: StrictStr | None = None
    value: StrictStr | None = None
    confidence: float = Field(ge=0.0, le=1.0, allow_inf_nan=False, strict=True)
    evidence: StrictStr = Field(min_length=1, max_length=MAX_EVIDENCE_CHARS)
    #: What a rule or fact replaces: the id or the words of an existing item (see
    #: ``corrections``); ignored for status and memory items.
    supersedes: StrictStr | None = Field(None, max_length=MAX_EVIDENCE_CHARS)

    @model_validator(mode="after")
    def _shape(self) -> ExtractedItem:
        if self.supersedes is not None and (self.kind not in ("rule", "fact")
                                            or not self.supersedes.strip()):
            object.__setattr__(self, "supersedes", None)
        if self.kind == "status":
            if self.key is None or not check.STATUS_KEY_PATTERN.fullmatch(self.key):
                raise ValueError(
                    f"a status item needs a key of A-Z a-z 0-9 _ . -, got {self.key!r}")
            if not (self.value or "").strip():
                raise ValueError("a status item needs a non-empty value")
        elif not (self.content or "").strip():
            raise ValueError(f"a {self.kind} item needs a non-empty content")
        if not self.evidence.strip():
            raise ValueError("evidence must not be blank")
        return self

    @property
    def text(self) -> str:
        """What would be written: the content, or the value of a status item."""
        return (self.value if self.kind == "status" else self.content) or ""

    def describe(self) -> str:
        what = f"{self.key}={self.value}" if self.kind == "status" else self.content
        return f"[{self.kind}] {what} (confidence {self.confidence:.2f})"


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore")

    items: list[ExtractedItem] = Field(max_length=MAX_ITEMS)


class Usage(BaseModel):
    """Tokens and cost of one extraction as the provider (through litellm) reported them.

    ``cost_usd`` is ``None`` when litellm does not know the model's price.
    """

    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None


class ExtractionResult(BaseModel):
    """The items an extractor found in some messages, and what it took to find them."""

    model_config = ConfigDict(frozen=True)

    items: tuple[ExtractedItem, ...]
    #: Which extractor ran, e.g. ``"rule-based"`` or ``"llm:openai/gpt-4o-mini"``.
    extractor: str
    #: ``"llm"`` or ``"rules"``: recorded as the source of what gets written.
    source: str
    usage: Usage = Field(default_factory=Usage)
    #: Seconds inside the model call, and in the whole extraction (prompt, call, parse).
    llm_s: float = 0.0
    total_s: float = 0.0


@runtime_checkable
class Extractor(Protocol):
    """Reads messages, returns candidate memories. It is never told whose messages they are."""

    name: str
    source: str

    async def extract(self, messages: Sequence[ChatMessage]) -> ExtractionResult: ...


def reply_body(text: object, error: type[Exception], what: str) -> str:
    """The JSON text of a model's reply (a code fence around it taken off), or ``error``
    for an empty or overlong one; ``what`` names the reply in the message."""
    if not isinstance(text, str) or not text.strip():
        raise error(f"{what} is empty")
    if len(text) > MAX_REPLY_CHARS:
        raise error(f"{what} is longer than {MAX_REPLY_CHARS} chars")
    body = text.strip()
    fenced = _FENCE.match(body)
    return fenced.group("body") if fenced else body


def parse_reply(text: object, *, max_content_bytes: int = 32 * 1024) -> tuple[ExtractedItem, ...]:
    """The items of an LLM reply, or ``MalformedExtraction`` (the message never quotes the
    reply: it holds conversation text)."""
    body = reply_body(text, MalformedExtraction, "the extractor's reply")
    try:
        data: Any = json.loads(body, parse_constant=_no_constant)
    except ValueError as exc:
        raise MalformedExtraction(f"the extractor's reply is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise MalformedExtraction(
            f"the extractor's reply must be a JSON object, got {type(data).__name__}")
    try:
        reply = _Reply.model_validate(data)
    except ValidationError as exc:
        raise MalformedExtraction(f"the extractor's reply does not fit: {_errors(exc)}") from None
    return check_items(reply.items, max_content_bytes)


def check_items(items: Sequence[ExtractedItem], max_content_bytes: int
                ) -> tuple[ExtractedItem, ...]:
    """``items`` with their text normalized, or ``MalformedExtraction`` if one cannot be stored."""
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, ExtractedItem):
            raise MalformedExtraction(f"item {i} is a {type(item).__name__}, not an ExtractedItem")
        try:
            if item.kind == "status":
                update = {"value": check.content(item.value, max_content_bytes, "status value")}
            else:
                update = {"content": check.content(item.content, max_content_bytes)}
        except InvalidInput as exc:
            raise MalformedExtraction(f"item {i} cannot be stored: {exc}") from None
        out.append(item.model_copy(update=update))
    return tuple(out)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _errors(exc: ValidationError) -> str:
    parts = [f"{'.'.join(str(p) for p in e['loc']) or '(reply)'}: {e['msg']}"
             for e in exc.errors(include_input=False, include_url=False)[:5]]
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
