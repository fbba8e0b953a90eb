"""Append-only schema migrations, applied by an explicit ``setup()`` and recorded in a table.

Never edit or reorder an entry: add a new one. ``{s}`` is the schema name,
whitelisted by the settings (letters, digits, underscore) before it gets here.

The HNSW index is per embedding dimension, on an expression
(``embedding::vector(N)``) with a partial predicate, as pgvector documents for
tables holding several dimensions: switching the embedding model later adds an
index instead of rewriting the table. It is not made here but when a read first
wants it (``hnsw``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ...errors import SchemaError
from .counts import backfill_term_df
from .search_text import backfill_search_text

MIGRATIONS: list[tuple[int, str, str]] = [
    (1, "initial", """
CREATE TABLE {s}.owners (
    owner_id   text PRIMARY KEY,
    version    bigint NOT NULL DEFAULT 0,
    updated_at timestamptz
);
CREATE TABLE {s}.rules (
    id           text PRIMARY KEY,
    owner_id     text NOT NULL,
    content      text NOT NULL,
    content_hash text NOT NULL,
    source       text NOT NULL,
    created_at   timestamptz NOT NULL,
    seq          bigserial,
    UNIQUE (owner_id, content_hash)
);
CREATE TABLE {s}.facts (
    id           text PRIMARY KEY,
    owner_id     text NOT NULL,
    content      text NOT NULL,
    content_hash text NOT NULL,
    source       text NOT NULL,
    created_at   timestamptz NOT NULL,
    seq          bigserial,
    UNIQUE (owner_id, content_hash)
);
CREATE TABLE {s}.status (
    owner_id   text NOT NULL,
    key        text NOT NULL,
    value      text NOT NULL,
    updated_at timestamptz NOT NULL,
    expires_at timestamptz,
    PRIMARY KEY (owner_id, key)
);
CREATE TABLE {s}.pending (
    id          text PRIMARY KEY,
    owner_id    text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('rule', 'fact', 'status', 'memory')),
    content     text,
    key         text,
    value       text,
    confidence  double precision NOT NULL CHECK (confidence >= 0 AND confidence <= 1),
    source      text NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz,
    fingerprint text NOT NULL,
    seq         bigserial,
    UNIQUE (owner_id, fingerprint)
);
CREATE TABLE {s}.memories (
    id            uuid PRIMARY KEY,
    owner_id      text NOT NULL,
    content       text NOT NULL,
    content_hash  text NOT NULL,
    metadata      jsonb NOT NULL DEFAULT '{{}}'::jsonb,
    embedding     vector,
    embedding_dim integer,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL
);
CREATE INDEX memories_owner_recent ON {s}.memories (owner_id, updated_at DESC);
CREATE INDEX memories_owner_hash ON {s}.memories (owner_id, content_hash);
-- The folded text lives in a narrow table: a keyword scan then reads ~100 bytes
-- a row instead of rows carrying a 1.5 KB embedding.
CREATE TABLE {s}.memory_text (
    id          uuid PRIMARY KEY REFERENCES {s}.memories (id) ON DELETE CASCADE,
    owner_id    text NOT NULL,
    search_text text NOT NULL,
    updated_at  timestamptz NOT NULL
);
CREATE INDEX memory_text_owner_recent ON {s}.memory_text (owner_id, updated_at DESC);
CREATE INDEX memory_text_trgm ON {s}.memory_text USING gin (search_text gin_trgm_ops);
CREATE TABLE {s}.applied_ops (
    owner_id   text NOT NULL,
    op_id      text NOT NULL,
    kind       text NOT NULL,
    result     jsonb,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_id, op_id)
);
"""),
    (2, "chat window, audit trail, pending evidence", """
ALTER TABLE {s}.pending ADD COLUMN evidence text;
-- The L3 window of each conversation; seq orders messages by arrival.
CREATE TABLE {s}.chat_messages (
    seq             bigserial PRIMARY KEY,
    owner_id        text NOT NULL,
    conversation_id text NOT NULL,
    role            text NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
    content         text NOT NULL,
    created_at      timestamptz NOT NULL
);
CREATE INDEX chat_messages_conversation ON {s}.chat_messages (owner_id, conversation_id, seq);
-- Who confirmed or rejected which pending item, when; one decision per item.
CREATE TABLE {s}.audit (
    seq        bigserial PRIMARY KEY,
    id         text NOT NULL UNIQUE,
    owner_id   text NOT NULL,
    pending_id text NOT NULL,
    action     text NOT NULL CHECK (action IN ('confirmed', 'rejected')),
    actor      text NOT NULL,
    at         timestamptz NOT NULL,
    item       jsonb NOT NULL,
    written    text,
    UNIQUE (owner_id, pending_id)
);
CREATE INDEX audit_owner_recent ON {s}.audit (owner_id, seq DESC);
"""),
    (3, "memory count per owner", """
