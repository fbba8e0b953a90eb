"""The argument rules of L2 updates, supersessions, batches and metadata filters.

Pure functions like those of :mod:`~dream_memory_actor.validation`: each raises a
typed ``InvalidInput`` subclass and returns the value as it is to be used.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InvalidBatch, InvalidFilter, InvalidQuery
from ..limits import DEFAULT_LIMITS, Limits
from . import content, context, metadata, utf8_size

#: The most keys a metadata filter may test (each is one containment condition).
MAX_FILTER_KEYS = 16
#: The longest key a metadata filter may name, and the longest text it may compare with.
MAX_FILTER_KEY_CHARS = 128
MAX_FILTER_VALUE_BYTES = 1024
#: The longest ``reason`` of a supersession, in UTF-8 bytes.
MAX_REASON_BYTES = 1024


def metadata_filter(value: object) -> dict[str, Any] | None:
    """Check a metadata filter: ``None`` (no filter) or a mapping of at most
    ``MAX_FILTER_KEYS`` string keys to scalars (text, number, bool, ``None``), each
    matched by equality (``{"agent": "deploy"}`` keeps the memories whose metadata has
    ``agent`` equal to ``"deploy"``). An empty mapping filters nothing."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidFilter(
            f"filter must be a mapping of keys to values, got {type(value).__name__}"
        )
    if len(value) > MAX_FILTER_KEYS:
        raise InvalidFilter(f"filter has {len(value)} keys; the limit is {MAX_FILTER_KEYS}")
    out: dict[str, Any] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not k or len(k) > MAX_FILTER_KEY_CHARS or "\x00" in k:
            raise InvalidFilter(
                f"filter keys must be strings of 1-{MAX_FILTER_KEY_CHARS} "
                f"characters without NUL, got {k!r}"
            )
        utf8_size(k, "filter key", InvalidFilter)
        if isinstance(v, str):
            if "\x00" in v:
                raise InvalidFilter(f"filter value of {k!r} must not contain NUL characters")
            if utf8_size(v, "filter value", InvalidFilter) > MAX_FILTER_VALUE_BYTES:
                raise InvalidFilter(
                    f"filter value of {k!r} is longer than {MAX_FILTER_VALUE_BYTES} bytes"
                )
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise InvalidFilter(f"filter value of {k!r} must be finite, got {v!r}")
        elif v is not None and not isinstance(v, (bool, int)):
            raise InvalidFilter(
                f"filter value of {k!r} must be text, a number, a bool or "
                f"None (equality only), got {type(v).__name__}"
            )
        out[k] = v
    return out or None


def reason(value: object) -> str | None:
    """Check why an item is superseded: ``None`` or text of at most ``MAX_REASON_BYTES``."""
    if value is None:
        return None
    if not isinstance(value, str) or "\x00" in value:
        raise InvalidQuery(f"reason must be text without NUL characters, got {value!r}")
    text = value.strip()
    if utf8_size(text, "reason", InvalidQuery) > MAX_REASON_BYTES:
        raise InvalidQuery(f"reason is longer than {MAX_REASON_BYTES} bytes")
    return text or None


def batch(
    values: object, max_bytes: int, limits: Limits = DEFAULT_LIMITS
) -> list[tuple[str, dict[str, Any], str | None]]:
    """Check a batch for ``store_many``: a non-empty list of at most ``limits.batch_items``
    items, each a content string or a mapping ``{"content": ..., "metadata": ...,
    "context": ...}``, their content and context at most ``limits.batch_bytes`` in all.
    ``(content, metadata, context)``, checked and normalized, in order."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise InvalidBatch(
            "store_many needs a list of items (texts or {'content': ..., 'metadata': ...} mappings)"
        )
    items = list(values)
    if not items:
        raise InvalidBatch("store_many needs at least one item")
    if len(items) > limits.batch_items:
        raise InvalidBatch(f"a batch has {len(items)} items; the limit is {limits.batch_items}")
    out: list[tuple[str, dict[str, Any], str | None]] = []
    total = 0
    for i, item in enumerate(items):
        meta: object = None
        ctx: object = None
        if isinstance(item, Mapping):
            extra = set(item) - {"content", "metadata", "context"}
            if "content" not in item or extra:
                raise InvalidBatch(
                    f"batch item {i} must have 'content' and may have "
                    f"'metadata' and 'context', nothing else (got {sorted(map(str, item))})"
                )
            text_value, meta, ctx = item["content"], item.get("metadata"), item.get("context")
        else:
            text_value = item
        text = content(text_value, max_bytes, what=f"batch item {i} content")
        around = context(ctx, max_bytes, what=f"batch item {i} context")
        total += len(text.encode("utf-8")) + len((around or "").encode("utf-8"))
        if total > limits.batch_bytes:
            raise InvalidBatch(f"a batch's content is more than {limits.batch_bytes} bytes")
        out.append((text, metadata(meta, limits), around))
    return out
