"""The text a keyword test reads for each memory: ``memory_text.search_text``.

It is ``text.word_starts`` of the memory's folded content and context: the runs of
term characters from every place a word starts, each once. A term is found where a word
starts when the term after a space is in it, so a scan of an owner's rows tests each
term with one substring test a row, and the trigram index serves the same ``LIKE``.
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
