"""Counts the database keeps beside the memories, in the transaction of each write.

``owner_memory_counts``: each owner's memories (the search plan's owner rows and
the ``docs`` of term weights). ``term_df``: for each owner and term, how many of its
memories have that term among their ``text.terms`` (the ``df`` of term weights).
Insert adds, delete subtracts, a merge that changes the text subtracts the old
terms and adds the new; a bulk insert adds its rows' terms in one statement.
Writes of one owner hold its advisory lock, so they apply in turn.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ...scoring import TermStats
from ...text import terms

#: Memories read per round trip when a migration counts the terms of existing rows.
BACKFILL_BATCH = 5000


def term_delta(removed: Iterable[str] = (), added: Iterable[str] = ()) -> dict[str, int]:
    """Per term, how the document frequency changes when memories with the texts
    ``removed`` go and memories with the texts ``added`` come (zero changes left out).

    >>> term_delta(["deploy on kubernetes"], ["deploy on helm"])
    {'helm': 1, 'kubernetes': -1}
    """
    delta: Counter[str] = Counter()
    for text in added:
        delta.update(terms(text))
    for text in removed:
        delta.subtract(terms(text))
    return {t: n for t, n in delta.items() if n}


async def add_memories(conn: Any, s: str, owner: str, n: int
                       ) -> tuple[str | None, str | None]:
    """Add ``n`` (negative: remove) to the owner's memory count, and give the owner a
    new version token (``owner_versions``: a sequence never gives a value twice, even
    to a write rolled back). Returns the token before and after (``None``: none)."""
    before = f"(SELECT version FROM {s}.owner_memory_counts WHERE owner_id = $1)"
    if n < 0:  # the owner has a row: its memories were counted when written
        row = await conn.fetchrow(
            f"""UPDATE {s}.owner_memory_counts c
                SET memories = memories + $2, version = nextval('{s}.owner_versions')
                FROM {before} b(version) WHERE c.owner_id = $1
                RETURNING b.version AS before, c.version AS after""", owner, n)
    else:
        row = await conn.fetchrow(
            f"""INSERT INTO {s}.owner_memory_counts AS c (owner_id, memories, version)
                VALUES ($1, $2, nextval('{s}.owner_versions'))
                ON CONFLICT (owner_id) DO UPDATE
                SET memories = c.memories + excluded.memories, version = excluded.version
                RETURNING {before} AS before, c.version AS after""", owner, n)
    return (None, None) if row is None else (token(row["before"]), token(row["after"]))


def token(version: int | None) -> str | None:
    """An owner's version as ``owner_rows`` tags rows with it."""
    return None if version is None else str(version)


async def add_terms(conn: Any, s: str, owner: str, delta: Mapping[str, int]) -> None:
    """Apply ``delta`` (see :func:`term_delta`) to the owner's document frequencies;
    a term no memory has any more loses its row. Terms in sorted order, so two
    transactions lock the rows they share in the same order."""
    if not delta:
        return
    names = sorted(delta)
    await conn.execute(
        f"""INSERT INTO {s}.term_df (owner_id, term, df)
            SELECT $1, t, n FROM unnest($2::text[], $3::bigint[]) AS u(t, n)
            ON CONFLICT (owner_id, term) DO UPDATE SET df = {s}.term_df.df + excluded.df""",
        owner, names, [delta[t] for t in names])
    gone = [t for t in names if delta[t] < 0]
    if gone:
        await conn.execute(f"""DELETE FROM {s}.term_df
                               WHERE owner_id = $1 AND term = ANY($2::text[]) AND df <= 0""",
                           owner, gone)


