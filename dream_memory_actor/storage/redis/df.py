"""Document frequencies of an owner's memories on Redis: how many memories have each term.

One hash per owner, ``p:{o}:l2:df``, under the owner's hash tag so every write of the
owner moves it in the same MULTI/EXEC as the memory itself::

    n         how many memories the hash counts; its presence says the hash is complete
    t:<term>  how many of them have ``term`` among their ``text.terms`` (absent: 0)

Terms are prefixed so that no term can be read as a field of the search index's
schema (``owner``, ``folded``, ``vec``). A term whose count drops to 0 is removed.
Memories written before the hash existed are counted when the owner is next
written (``queue_rebuild``); until then a search counts them from the rows it reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

#: The field holding the number of memories counted.
DOCS = "n"

# KEYS[1]: the df hash. ARGV: field, delta, field, delta, ... (run inside MULTI/EXEC;
# EVAL, not EVALSHA, so an unknown script cannot fail the transaction half-way).
_APPLY_DELTA = """
for i = 1, #ARGV, 2 do
  if redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) <= 0 then
    redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return 1
"""


def field(term: str) -> str:
    return "t:" + term


def queue_delta(pipe: Any, key: str, delta: Mapping[str, int], docs_delta: int) -> None:
    """Queue a write's change (``dedup.df_delta``) on a complete hash."""
    if delta:
        args: list[Any] = []
        for t, d in delta.items():
            args += [field(t), d]
        pipe.eval(_APPLY_DELTA, 1, key, *args)
    if docs_delta:
        pipe.hincrby(key, DOCS, docs_delta)


def queue_rebuild(pipe: Any, key: str, counts: Mapping[str, int], docs: int) -> None:
    """Queue the whole hash: ``counts`` of ``docs`` memories (an owner's first count)."""
    pipe.delete(key)
    mapping: dict[str, int] = {field(t): n for t, n in counts.items() if n > 0}
    mapping[DOCS] = docs
    pipe.hset(key, mapping=mapping)


def queue_read(pipe: Any, key: str, terms: Sequence[str]) -> None:
    pipe.hmget(key, [DOCS, *(field(t) for t in terms)])


def parse_read(reply: Sequence[Any]) -> tuple[int, list[int]] | None:
    """``(docs, df of each term)`` from a :func:`queue_read` reply; ``None`` when the
    owner's hash is not complete (it was never counted)."""
    if reply[0] is None:
        return None
    return int(reply[0]), [0 if v is None else int(v) for v in reply[1:]]


def apply(counts: Counter[str], delta: Mapping[str, int]) -> Counter[str]:
    """``counts`` after ``delta`` (a new counter; terms at 0 dropped)."""
    out = Counter(counts)
    out.update(delta)
    return +out
