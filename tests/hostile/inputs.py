"""Generated hostile input for every door, and the tally of what each door answered.

Text is drawn from NUL, lone surrogates, white space, zero-width and multi-byte
characters, and sizes at and one past each limit; values of odd types and deeply
nested metadata stand beside it. ``Tally`` counts the inputs a door was given and
its answers (``ok`` or the error's class name), printed at the end of the run.
"""

from __future__ import annotations

import json
import string
from collections import Counter, defaultdict
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from dream_memory_actor import errors
from dream_memory_actor.limits import DEFAULT_LIMITS
from dream_memory_actor.validation import MAX_METADATA_DEPTH

#: The limits of the doors under test: small status and merge caps, so generated
#: sequences reach them; the others at their defaults.
CONTENT_BYTES = 32 * 1024
LIMITS = {"max_status_keys": 6, "max_merge_history": 3, "max_merge_history_bytes": 4096}
STATUS_KEYS = LIMITS["max_status_keys"]

#: Hypothesis settings of every door: no deadline (Ray calls vary), no example
#: database (nothing written to the checkout), fixtures reused across examples.
def door_settings(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])

SPECIAL = ["", " ", "\t\n ", "\x00", "a\x00b", "\ud800", "x\udcffy", "\udfff\ud800",
           "\u200b", "\ufeff", "é", "🙂", "\u0301", "\r\n", "a" * 129]

_chars = st.one_of(st.characters(exclude_categories=()),
                   st.sampled_from(["\x00", "\ud800", "\udcff", " ", "\u200b", "é", "🙂"]))


def _sized(n: int) -> st.SearchStrategy[str]:
    """Text of ``n`` and ``n + 1`` UTF-8 bytes (ASCII, or two-byte characters)."""
    return st.sampled_from(["x" * n, "x" * (n + 1), "é" * (n // 2), "é" * (n // 2 + 1),
                            "x" * (n - 1) + "\x00"])


def mostly(usual: st.SearchStrategy[Any], other: st.SearchStrategy[Any], tenths: int = 6
           ) -> st.SearchStrategy[Any]:
    """``usual`` about ``tenths``/10 of the time, else ``other`` (so most calls get past the
    first argument and reach the later checks)."""
    return st.integers(0, 9).flatmap(lambda i: usual if i < tenths else other)


def plain() -> st.SearchStrategy[str]:
    return st.text(string.ascii_letters + " ", min_size=1, max_size=30).filter(str.strip)


def text() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(SPECIAL), st.text(_chars, max_size=40),
                     st.text(string.ascii_letters + " ", min_size=1, max_size=30),
                     _sized(CONTENT_BYTES), _sized(DEFAULT_LIMITS.pending_field_bytes))


def odd() -> st.SearchStrategy[Any]:
    """Values of the wrong type for a text or number argument."""
    return st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                     st.floats(allow_nan=True), st.binary(max_size=4),
                     st.lists(st.integers(), max_size=2),
                     st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def text_or_odd() -> st.SearchStrategy[Any]:
    """Usually plain text, else hostile text or a value of another type."""
    return mostly(plain(), st.one_of(text(), text(), odd()))


def owner() -> st.SearchStrategy[Any]:
    """Mostly the door's owner, else a hostile one."""
    return mostly(st.just("alice"), text_or_odd(), 8)


def number() -> st.SearchStrategy[Any]:
    return mostly(st.integers(0, 20), st.one_of(
        st.integers(-3, 1002), st.sampled_from([1000, 1001, 2**31, 2**63, 2**64, -2**63]),
        odd()))


class _Deep(dict[str, Any]):
    """Nested metadata that prints as its depth (a failing example stays readable)."""

    def __init__(self, depth: int) -> None:
        value: Any = "leaf"
        for _ in range(depth):
            value = {"d": value}
        super().__init__(k=value)
        self.depth = depth

    def __repr__(self) -> str:
        return f"<metadata {self.depth} levels deep>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