def stats_sql(s: str, owners: Sequence[str], owners_ref: str = "$1::text[]",
              terms_ref: str = "$2::text[]", *, codepoint_order: bool = True) -> str:
    """One statement for :func:`term_stats`: ``owners_ref`` the owners (``text[]``),
    ``terms_ref`` the terms (``$1`` and ``$2`` unless a larger statement embeds it).
    Columns: ``docs``, ``table_docs``, ``terms`` (the terms given), ``df`` (theirs,
    in the same order; 0 for a term no owner's memory has), and ``seen`` and
    ``versions``: the owners that have a count and their version tokens.

    A term's document frequency is the sum of the counts of the terms starting with it,
    at most each owner's memories (``storage.terms``): a range of the primary key,
    ``[t, t || U+10FFFF)``, where the database's collation sorts by code point (C,
    C.UTF-8); under any other collation the range is compared in "C" (the same result,
    without the index). The table's memories come from the planner's statistics (0
    before the first ANALYZE): exact enough to choose a plan, and free. Every search
    plans this statement anew, so it is small: one subquery a term and, for one owner,
    no join (a CTE with a join and two groups took about 0.15 ms more to plan and run,
    ``python -m benchmarks search-latency --owners 1``)."""
    o = owners_ref
    mine = f"owner_id = ({o})[1]" if len(owners) == 1 else f"owner_id = ANY({o})"
    c = "" if codepoint_order else ' COLLATE "C"'
    prefixed = f"{mine} AND term{c} >= q.t AND term{c} < q.t || chr(1114111)"
    if len(owners) == 1:
        n = f"least(coalesce((SELECT sum(df) FROM {s}.term_df WHERE {prefixed}), 0), k.docs)"
    else:
        n = f"""coalesce((SELECT sum(least(x.n, m.memories)) FROM (
                    SELECT owner_id, sum(df) AS n FROM {s}.term_df WHERE {prefixed}
                    GROUP BY owner_id) x
                JOIN {s}.owner_memory_counts m USING (owner_id)), 0)"""
    return f"""SELECT k.docs, (SELECT greatest(reltuples, 0)::float8 FROM pg_class
                               WHERE oid = '{s}.memories'::regclass) AS table_docs,
                      {terms_ref} AS terms,
                      ARRAY(SELECT {n}::bigint FROM unnest({terms_ref}) WITH ORDINALITY AS q(t, i)
                            ORDER BY q.i) AS df, k.seen, k.versions
               FROM (SELECT coalesce(sum(memories), 0)::bigint AS docs,
                            array_agg(owner_id) AS seen, array_agg(version) AS versions
                     FROM {s}.owner_memory_counts WHERE {mine}) k"""


def found_df(terms: Sequence[str] | None, df: Sequence[int] | None) -> dict[str, int]:
    """The ``terms`` and ``df`` columns of :func:`stats_sql` as a mapping of the terms
    some memory has."""
    return {t: int(n) for t, n in zip(terms or [], df or [], strict=True) if n}


def idf_sql(df: str, docs: str) -> str:
    """:func:`~dream_memory_actor.scoring.idf` as an SQL expression of the ``bigint``
    expressions ``df`` and ``docs``, in the same float8 steps (the same values)."""
    d = f"greatest({df}, 0)::float8"
    return (f"ln(1::float8 + (greatest({docs}::float8, {d}) - {d} + 0.5::float8)"
            f" / ({d} + 0.5::float8))")


#: True when the database's default collation sorts text by code point: an uppercase
#: letter before every lowercase one, and punctuation not ignored.
CODEPOINT_ORDER_SQL = "SELECT 'B' < 'a' AND 'a-c' < 'ab' AND 'a' || chr(1114111) > 'az'"


async def term_stats(conn: Any, s: str, owners: Sequence[str], query: Sequence[str], *,
                     codepoint_order: bool = True) -> TermStats:
    """The owners' memory count, the table's, and the document frequency of each of
    ``query`` among the owners' memories: one round trip."""
    row = await conn.fetchrow(stats_sql(s, owners, codepoint_order=codepoint_order),
                              list(owners), list(dict.fromkeys(query)))
    return TermStats(int(row["docs"]), found_df(row["terms"], row["df"]), int(row["table_docs"]),
                     found_versions(row["seen"], row["versions"]))


def found_versions(seen: Sequence[str] | None, versions: Sequence[int | None] | None
                   ) -> dict[str, str]:
    """The ``seen`` and ``versions`` columns of :func:`stats_sql` as each owner's token
    (an owner whose count was written before tokens were kept has none yet)."""
    return {o: t for o, v in zip(seen or [], versions or [], strict=True)
            if (t := token(v)) is not None}


async def backfill_term_df(conn: Any, s: str) -> None:
    """Count the terms of the memories a schema already holds (a migration step)."""
    totals: Counter[tuple[str, str]] = Counter()
    async for row in conn.cursor(f"SELECT owner_id, content FROM {s}.memories",
                                 prefetch=BACKFILL_BATCH):
        owner = row["owner_id"]
        totals.update((owner, t) for t in terms(row["content"]))
    if totals:
        await conn.copy_records_to_table(
            "term_df", schema_name=s, columns=["owner_id", "term", "df"],
            records=[(o, t, n) for (o, t), n in totals.items()])
