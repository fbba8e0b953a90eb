"""Where an owner lives: actor names, the stable shard hash, and the live set.

Pure functions and one small class, no Ray: the registry (``dedicated``) and the
shard hosts (``sharded``) keep their live owners in a :class:`LiveSet`, which
knows the least recently used and the idle ones, and never holds more than its cap.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from ..errors import ConfigurationError

#: The Ray namespace every actor of every memory system lives in.
NAMESPACE = "dream_memory"

#: A system name: short, and safe inside actor names.
SYSTEM_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,47}")

V = TypeVar("V")


def system_name(value: object) -> str:
    """Check a memory system's name and return it."""
    if not isinstance(value, str) or not SYSTEM_NAME_PATTERN.fullmatch(value):
        raise ConfigurationError(
            f"invalid memory system name {value!r}: use 1-48 characters of A-Z a-z 0-9 _ -, "
            "starting with a letter or digit"
        )
    return value


# Actor names start with "_": the actors are private, agents use handles.
def registry_name(system: str) -> str:
    return f"_registry.{system}"


def index_name(system: str, replica: int) -> str:
    return f"_index.{system}.{replica}"


def proposer_name(system: str) -> str:
    return f"_proposer.{system}"


def host_name(system: str, shard: int) -> str:
    return f"_shard.{system}.{shard}"


def owner_name(system: str, owner: str) -> str:
    return f"_owner.{system}.{owner}"


# A snapshot read names its task after what it asks: Ray carries a task's name in the
# task itself, while each argument of a call costs it a serialization both ways (bench
# actor-overhead: a no-op with one argument ran at ~0.85x the rate of one without, a
# no-op reading its question from its task name at ~1.0x). Owner ids and tokens hold
# no spaces, so the fields split unambiguously; the dashboard shows whose read it was.
ReadQuestion = tuple[str, int | None, str | None, int | None]


def read_task_name(owner: str, min_version: int | None, token: str | None,
                   version: int | None) -> str:
    """The task name of a snapshot read: ``read <owner> <min_version> <token> <version>``
    (``-`` for none): read ``owner``, at least ``min_version``; the caller holds
    version ``version`` of lineage ``token``."""
    return " ".join(("read", owner, _field(min_version), _field(token), _field(version)))


def parse_read_task_name(name: str | None) -> ReadQuestion | None:
    """The question of :func:`read_task_name`, or ``None`` if ``name`` is not one."""
    parts = (name or "").split(" ")
    if len(parts) != 5 or parts[0] != "read" or not parts[1]:
        return None
    try:
        min_version = None if parts[2] == "-" else int(parts[2])
        version = None if parts[4] == "-" else int(parts[4])
    except ValueError:
        return None
    return parts[1], min_version, None if parts[3] == "-" else parts[3], version


def _field(value: str | int | None) -> str:
    return "-" if value is None else str(value)


def stable_hash(key: str) -> int:
    """A hash of ``key`` that is the same in every process (``hash()`` is salted)."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big")


def shard_of(owner: str, shards: int) -> int:
    """The shard hosting ``owner`` among ``shards``."""
    return stable_hash(owner) % shards


class LiveSet(Generic[V]):
    """Live owners in least-recently-used order, with their last use time.

    Thread-safe: a shard host records the uses of its snapshot reads from Ray's
    call threads while its event loop admits and passivates owners.

    >>> live: LiveSet[str] = LiveSet(cap=2, idle_timeout_s=60)
    >>> live.add("a", "actor-a"); live.add("b", "actor-b"); live.touch("a")
    >>> next(live.lru()), live.full
    ('b', True)
    """

    def __init__(self, cap: int, idle_timeout_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if cap < 1:
            raise ConfigurationError(f"the live owner cap must be at least 1, got {cap}")
        self.cap = cap
        self.idle_timeout_s = idle_timeout_s
        self._clock = clock
        self._items: OrderedDict[str, V] = OrderedDict()
        self._last: dict[str, float] = {}
        self._guard = threading.Lock()
        #: The most owners ever live at once (tests and benchmarks check it against the cap).
        self.high_water = 0
        #: Owners passivated so far, for the cap or for idleness.
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, owner: object) -> bool:
        return owner in self._items

    @property
    def full(self) -> bool:
        return len(self._items) >= self.cap

    def get(self, owner: str) -> V | None:
        return self._items.get(owner)

    def touch(self, owner: str) -> None:
        """Record a use of ``owner`` (unknown owners are ignored)."""
        with self._guard:
            if owner in self._items:
                self._items.move_to_end(owner)
                self._last[owner] = self._clock()

    def add(self, owner: str, value: V) -> None:
        """Make ``owner`` live; the caller has made room (``full`` is false)."""
        with self._guard:
            if owner not in self._items and self.full:
                raise RuntimeError(f"live set is full ({self.cap}); passivate an owner first")
            self._items[owner] = value
            self._items.move_to_end(owner)
            self._last[owner] = self._clock()
            self.high_water = max(self.high_water, len(self._items))

    def pop(self, owner: str) -> V | None:
        """Forget ``owner`` (passivated); its value, or ``None`` if it was not live."""
        with self._guard:
            self._last.pop(owner, None)
            value = self._items.pop(owner, None)
            if value is not None:
                self.evicted += 1
            return value

    def lru(self) -> Iterator[str]:
        """Live owners, least recently used first."""
        with self._guard:
            return iter(list(self._items))

    def idle(self) -> list[str]:
        """Owners unused for at least ``idle_timeout_s``."""
        cutoff = self._clock() - self.idle_timeout_s
        with self._guard:
            return [o for o in self._items if self._last.get(o, 0.0) <= cutoff]

    def items(self) -> list[tuple[str, V]]:
        with self._guard:
            return list(self._items.items())