def _deep(n: int) -> dict[str, Any]:
    return _Deep(n)


def _edge_metadata() -> list[Any]:
    keys = DEFAULT_LIMITS.metadata_keys
    size = DEFAULT_LIMITS.metadata_bytes
    return [
        {f"k{i}": i for i in range(keys)}, {f"k{i}": i for i in range(keys + 1)},
        {"k": "x" * (size - 10)}, {"k": "x" * (size - 9)}, {"k": "x" * size},
        _deep(MAX_METADATA_DEPTH - 2), _deep(MAX_METADATA_DEPTH), _deep(2000),
        {"merged_from": []}, {"k": float("nan")}, {"k": object()}, {1: "int key"},
        {"k": b"bytes"}, {"k": "\x00"}, {"\ud800": 1}, {"k": "\udcff"}, [("k", 1)], "k=v",
    ]


#: Metadata at and over each limit, and of each wrong shape.
EDGE_METADATA = _edge_metadata()
#: Text at and over each limit, with NUL and lone surrogates.
EDGE_TEXT = [*SPECIAL, *(t for n in (CONTENT_BYTES, DEFAULT_LIMITS.pending_field_bytes)
                         for t in ["x" * n, "x" * (n + 1), "é" * (n // 2),
                                   "é" * (n // 2 + 1), "x" * (n - 1) + "\x00"])]


def metadata() -> st.SearchStrategy[Any]:
    usual = st.dictionaries(plain(), plain(), max_size=3)
    return mostly(usual, st.one_of(
        st.none(),
        st.dictionaries(text(), st.one_of(text(), st.integers(), st.floats(), st.none()),
                        max_size=4),
        st.sampled_from(EDGE_METADATA), st.sampled_from(EDGE_METADATA), odd(),
    ), 5)


def status_key() -> st.SearchStrategy[Any]:
    return mostly(st.sampled_from([f"k{i}" for i in range(STATUS_KEYS + 3)]), st.one_of(
        st.sampled_from(["_x", "a.b-c", "x" * 64, "x" * 65, "9a", "a b"]), text_or_odd()))


def settled(snap: Any) -> Any:
    """``snap`` as it stands a minute on: a status or pending item with a short TTL (``ttl``
    gives some of a second) can lapse between the reads before and after a call, so
    the doors' state comparisons leave those out of both."""
    from datetime import timedelta

    from dream_memory_actor.models import utcnow

    return snap.live(utcnow() + timedelta(minutes=1))


def ttl() -> st.SearchStrategy[Any]:
    return mostly(st.none(), st.one_of(
        st.floats(-1, 1e12), st.sampled_from([float("nan"), float("inf"), 0, 1, 3600]),
        st.integers(-1, 10), odd()))


class Tally:
    """Inputs tried and answers per door."""

    def __init__(self) -> None:
        self.doors: defaultdict[str, Counter[str]] = defaultdict(Counter)

    def add(self, door: str, outcome: str) -> None:
        self.doors[door][outcome] += 1

    def report(self) -> list[str]:
        lines = []
        for door, counts in sorted(self.doors.items()):
            lines.append(f"{door}: {sum(counts.values())} inputs; "
                         + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
        return lines

    def dump(self) -> str:
        return json.dumps({d: dict(c) for d, c in self.doors.items()}, sort_keys=True)


TALLY = Tally()


def outcome(exc: BaseException | None) -> str:
    """``ok``, or the name of a DreamMemoryError subclass; anything else fails the test."""
    if exc is None:
        return "ok"
    assert isinstance(exc, errors.DreamMemoryError), f"untyped error {type(exc).__name__}: {exc}"
    return type(exc).__name__


class LoopThread:
    """An event loop in a thread of its own, for driving async doors from sync tests
    (hypothesis calls the test body once per example)."""

    def __init__(self) -> None:
        import asyncio
        import threading

        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Any, timeout: float = 120.0) -> Any:
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
