"""Argument checks run before anything is written or sent: pure functions.

Each raises a typed ``InvalidInput`` subclass with a message that says what is
allowed.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .errors import (
    InvalidContent,
    InvalidEmbedding,
    InvalidMetadata,
    InvalidOwnerId,
    InvalidQuery,
    InvalidStatusKey,
)
from .text import normalize_content

#: An owner id: 1-128 characters, ASCII letters, digits and ``. _ : @ -``,
#: starting with a letter or digit. No braces (Redis hash tags), no spaces, no
#: slashes, so an id is safe in keys, metric labels and log lines.
OWNER_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")

#: A status key: 1-64 characters, letters, digits and ``_ . -``, starting with a letter or ``_``.
STATUS_KEY_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")

MAX_METADATA_BYTES = 16 * 1024
#: Metadata keys the store writes itself when it merges near-duplicates.
RESERVED_METADATA_KEYS = frozenset({"merged_from", "merged_at", "merge_count"})
MAX_SEARCH_LIMIT = 1000


def owner_id(value: object) -> str:
    """Check an owner id and return it."""
    if not isinstance(value, str) or not OWNER_ID_PATTERN.fullmatch(value):
        raise InvalidOwnerId(
            f"invalid owner id {value!r}: use 1-128 characters of A-Z a-z 0-9 . _ : @ -, "
            "starting with a letter or digit"
        )
    return value


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
    text = normalize_content(value)
    if not text:
        raise InvalidContent(f"{what} must not be empty or white space only")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidContent(
            f"{what} is not valid Unicode (a lone surrogate at position {exc.start})"
        ) from None
    if size > max_bytes:
        raise InvalidContent(f"{what} is {size} bytes; the limit is {max_bytes} bytes")
    return text


def status_key(value: object) -> str:
    """Check a status key and return it."""
    if not isinstance(value, str) or not STATUS_KEY_PATTERN.fullmatch(value):
        raise InvalidStatusKey(
            f"invalid status key {value!r}: use 1-64 characters of A-Z a-z 0-9 _ . -, "
            "starting with a letter or _"
        )
    return value


def metadata(value: object) -> dict[str, Any]:
    """Check metadata: a JSON object with string keys, at most 16 KiB serialized."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidMetadata(f"metadata must be a mapping, got {type(value).__name__}")
    reserved = RESERVED_METADATA_KEYS.intersection(value)
    if reserved:
        raise InvalidMetadata(f"metadata keys {sorted(reserved)} are reserved for merge records")
    try:
        encoded = json.dumps(dict(value), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidMetadata(f"metadata must be JSON-serializable without NaN: {exc}") from exc
    if "\\u0000" in encoded:
        raise InvalidMetadata("metadata must not contain NUL characters")
    if len(encoded.encode("utf-8")) > MAX_METADATA_BYTES:
        raise InvalidMetadata(f"metadata is larger than {MAX_METADATA_BYTES} bytes serialized")
    result: dict[str, Any] = json.loads(encoded)
    return result


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
        out.append(v)
    return tuple(out)
