"""The word-start test of keyword candidates in SQL agrees with ``text.occurs``: its
two substring shortcuts (start of the text, after a space) and its regular expression
for every other place, and so does the one-reading form of the owners' rows."""

from __future__ import annotations

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.storage.postgres import PostgresVectorStore
from dream_memory_actor.storage.postgres.statements import Params, occurs_in_row, starts_word
from dream_memory_actor.text import fold, occurs

TEXTS = ["ate at the harbour", "we ate", "create", "create, then ate", "x-ate", "(ate)",
         "line\nate", "\"ate\"", "ateliers", "crate ate", "caté ate", "écrate", "用ate",
         "ate", "", "a t e", "tab\tate", "dots...ate", "créate"]


async def test_starts_word_matches_occurs_on_every_text(
        pg: tuple[MemorySettings, PostgresVectorStore]) -> None:
    _, vector = pg
    async with vector.backend.connection() as conn:
        for term in ["ate", "at", "a.b", "caté"]:
            for text in TEXTS:
                folded = fold(text)
                p = Params()
                ref = p(folded)
                sql = (f"SELECT strpos(search_text, {p(term)}) > 0 AND {starts_word(p, term)}"
                       f" FROM (SELECT {ref}::text AS search_text) t")
                assert await conn.fetchval(sql, *p.values) == occurs(term, folded), (term, text)
                p = Params()
                ref = p(folded)
                sql = (f"SELECT {occurs_in_row(p, term)}"
                       f" FROM (SELECT {ref}::text AS search_text) t")
                assert await conn.fetchval(sql, *p.values) == occurs(term, folded), (term, text)