-- Kept in the transaction of every insert and delete of a memory; a search reads it
-- to choose how to gather candidates (storage/postgres/plan.py).
CREATE TABLE {s}.owner_memory_counts (
    owner_id text PRIMARY KEY,
    memories bigint NOT NULL CHECK (memories >= 0)
);
INSERT INTO {s}.owner_memory_counts (owner_id, memories)
    SELECT owner_id, count(*) FROM {s}.memories GROUP BY owner_id;
"""),
    (4, "term document frequency per owner", """
-- For each owner and term, how many of its memories have the term among their
-- text.terms; kept in the transaction of every write, filled from the existing rows
-- by counts.backfill_term_df. A term no memory has any more has no row.
CREATE TABLE {s}.term_df (
    owner_id text NOT NULL,
    term     text NOT NULL,
    df       bigint NOT NULL,
    PRIMARY KEY (owner_id, term)
);
"""),
    (5, "rule, fact and pending ids scoped by owner", """
-- An id names an item of one owner: another owner may use the same id, and an
-- error never tells whether some other owner has it.
ALTER TABLE {s}.rules DROP CONSTRAINT rules_pkey, ADD PRIMARY KEY (owner_id, id);
ALTER TABLE {s}.facts DROP CONSTRAINT facts_pkey, ADD PRIMARY KEY (owner_id, id);
ALTER TABLE {s}.pending DROP CONSTRAINT pending_pkey, ADD PRIMARY KEY (owner_id, id);
"""),
    (6, "history of rules, facts and status; corrections in the pending queue", """
-- Superseded rules and facts, out of the tables the snapshot reads: loading the
-- current snapshot reads what it did before. seq orders them by when they closed.
CREATE TABLE {s}.item_history (
    owner_id      text NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('rule', 'fact')),
    id            text NOT NULL,
    content       text NOT NULL,
    source        text NOT NULL,
    created_at    timestamptz NOT NULL,
    valid_to      timestamptz NOT NULL,
    superseded_by text,
    actor         text,
    reason        text,
    seq           bigserial,
    PRIMARY KEY (owner_id, kind, id)
);
CREATE INDEX item_history_owner ON {s}.item_history (owner_id, seq);
-- The last values of each status key (a NULL value: deleted), trimmed on write.
CREATE TABLE {s}.status_history (
    seq        bigserial PRIMARY KEY,
    owner_id   text NOT NULL,
    key        text NOT NULL,
    value      text,
    at         timestamptz NOT NULL,
    expires_at timestamptz
);
CREATE INDEX status_history_key ON {s}.status_history (owner_id, key, seq);
INSERT INTO {s}.status_history (owner_id, key, value, at, expires_at)
    SELECT owner_id, key, value, updated_at, expires_at FROM {s}.status ORDER BY updated_at;
-- A queued correction names the rule or fact it would replace.
ALTER TABLE {s}.pending ADD COLUMN supersedes text, ADD COLUMN supersedes_content text;
"""),
    (7, "earlier versions of semantic memories", """
-- What an update replaced and what a supersession closed, beside the live memories:
-- searches read only ``memories``. ``memory_id`` is the memory the version was of;
-- the last version of a superseded memory names its successor.
CREATE TABLE {s}.memory_versions (
    id            uuid PRIMARY KEY,
    owner_id      text NOT NULL,
    memory_id     uuid NOT NULL,
    content       text NOT NULL,
    metadata      jsonb NOT NULL,
    has_embedding boolean NOT NULL,
    valid_from    timestamptz NOT NULL,
    valid_to      timestamptz NOT NULL,
    change        text NOT NULL CHECK (change IN ('update', 'supersede')),
    superseded_by uuid,
    by_name       text,
    reason        text
);
CREATE INDEX memory_versions_memory ON {s}.memory_versions (owner_id, memory_id);
CREATE INDEX memory_versions_successor ON {s}.memory_versions (owner_id, superseded_by)
    WHERE superseded_by IS NOT NULL;
"""),
    (8, "tombstones of forgotten owners", """
-- What erasing an owner leaves (storage/postgres/erase.py): no owner_id column, so
-- no erasure finds it; op_key (a digest of owner and operation id) makes a retried
-- erasure return its first tombstone.
CREATE TABLE {s}.tombstones (
    seq    bigserial PRIMARY KEY,
    id     text NOT NULL UNIQUE,
    op_key text UNIQUE,
    actor  text NOT NULL,
    at     timestamptz NOT NULL,
    counts jsonb NOT NULL
);
"""),
    (9, "merged contents in the history of memories", """
-- A store that merges a duplicate keeps the content it replaced as a version.
ALTER TABLE {s}.memory_versions DROP CONSTRAINT memory_versions_change_check;
ALTER TABLE {s}.memory_versions ADD CONSTRAINT memory_versions_change_check
    CHECK (change IN ('update', 'supersede', 'merge'));
