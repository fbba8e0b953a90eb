"""Document frequencies of an owner's memories on Redis: how many memories have each term.

One hash per owner, ``p:{o}:l2:df``, and the owner's terms in a sorted set,
``p:{o}:l2:terms`` (every score 0, so members sort by their bytes, which is code point
order), both under the owner's hash tag so every write of the owner moves them in the
same MULTI/EXEC as the memory itself::

    n         how many memories the hash counts
    lex       present once the sorted set holds every counted term (the hash is complete)
    t:<term>  how many of them have ``term`` among their ``text.terms`` (absent: 0)

Terms are prefixed so that no term can be read as a field of the search index's
schema (``owner``, ``folded``, ``vec``). A term whose count drops to 0 is removed from
both. A search reads, for each query term, the counts of the terms that start with it
(``ZRANGEBYLEX`` then the counts, in one script; see ``storage.terms``). Memories
written before the hash was complete are counted when the owner is next written
(``queue_rebuild``); until then a search counts them from the rows it reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

#: The field holding the number of memories counted.
DOCS = "n"
#: The field saying the hash and the sorted set of terms are complete.
COMPLETE = "lex"

# KEYS[1]: the df hash, KEYS[2]: the sorted set of terms. ARGV: field, delta, field,
# delta, ... (run inside MULTI/EXEC; EVAL, not EVALSHA, so an unknown script cannot
# fail the transaction half-way).
_APPLY_DELTA = """
for i = 1, #ARGV, 2 do
  local n = redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
  if n <= 0 then
    redis.call('HDEL', KEYS[1], ARGV[i])
    redis.call('ZREM', KEYS[2], string.sub(ARGV[i], 3))
  elseif n == tonumber(ARGV[i + 1]) then
    redis.call('ZADD', KEYS[2], 0, string.sub(ARGV[i], 3))
  end
end
return 1
"""

# KEYS[1]: the df hash, KEYS[2]: the sorted set of terms. ARGV: the query terms.
# Returns false when the hash is not complete, else the memories counted and, for each
# term, the sum of the counts of the terms starting with it, at most that number.
READ = """#!lua flags=no-writes
local docs = redis.call('HGET', KEYS[1], 'n')
if not docs or redis.call('HEXISTS', KEYS[1], 'lex') == 0 then
  return false
end
local cap = tonumber(docs)
local out = {cap}
for i = 1, #ARGV do
  local sum = 0
  local t = ARGV[i]
  for _, m in ipairs(redis.call('ZRANGEBYLEX', KEYS[2], '[' .. t, '(' .. t .. '\\255')) do
    sum = sum + tonumber(redis.call('HGET', KEYS[1], 't:' .. m) or '0')
  end
  if sum > cap then
    sum = cap
  end
  out[#out + 1] = sum
end
return out
"""


def field(term: str) -> str:
    return "t:" + term


def queue_delta(pipe: Any, key: str, terms_key: str, delta: Mapping[str, int],
                docs_delta: int) -> None:
    """Queue a write's change (``dedup.df_delta``) on a complete hash."""
    if delta:
        args: list[Any] = []
        for t, d in delta.items():
            args += [field(t), d]
        pipe.eval(_APPLY_DELTA, 2, key, terms_key, *args)
    if docs_delta:
        pipe.hincrby(key, DOCS, docs_delta)


def queue_rebuild(pipe: Any, key: str, terms_key: str, counts: Mapping[str, int],
                  docs: int) -> None:
    """Queue the whole hash and set of terms: ``counts`` of ``docs`` memories (an
    owner's first count)."""
    pipe.delete(key, terms_key)
    kept = {t: n for t, n in counts.items() if n > 0}
    mapping: dict[str, int] = {field(t): n for t, n in kept.items()}
    mapping[DOCS] = docs
    mapping[COMPLETE] = 1
    pipe.hset(key, mapping=mapping)
    for i in range(0, len(kept), 1000):
        pipe.zadd(terms_key, dict.fromkeys(list(kept)[i:i + 1000], 0))


def parse_read(reply: Sequence[Any] | None) -> tuple[int, list[int]] | None:
    """``(docs, df of each term)`` from a :data:`READ` reply; ``None`` when the
    owner's hash is not complete (it was never counted)."""
    if not reply:
        return None
    return int(reply[0]), [int(v) for v in reply[1:]]


def apply(counts: Counter[str], delta: Mapping[str, int]) -> Counter[str]:
    """``counts`` after ``delta`` (a new counter; terms at 0 dropped)."""
    out = Counter(counts)
    out.update(delta)
    return +out
