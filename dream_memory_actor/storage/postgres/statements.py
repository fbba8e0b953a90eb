"""The candidate statement of a search, built from a :class:`~.plan.SearchPlan`.

One statement per search: the nearest memories (exact scan or HNSW index) and the
keyword candidates (owner rows or trigram index), joined by ``UNION ALL``, each
row with its exact cosine to the query. Every value is a bound parameter,
numbered as it is added (:class:`Params`); the two branches share the owners and
the embedding.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ...text import escape_like, is_cjk_term
from .counts import idf_sql, stats_sql
from .migrations import dim_sql
from .plan import RECENT_WINDOW, SearchPlan

#: A term's weight in a statement: a float (bound as a parameter) or an SQL
#: expression of the statement's own counts (:func:`counted_statement`).
Weight = float | str

COLUMNS = ("id", "owner_id", "content", "metadata", "context", "created_at", "updated_at")
#: The columns of a memory row, as ``_memory`` reads them.
MEMORY_COLUMNS = ", ".join(COLUMNS) + ", embedding_dim IS NOT NULL AS has_embedding"


class Params:
    """Bound parameters in the order they are added; each call returns its ``$n``."""

    def __init__(self) -> None:
        self.values: list[Any] = []

    def __call__(self, value: Any) -> str:
        self.values.append(value)
        return f"${len(self.values)}"


def owners_param(p: Params, owners: Sequence[str]) -> str:
    """The owners as one parameter: a ``text`` for one owner, else a ``text[]``."""
    return f"{p(owners[0])}::text" if len(owners) == 1 else f"{p(list(owners))}::text[]"


def owners_filter(ref: str, column: str = "owner_id") -> str:
    """The filter on the owners parameter ``ref``. One owner is compared with an
    equality, not ``= ANY``: the same rows and plan, planned faster (LoCoMo's ~600-row
    owners, whole search: p50 2.56 -> 2.35 ms), and only an equality walks the recency
    index in order."""
    return f"{column} = ANY({ref})" if ref.endswith("[]") else f"{column} = {ref}"


def metadata_condition(p: Params, where: Mapping[str, Any] | None, column: str) -> str:
    """`` AND <column> @> $n::jsonb`` for a metadata filter (empty without one): a
    memory matches when its metadata contains every key with an equal value."""
    if not where:
        return ""
    return f" AND {column} @> {p(json.dumps(dict(where), ensure_ascii=False))}::jsonb"


def text_metadata_condition(p: Params, s: str, where: Mapping[str, Any] | None) -> str:
    """:func:`metadata_condition` for rows of ``memory_text``, through their memory."""
    cond = metadata_condition(p, where, "f.metadata")
    if not cond:
        return ""
    return f" AND EXISTS (SELECT 1 FROM {s}.memories f WHERE f.id = memory_text.id{cond})"


def needle(term: str) -> str:
    """What ``search_text`` (``text.word_starts``) holds where ``term`` is found: the term
    after a space, since the text lists the runs from every place a word starts; a CJK
    term alone, found anywhere."""
    return term if is_cjk_term(term) else " " + term


def found_in_row(p: Params, term: str) -> str:
    """True where ``term`` is found in a row (``text.occurs``). A term other than CJK is
    a prefix query of ``search_words``, the runs of ``search_text`` as a tsvector: where a
    run starts with the term, which is where ``search_text`` holds the term after a space
    (:func:`needle`). A binary search of the row's lexemes, where a substring test read
    the whole text, so a longer text costs little more: ``python -m benchmarks
    context-latency`` (LoCoMo, searches with their vectors given), two runs of each
    version alternating: context over plain p50 1.27-1.31 -> 1.16-1.17x, plain p50
    2.0-2.9 -> 1.6-1.9 ms; ``search-latency --per-owner 1000`` (texts of six words, two
    terms), the statement both ways alternating: no difference beyond the noise. A CJK
    term, found anywhere, and any term in a row whose search text is too long for a
    tsvector (``search_words`` NULL, migration 20) are a substring test of
    ``search_text``."""
    substring = f"strpos(search_text, {p(needle(term))}) > 0"
    if is_cjk_term(term):
        return substring
    return f"coalesce(search_words @@ {p(prefix_query(term))}::tsquery, {substring})"


def prefix_query(term: str) -> str:
    """The tsquery of the lexemes that start with ``term``: the term quoted, taken as it
    is (no dictionary reads a tsquery's input)."""
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "':*"


def balanced_sum(parts: Sequence[str]) -> str:
    """``a + b + ...`` nested as a balanced tree: the parser recurses once per level,
    and a left-deep chain of thousands of terms exceeds its stack depth."""
    if len(parts) == 1:
        return parts[0]
    mid = len(parts) // 2
    return f"({balanced_sum(parts[:mid])} + {balanced_sum(parts[mid:])})"


def candidate_statement(schema: str, dim: int | None, owners: Sequence[str],
                        terms: Sequence[str], embedding: list[float] | None,
                        plan: SearchPlan, *, vector_k: int, keyword_k: int,
                        weights: Sequence[Weight], where: Mapping[str, Any] | None = None,
                        params: Params | None = None, matched: Sequence[Any] | None = None
                        ) -> tuple[str, list[Any]]:
    """The statement and its arguments. Rows: the memory columns, ``sim`` (cosine,
    when ``embedding``) and ``src`` (keyword rows:
    ``recent`` when the recent window answered, else ``index``). A memory found by
    both branches comes twice; ranking keeps it once. ``params``: the parameters of
    a larger statement this one is part of. ``matched``: the rows of
    :func:`keyword_ids`, read already, in place of its subquery."""
    s = schema
    d = int(dim or 0)
    p = Params() if params is None else params
    near = embedding is not None and plan.vector is not None
    # a parameter the statement does not use has no type: PostgreSQL refuses it
    own = owners_param(p, owners) if near or matched is None else ""
    mine = owners_filter(own, "m.owner_id")
    q = f"{p(embedding)}::vector({d})" if embedding is not None else None
    cols = ", ".join(f"m.{c}" for c in COLUMNS) + ", m.embedding_dim IS NOT NULL AS has_embedding"
    dim_ok = f"m.embedding_dim = {d}"  # a literal: the partial HNSW index matches only that
    parts: list[str] = []
    if near:
        mine += metadata_condition(p, where, "m.metadata")
        vk = p(vector_k)
        if plan.vector == "exact":  # the top ids first, then their rows: the sort is narrow
            parts.append(
                f"""SELECT {cols}, t.sim, NULL::text AS src FROM (
                        SELECT m.id, 1 - (m.{dim_sql(d)} <=> {q}) AS sim FROM {s}.memories m
                        WHERE {mine} AND {dim_ok} ORDER BY sim DESC LIMIT {vk}) t
                    JOIN {s}.memories m USING (id)""")
        else:  # ordered by the indexed expression, so the HNSW index serves it
            parts.append(
                f"""SELECT {cols}, 1 - (m.{dim_sql(d)} <=> {q}) AS sim, NULL::text AS src
                    FROM {s}.memories m WHERE {mine} AND {dim_ok}
                    ORDER BY m.{dim_sql(d)} <=> {q} LIMIT {vk}""")
    if terms and plan.keyword is not None:
        sim = "NULL::float8" if q is None else (
            f"CASE WHEN {dim_ok} THEN 1 - (m.{dim_sql(d)} <=> {q}) END")
        ids = keyword_ids(p, s, own, terms, weights, plan, keyword_k, where) if matched is None \
            else (f"SELECT * FROM unnest({p([r['id'] for r in matched])}::uuid[], "
                  f"{p([r['src'] for r in matched])}::text[]) AS k(id, src)")
        parts.append(f"""SELECT {cols}, {sim} AS sim, t.src
                         FROM ({ids}) t JOIN {s}.memories m USING (id)""")
    if not parts:
        return "SELECT NULL LIMIT 0", []
    sql = parts[0] if len(parts) == 1 else " UNION ALL ".join(f"({x})" for x in parts)
    return sql, p.values


def keyword_statement(schema: str, owners: Sequence[str], terms: Sequence[str],
                      plan: SearchPlan, *, keyword_k: int, weights: Sequence[Weight],
                      where: Mapping[str, Any] | None = None) -> tuple[str, list[Any]]:
    """:func:`keyword_ids` alone, with its arguments: what a search reads while its query
    is embedded."""
    p = Params()
    return keyword_ids(p, schema, owners_param(p, owners), terms, weights, plan, keyword_k,
                       where), p.values


def keyword_ids(p: Params, s: str, own: str, terms: Sequence[str],
                weights: Sequence[Weight], plan: SearchPlan, keyword_k: int,
                where: Mapping[str, Any] | None = None) -> str:
    """The ``keyword_k`` memories of the owners with the highest sum of the weights of
    the terms they contain (then newest, then smallest id): ``id, src``.

    Ranking by that sum means reading every memory that contains any term: 7,450 of
    100,000 for two common words. But when at least k memories contain all the terms,
    the answer is exactly the newest k of those (their sum is the largest), found from
    a much smaller set (the trigram indexes intersect); the full ranking then never
    runs (a one-time filter; EXPLAIN says "never executed"). Same result either way.
    On the ``scan`` path the owners' rows are read anyway, so the ranking runs in one
    pass. ``plan.recent_window``: before all that, the owner's newest
    ``RECENT_WINDOW`` rows, walked in recency order (with every row sharing the
    last one's timestamp, so the window is a prefix of the final order even where a
    bulk import gave thousands of memories one timestamp).
    """
    mine = owners_filter(own) + text_metadata_condition(p, s, where)
    k = p(keyword_k)
    if plan.keyword == "scan":  # the owners' rows are read anyway: one pass ranks them
        usual = _scanned_ids(p, s, mine, terms, weights, k)
    else:
        usual = _indexed_ids(p, s, mine, terms, weights, k)
    if not plan.recent_window or own.endswith("[]"):
        return usual
    every = " AND ".join(found_in_row(p, t) for t in terms)
    # From the timestamp of the WINDOW-th newest row on, its ties included: a prefix of
    # the final order without sorting thousands of tied rows by id.
    return f"""WITH recent AS MATERIALIZED (
                   SELECT id FROM {s}.memory_text
                   WHERE {mine} AND {every} AND updated_at >= coalesce((
                       SELECT updated_at FROM {s}.memory_text WHERE {mine}
                       ORDER BY updated_at DESC OFFSET {int(RECENT_WINDOW) - 1} LIMIT 1),
                       '-infinity'::timestamptz)
                   ORDER BY updated_at DESC, id LIMIT {k})
               SELECT id, 'recent' AS src FROM recent
               WHERE (SELECT count(*) FROM recent) >= {k}
               UNION ALL
               SELECT * FROM ({usual}) usual WHERE (SELECT count(*) FROM recent) < {k}"""


def _indexed_ids(p: Params, s: str, mine: str, terms: Sequence[str],
                 weights: Sequence[Weight], k: str) -> str:
    """:func:`keyword_ids` through the trigram index: the newest k rows with every term
    where there are k of them, else the ranking of the rows with any."""
    # The index can use LIKE, and LIKE finds the term after its space as strpos does.
    found = [f"search_text LIKE {p('%' + escape_like(needle(t)) + '%')} ESCAPE '\\'"
             for t in terms]
    score = balanced_sum([f"({x})::int * {w if isinstance(w, str) else p(float(w))}::float8"
                          for x, w in zip(found, weights, strict=True)])

    def ranked(only: str = "") -> str:
        return f"""SELECT id, 'index' AS src FROM {s}.memory_text
                   WHERE {mine} AND ({' OR '.join(found)}){only}
                   ORDER BY {score} DESC, updated_at DESC, id LIMIT {k}"""

    if len(found) == 1:  # containing all terms = containing any
        return ranked()
    return f"""WITH all_terms AS MATERIALIZED (
                   SELECT id FROM {s}.memory_text
                   WHERE {mine} AND {' AND '.join(found)}
                   ORDER BY updated_at DESC, id LIMIT {k})
               SELECT id, 'index' AS src FROM all_terms
               WHERE (SELECT count(*) FROM all_terms) >= {k}
               UNION ALL
               ({ranked(f" AND (SELECT count(*) FROM all_terms) < {k}")})"""


def _scanned_ids(p: Params, s: str, mine: str, terms: Sequence[str],
                 weights: Sequence[Weight], k: str) -> str:
    """:func:`keyword_ids` reading the owners' rows: each term is looked for once a row
    (its ``found_i`` column), and the rows where one is found are ranked by the sum of
    their weights. Written as one filter and one sort key, every term was looked for
    twice in each row that has one (``OFFSET 0`` keeps the columns computed once: the
    planner does not merge such a subquery into the outer one). Measured on LoCoMo's
    seven conversations as ``python -m benchmarks compare-mem0`` loads them (owners of
    about 600 memories, questions of 6 terms at the median), both statements alternating per
    question in one process, 2,066 searches, the same hits and scores: p50 3.74 ->
    3.51 ms, p95 5.87 -> 5.41 ms, three searches in four faster."""
    found = [f"({found_in_row(p, t)}) AS found_{i}" for i, t in enumerate(terms)]
    score = balanced_sum([f"found_{i}::int * {w if isinstance(w, str) else p(float(w))}::float8"
                          for i, w in enumerate(weights)])
    anyone = " OR ".join(f"found_{i}" for i in range(len(terms)))
    return f"""SELECT id, 'index' AS src FROM (
                   SELECT id, updated_at, {', '.join(found)}
                   FROM {s}.memory_text WHERE {mine} OFFSET 0) scanned
               WHERE {anyone}
               ORDER BY {score} DESC, updated_at DESC, id LIMIT {k}"""


def counted_statement(schema: str, dim: int | None, owners: Sequence[str],
                      terms: Sequence[str], embedding: list[float] | None, plan: SearchPlan,
                      *, vector_k: int, keyword_k: int, owner_rows: tuple[int, int],
                      table_rows: int, codepoint_order: bool = True) -> tuple[str, list[Any]]:
    """The counts of :func:`~.counts.term_stats` and the candidates of ``plan`` in one
    statement, the terms weighted in SQL from those counts (as ``scoring.idf``).

    The candidates come only while the owners' memories are within ``owner_rows``
    (first, last) and the table's are ``table_rows``: where the counts choose
    ``plan`` (:func:`~.plan.same_plan_rows`). Rows: the candidate rows, and one row
    whose ``st_docs``, ``st_table``, ``st_terms``, ``st_df``, ``st_seen``,
    ``st_versions`` (the counts and tokens), ``st_w``
    (each term's weight) and ``st_same`` (whether the candidates came) are set and
    every candidate column is NULL.
    """
    p = Params()
    o, t = p(list(owners)), p(list(terms))
    stats = stats_sql(schema, owners, f"{o}::text[]", f"{t}::text[]",
                      codepoint_order=codepoint_order)
    w = ", ".join(idf_sql(f"x.df[{i}]", "x.docs") for i in range(1, len(terms) + 1))
    lo, hi = p(owner_rows[0]), p(owner_rows[1])
    same = (f"x.docs BETWEEN {lo}::bigint AND {hi}::bigint "
            f"AND floor(x.table_docs) = {p(float(table_rows))}::float8")
    cands, _ = candidate_statement(
        schema, dim, owners, terms, embedding, plan, vector_k=vector_k, keyword_k=keyword_k,
        weights=[f"(SELECT w[{i}] FROM counts)" for i in range(1, len(terms) + 1)], params=p)
    # The counts row is materialized before the weights read it: as a subquery in FROM
    # it would be pulled up, and each of the many references to its columns would plan
    # and run its subqueries once more (0.3-0.5 ms of planning a search).
    return f"""WITH x AS MATERIALIZED ({stats}),
                    counts AS MATERIALIZED (
                        SELECT x.*, ARRAY[{w}]::float8[] AS w, {same} AS same FROM x)
               SELECT c.*, k.docs AS st_docs, k.table_docs AS st_table, k.terms AS st_terms,
                      k.df AS st_df, k.w AS st_w, k.same AS st_same, k.seen AS st_seen,
                      k.versions AS st_versions
               FROM (SELECT * FROM ({cands}) c WHERE (SELECT same FROM counts)) c
               FULL JOIN counts k ON false""", p.values
