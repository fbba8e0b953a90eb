"""The argument rules of the library, as pure functions: the common ones here,
those of L1 writes in ``validation.l1``, of L2 filters and batches in ``validation.l2``.

Each raises a typed ``InvalidInput`` subclass with a message that says what is
allowed, and returns the value as it is to be used (text normalized). The rules
run at two places: the client handle (``runtime.handle``), so a bad call never
leaves the process, and the stores (``storage.base``), the authority whatever
the caller. Layers in between (engine, actors, registry) pass arguments on.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from ..errors import (
    InvalidContent,
    InvalidEmbedding,
    InvalidInput,
    InvalidMetadata,
    InvalidOwnerId,
    InvalidQuery,
    InvalidStatusKey,
)
from ..limits import DEFAULT_LIMITS, Limits
from ..models import ChatMessage, utcnow
from ..text import context_lines, normalize_content

#: An owner id: 1-128 characters, ASCII letters, digits and ``. _ : @ -``,
#: starting with a letter or digit. No braces (Redis hash tags), no spaces, no
#: slashes, so an id is safe in keys, metric labels and log lines.
OWNER_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")

#: A status key: 1-64 characters, letters, digits and ``_ . -``, starting with a letter or ``_``.
STATUS_KEY_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")

#: How deeply metadata may nest (objects and lists); deeper is refused, not recursed into.
MAX_METADATA_DEPTH = 32
#: Metadata keys the store writes itself when it merges near-duplicates.
RESERVED_METADATA_KEYS = frozenset({"merged_from", "merged_at", "merge_count"})
MAX_SEARCH_LIMIT = 1000
#: The longest chat window a conversation may keep.
MAX_WINDOW = 10_000
#: The longest a status entry may live before it expires by itself (ten years).
MAX_TTL_S = 10 * 365 * 86400
#: The longest ``source`` of a rule or fact, and name of who decides a pending item.
MAX_NAME_CHARS = 64
#: The largest list offset (beyond it every backend would answer empty anyway).
MAX_OFFSET = 2**31 - 1
#: The most messages one ``append_messages`` or ``extract`` call may carry.
MAX_MESSAGES = 1000
#: What an id of the owner id's form (:data:`OWNER_ID_PATTERN`) may be made of.
_ID_RULE = "1-128 characters of A-Z a-z 0-9 . _ : @ -, starting with a letter or digit"


def utf8_size(value: str, what: str, error: type[InvalidInput] = InvalidContent) -> int:
    """The UTF-8 size of ``value``; a typed error for a lone surrogate (not encodable)."""
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise error(
            f"{what} is not valid Unicode (a lone surrogate at position {exc.start})"
        ) from None


def _shaped(value: object, pattern: re.Pattern[str], error: type[InvalidInput], what: str,
            rule: str) -> str:
    """``value`` if it is a string of ``pattern``'s form, else ``error`` saying the
    ``rule`` a ``what`` follows."""
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise error(f"invalid {what} {value!r}: use {rule}")
    return value


def owner_id(value: object) -> str:
    """Check an owner id and return it."""
    return _shaped(value, OWNER_ID_PATTERN, InvalidOwnerId, "owner id", _ID_RULE)


def owner_ids(values: object) -> tuple[str, ...]:
    """Check a non-empty collection of owner ids (a single id is accepted too)."""
    if isinstance(values, str):
        return (owner_id(values),)
    if not isinstance(values, Iterable):
        raise InvalidOwnerId(f"owners must be an id or a list of ids, got {values!r}")
    checked = tuple(dict.fromkeys(owner_id(v) for v in values))
    if not checked:
        raise InvalidOwnerId("owners must name at least one owner")
    return checked


def content(value: object, max_bytes: int, what: str = "content") -> str:
    """Check memory text and return it normalized (outer white space stripped)."""
    if not isinstance(value, str):
        raise InvalidContent(f"{what} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise InvalidContent(f"{what} must not contain NUL characters")
    utf8_size(value, what)
    text = normalize_content(value)
    if not text:
        raise InvalidContent(f"{what} must not be empty or white space only")
    size = utf8_size(text, what)
    if size > max_bytes:
        raise InvalidContent(f"{what} is {size} bytes; the limit is {max_bytes} bytes")
    return text


def context(value: object, max_bytes: int, what: str = "context") -> str | None:
    """Check a memory's context (``None``: none): the rules of :func:`content`, with its
    lines kept apart: each is a part of the context (a date, a turn), normalized, the
    empty ones dropped (``text.context_lines``)."""
    if value is None:
        return None
    content(value, max_bytes, what)
    return "\n".join(context_lines(str(value)))


def status_key(value: object) -> str:
    """Check a status key and return it."""
    return _shaped(value, STATUS_KEY_PATTERN, InvalidStatusKey, "status key",
                   "1-64 characters of A-Z a-z 0-9 _ . -, starting with a letter or _")


def metadata(value: object, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """Check metadata: a JSON object with string keys, within ``limits`` (keys, serialized
    bytes) and ``MAX_METADATA_DEPTH`` levels deep."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidMetadata(f"metadata must be a mapping, got {type(value).__name__}")
    if len(value) > limits.metadata_keys:
        raise InvalidMetadata(
            f"metadata has {len(value)} keys; the limit is {limits.metadata_keys}")
    reserved = RESERVED_METADATA_KEYS.intersection(k for k in value if isinstance(k, str))
    if reserved:
        raise InvalidMetadata(f"metadata keys {sorted(reserved)} are reserved for merge records")
    _depth(value)
    try:
        encoded = json.dumps(dict(value), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidMetadata(f"metadata must be JSON-serializable without NaN: {exc}") from None
    if "\\u0000" in encoded:
        raise InvalidMetadata("metadata must not contain NUL characters")
    size = utf8_size(encoded, "metadata", InvalidMetadata)
    if size > limits.metadata_bytes:
        raise InvalidMetadata(f"metadata is {size} bytes serialized; the limit is "
                              f"{limits.metadata_bytes} bytes")
    result: dict[str, Any] = json.loads(encoded)
    return result


def stored_metadata(value: object, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """Check a stored memory's metadata, as an export carries it: what ``metadata``
    accepts, plus the merge records a merge wrote (``merged_from``: earlier contents,
    within ``limits.merge_history`` items and ``limits.merge_history_bytes``;
    ``merged_at``: an ISO 8601 time with its offset; ``merge_count``: a count >= 1)."""
    if not isinstance(value, Mapping):
        return metadata(value, limits)
    own = metadata({k: v for k, v in value.items() if k not in RESERVED_METADATA_KEYS},
                   limits)
    records = {k: value[k] for k in RESERVED_METADATA_KEYS if k in value}
    history = records.get("merged_from", [])
    if (not isinstance(history, list) or not all(isinstance(h, str) for h in history)
            or len(history) > limits.merge_history
            or sum(len(h.encode("utf-8")) for h in history) > limits.merge_history_bytes):
        raise InvalidMetadata("merged_from must be a list of earlier contents within the "
                              "merge history limits")
    at = records.get("merged_at")
    if at is not None:
        try:
            parsed = datetime.fromisoformat(at) if isinstance(at, str) else None
        except ValueError:
            parsed = None
        if parsed is None or parsed.tzinfo is None:
            raise InvalidMetadata(f"merged_at must be an ISO 8601 time with its offset, "
                                  f"got {at!r}")
    count = records.get("merge_count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                              or count < 1):
        raise InvalidMetadata(f"merge_count must be a whole number >= 1, got {count!r}")
    return {**own, **records}


def _depth(value: object) -> None:
    """Refuse containers nested deeper than ``MAX_METADATA_DEPTH`` (walked without recursion)."""
    todo: list[tuple[object, int]] = [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, Mapping):
            children: Iterable[object] = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if level > MAX_METADATA_DEPTH:
            raise InvalidMetadata(f"metadata nests deeper than {MAX_METADATA_DEPTH} levels")
        todo.extend((c, level + 1) for c in children)


def embedding(value: object, dim: int) -> list[float]:
    """Check an embedding: ``dim`` finite numbers, not all zero."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidEmbedding(f"embedding must be a sequence of numbers: {exc}") from exc
    if arr.ndim != 1 or arr.shape[0] != dim:
        raise InvalidEmbedding(f"embedding must have {dim} dimensions, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise InvalidEmbedding("embedding contains NaN or infinite values")
    if not np.any(arr):
        raise InvalidEmbedding("embedding is all zeros; cosine similarity is undefined")
    return arr.tolist()  # type: ignore[no-any-return]


def limit(value: object) -> int:
    """Check a result count: an int in 1..1000."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SEARCH_LIMIT:
        raise InvalidQuery(f"limit must be an integer in 1..{MAX_SEARCH_LIMIT}, got {value!r}")
    return value


def unit_interval(value: object, what: str) -> float:
    """Check a number in [0, 1] (a confidence or a threshold)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidQuery(f"{what} must be a number in [0, 1], got {value!r}")
    f = float(value)
    if not math.isfinite(f) or not 0.0 <= f <= 1.0:
        raise InvalidQuery(f"{what} must be a number in [0, 1], got {value!r}")
    return f


def ids(values: Sequence[object], what: str = "id") -> tuple[str, ...]:
    """Check a list of item ids (non-empty strings without NUL, at most 128 chars)."""
    out = []
    for v in values:
        if not isinstance(v, str) or not v or len(v) > 128 or "\x00" in v:
            raise InvalidQuery(f"invalid {what} {v!r}")
        utf8_size(v, what, InvalidQuery)
        out.append(v)
    return tuple(out)


def op_id(value: object) -> str:
    """Check an operation id (what makes a retried write apply once)."""
    return ids([value], "operation id")[0]


def conversation_id(value: object) -> str:
    """Check a conversation id: the owner id alphabet, safe in keys, lock names and logs."""
    return _shaped(value, OWNER_ID_PATTERN, InvalidQuery, "conversation id", _ID_RULE)


def _short_name(value: object) -> bool:
    return (isinstance(value, str) and 0 < len(value) <= MAX_NAME_CHARS and "\x00" not in value
            and value.isprintable())


def source(value: object) -> str:
    """Check where a rule or fact comes from (``user``, ``extracted:...``)."""
    if not _short_name(value):
        raise InvalidQuery(f"source must be a short non-empty string, got {value!r}")
    assert isinstance(value, str)
    return value


def decider(value: object) -> str:
    """Check who decides on a pending item (recorded in the audit trail as ``by``)."""
    if not _short_name(value):
        raise InvalidQuery(f"by must name who decides (1-64 characters), got {value!r}")
    assert isinstance(value, str)
    return value


def _int_at_least(value: object, low: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidQuery(f"{what} must be an integer >= {low}, got {value!r}")
    return value


def offset(value: object) -> int:
    """Check a list offset: an int in 0..``MAX_OFFSET``."""
    n = _int_at_least(value, 0, "offset")
    if n > MAX_OFFSET:
        raise InvalidQuery(f"offset must be at most {MAX_OFFSET}, got {n}")
    return n


def min_version(value: object) -> int | None:
    """Check the snapshot version a read waits for (``None``: do not wait)."""
    return None if value is None else _int_at_least(value, 0, "min_version")


def min_epoch(value: object, version: object) -> str | None:
    """Check the epoch a ``min_version`` counts in (a snapshot's ``epoch``), or ``None``."""
    if value is None:
        return None
    if version is None or not isinstance(value, str) or not 0 < len(value) <= 64:
        raise InvalidQuery(f"min_epoch must be a snapshot's epoch, with min_version, "
                           f"got {value!r}")
    return value


def window(value: object) -> int:
    """Check a chat window size: an int in 1..10000."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WINDOW:
        raise InvalidQuery(f"window must be an integer in 1..{MAX_WINDOW}, got {value!r}")
    return value


def timeout(value: object, high: float = 3600.0) -> float:
    """Check a number of seconds to wait: in (0, ``high``]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= high:
        raise InvalidQuery(
            f"timeout_s must be a number of seconds in (0, {high:g}], got {value!r}")
    return float(value)


def messages(values: object, *, max_count: int | None = None, empty_ok: bool = True
             ) -> list[ChatMessage]:
    """Check a list of chat messages (their types; see :func:`message` for the content)."""
    if isinstance(values, (str, bytes, ChatMessage, Mapping)) or not isinstance(values, Iterable):
        raise InvalidQuery("messages must be a list of ChatMessage")
    out = list(values)
    if not out and not empty_ok:
        raise InvalidQuery("messages must not be empty")
    if max_count is not None and len(out) > max_count:
        raise InvalidQuery(f"at most {max_count} messages per call, got {len(out)}")
    for m in out:
        if not isinstance(m, ChatMessage):
            raise InvalidQuery(f"expected a ChatMessage, got {type(m).__name__}")
    return out


def message(value: ChatMessage, max_bytes: int) -> ChatMessage:
    """A chat message with its content checked and normalized."""
    text = content(value.content, max_bytes, "message content")
    return value if text == value.content else value.model_copy(update={"content": text})


def ttl_s(value: object) -> float | None:
    """Check the lifetime of a status entry: ``None`` or a positive number of seconds."""
    if value is not None and not (
        isinstance(value, (int, float)) and not isinstance(value, bool)
        and 0 < value < MAX_TTL_S
    ):
        raise InvalidQuery(f"ttl_s must be a positive number of seconds, got {value!r}")
    return value


def past(value: object) -> datetime:
    """A timezone-aware datetime (an ``as_of``), no later than now."""
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidQuery(f"as_of must be a timezone-aware datetime, got {value!r}")
    return min(value, utcnow())
