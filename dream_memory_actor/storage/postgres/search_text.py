"""The text a keyword test reads for each memory: ``memory_text.search_text``.

It is ``text.word_starts`` of the memory's folded content and context: the runs of
term characters from every place a word starts, each once. A term is found where a word
starts when the term after a space is in it: the trigram index serves that ``LIKE``, and
a CJK term is one substring test. Against the folded text itself, a term found inside a
word took a second test, and a regular expression where no space came before it
(LoCoMo's searches with their vectors given, through the engine: p50 10.3-11.0 -> 9.5-10.2
ms for turns alone, 14.4-15.2 -> 12.0-12.8 ms with their context). The same runs, as the
lexemes of ``search_words`` (a column PostgreSQL computes from this text, migration 20),
answer the test of other terms in a scan of an owner's rows by a prefix query
(``statements.found_in_row``).
"""

from __future__ import annotations

import uuid
from typing import Any

from ...text import fold, with_context, word_starts

#: Memories rewritten per round trip when a migration rewrites their search text.
BACKFILL_BATCH = 2000


def search_text(content: str, context: str | None) -> str:
    """The ``search_text`` of a memory with this content and context."""
    return word_starts(fold(with_context(content, context)))


async def backfill_search_text(conn: Any, s: str) -> None:
    """Rewrite the search text of the memories a schema already holds, in order of id
    (a migration step)."""
    after = uuid.UUID(int=0)
    while True:
        rows = await conn.fetch(
            f"""SELECT id, content, context FROM {s}.memories WHERE id > $1
                ORDER BY id LIMIT $2""", after, BACKFILL_BATCH)
        if not rows:
            return
        await conn.execute(
            f"""UPDATE {s}.memory_text t SET search_text = u.search_text
                FROM unnest($1::uuid[], $2::text[]) AS u(id, search_text) WHERE t.id = u.id""",
            [r["id"] for r in rows], [search_text(r["content"], r["context"]) for r in rows])
        after = rows[-1]["id"]