"""),
    (10, "the embedding model recorded with the data", """
-- One row: the model every memory vector of this schema was made with.
CREATE TABLE {s}.embedding_model (
    only_row    boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    model       text NOT NULL,
    dim         integer NOT NULL,
    calibration jsonb,
    recorded_at timestamptz NOT NULL
);
"""),
    (11, "audit ids scoped by owner", """
-- As rule, fact and pending ids (5): an audit entry's id is its owner's own, so an
-- imported entry is never dropped because another owner holds the same id.
ALTER TABLE {s}.audit DROP CONSTRAINT audit_id_key,
    ADD CONSTRAINT audit_owner_id_key UNIQUE (owner_id, id);
"""),
    (12, "an index of memory metadata", """
-- Metadata filters (search and list --filter, the LangGraph store's lookup of an item by
-- key) are containment tests, which this index answers without reading the owner's rows.
CREATE INDEX memories_metadata ON {s}.memories USING gin (metadata jsonb_path_ops);
"""),
    (13, "the context of a memory", """
-- What helps find a memory without being part of it (the turn before it, its date):
-- embedded and searched with the content (memory_text.search_text holds both), kept
-- with the memory and its versions.
ALTER TABLE {s}.memories ADD COLUMN context text;
ALTER TABLE {s}.memory_versions ADD COLUMN context text;
"""),
    (14, "consolidation proposals", """
-- A consolidation pass queues its proposals as pending items of their own kinds, the
-- change each describes in proposal; a memory a person let expire is closed as such.
ALTER TABLE {s}.pending DROP CONSTRAINT pending_kind_check;
ALTER TABLE {s}.pending ADD CONSTRAINT pending_kind_check
    CHECK (kind IN ('rule', 'fact', 'status', 'memory', 'merge', 'supersede', 'expire'));
ALTER TABLE {s}.pending ADD COLUMN proposal jsonb;
ALTER TABLE {s}.memory_versions DROP CONSTRAINT memory_versions_change_check;
ALTER TABLE {s}.memory_versions ADD CONSTRAINT memory_versions_change_check
    CHECK (change IN ('update', 'supersede', 'merge', 'expire'));
"""),
    (15, "when a memory was last read", """
-- When a search last found the memory (written in batches, never a version): a memory
-- proposed to expire is one neither changed nor read for a while.
ALTER TABLE {s}.memories ADD COLUMN last_read_at timestamptz;
"""),
    (16, "undone proposals in the audit trail", """
-- Who undid a confirmed consolidation proposal, when, how many memories came back and
-- the pending item it waits in again: an entry beside the confirmation it reverses, so
-- an item has one decision and one undo at most.
ALTER TABLE {s}.audit DROP CONSTRAINT audit_action_check;
ALTER TABLE {s}.audit ADD CONSTRAINT audit_action_check
    CHECK (action IN ('confirmed', 'rejected', 'undone'));
ALTER TABLE {s}.audit ADD COLUMN restored integer, ADD COLUMN requeued text;
ALTER TABLE {s}.audit DROP CONSTRAINT audit_owner_id_pending_id_key;
CREATE UNIQUE INDEX audit_owner_pending_key ON {s}.audit
    (owner_id, pending_id, (action = 'undone'));
"""),
    (17, "memory vectors kept in their rows", """
-- A search reads the vector of every memory it scans. Stored EXTENDED (the type's
-- default), a vector, the widest value of its row, went to the TOAST table as soon as
-- content, context and metadata made the row longer than about 2 kB (a turn with its
-- context does), and every scan fetched it from there. MAIN keeps it in the row: the
-- texts are compressed or moved out first. LoCoMo's searches of memories with context,
-- vectors given, took 0.88x as long (1,149 pairs alternating, twice); against memories
-- without context, 1.22x instead of 1.37x (python -m benchmarks context-latency). Rows
-- written before keep their place until rewritten (an update, a re-embed).
ALTER TABLE {s}.memories ALTER COLUMN embedding SET STORAGE MAIN;
"""),
    (18, "reads kept apart from the memories", """
-- A batch of reads updated every memory a search had found: a new version of each
-- wide row (its vector in it), so a read-heavy owner's rows took several times their
-- pages until a vacuum, and every scan of them read those pages. Reads now go to a
-- narrow table of their own, which no search reads.
CREATE TABLE {s}.memory_reads (
    id       uuid PRIMARY KEY REFERENCES {s}.memories (id) ON DELETE CASCADE,
    owner_id text NOT NULL,
    read_at  timestamptz NOT NULL
);
CREATE INDEX memory_reads_owner ON {s}.memory_reads (owner_id);
INSERT INTO {s}.memory_reads (id, owner_id, read_at)
    SELECT id, owner_id, last_read_at FROM {s}.memories WHERE last_read_at IS NOT NULL;
ALTER TABLE {s}.memories DROP COLUMN last_read_at;
"""),
    (19, "search text as the places words start", """
-- A keyword test read the folded text: a second substring test where a term was found
-- inside a word, and a regular expression where no space came before it. The search text
-- now lists the runs from every place a word starts (search_text.py): one substring
-- test a row. The rows already written are rewritten in Python after this step.
COMMENT ON COLUMN {s}.memory_text.search_text IS
    'the runs of term characters from every place a word starts, each once (text.word_starts)';
"""),
    (20, "search words", """
-- A scan of an owner's rows tested each term with a substring test of the search text,
-- whose time grows with the text's length (with their context, LoCoMo's turns have 2.5
-- times the search text of the turns alone). The same runs as the lexemes of a tsvector
-- answer a prefix query by a binary search (statements.found_in_row). Runs of 200
-- characters or more, which only CJK runs can be and which no prefix query reads, are
-- left out: a lexeme holds at most 2046 bytes. A tsvector holds less than 1 MiB of
-- lexemes: a longer search text (a memory that large, where the settings allow one) has
-- none, and its terms are tested in the text itself.
ALTER TABLE {s}.memory_text ADD COLUMN search_words tsvector
    GENERATED ALWAYS AS (CASE WHEN octet_length(search_text) < 1048576 THEN
        array_to_tsvector(array_remove(string_to_array(
            btrim(regexp_replace(search_text, '\\S{{200,}}', '', 'g')), ' '), '')) END) STORED;
COMMENT ON COLUMN {s}.memory_text.search_words IS
    'the runs of search_text as lexemes, for the word-start test of a term (a prefix query)';
"""),
    (21, "memory texts kept in their rows", """
-- A search sends the content and context of each of its candidates. Past about 2 kB a
-- row (a turn with its context beside its vector) had its texts moved to the TOAST
-- table (the vector stays: migration 17), and each candidate's texts were fetched from
-- there: the contexts of 555 of LoCoMo's 788 turns of two conversations. Rows up to half
-- a page now keep their texts; longer ones move them out as before. A search of memories
-- with their context, vectors given, took 1.12-1.16x as long as one of the memories
-- alone, now 1.06-1.08x (python -m benchmarks context-latency, three and two runs
-- alternating). Rows written before keep their place until rewritten (an update, or a
-- VACUUM FULL of the table).
ALTER TABLE {s}.memories SET (toast_tuple_target = 4080);
"""),
    (22, "a version token per owner", """
-- Every write of an owner's memories gives its count row a new value of a sequence, so
-- a process that holds the owner's rows (owner_rows.py) knows, from the statistics a
-- search reads anyway, whether they are still the owner's. A sequence never gives a
-- value twice, even to a write that is rolled back. NULL: not written since; such an
-- owner's rows are not kept until its next write.
CREATE SEQUENCE {s}.owner_versions;
ALTER TABLE {s}.owner_memory_counts ADD COLUMN version bigint;
"""),
]

#: Steps in Python run right after a migration's SQL, in its transaction: what SQL
#: cannot compute (the terms of a text are ``text.terms``, its search text
#: ``text.word_starts``).
BACKFILLS: dict[int, Callable[[Any, str], Awaitable[None]]] = {
    4: backfill_term_df, 19: backfill_search_text}

_BOOTSTRAP = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
"""


def hnsw_index_name(dim: int) -> str:
    return f"memories_hnsw_{int(dim)}"


def dim_sql(dim: int) -> str:
    """The typed vector expression of dimension ``dim`` (an int from settings, never user text)."""
    return f"embedding::vector({int(dim)})"


async def migrate(conn: Any, schema: str) -> list[int]:
    """Apply pending migrations; return versions applied.

    Runs under a transaction-scoped advisory lock, so several processes calling
    it at once apply each migration exactly once.
    """
    applied: list[int] = []
    async with conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('dream_memory:setup', 0))")
        await conn.execute(_BOOTSTRAP.format(s=schema))
        done = {r["version"] for r in await conn.fetch(
            f"SELECT version FROM {schema}.schema_migrations")}
        known = max(v for v, _, _ in MIGRATIONS)
        if done and max(done) > known:
            raise SchemaError(
                f"schema {schema!r} is at migration {max(done)}, newer than this library "
                f"knows ({known}); upgrade dream-memory-actor"
            )
        for version, name, sql in MIGRATIONS:
            if version in done:
                continue
            await conn.execute(sql.format(s=schema))
            if version in BACKFILLS:
                await BACKFILLS[version](conn, schema)
            await conn.execute(
                f"INSERT INTO {schema}.schema_migrations (version, name) VALUES ($1, $2)",
                version, name)
            applied.append(version)
    return applied
