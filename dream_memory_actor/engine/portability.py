"""Export an owner to a JSON Lines document, and import it on any backend.

The document is versioned and self-describing, one JSON object a line::

    {"type": "header", "format": "dream-memory-export", "version": 1, "owner": "alice",
     "exported_at": "...", "embedding_model": "local:multilingual-e5-small", "dim": 384}
    {"type": "rule", "owner": "alice", "item": {"id": ..., "content": ..., ...}}
    {"type": "fact" | "pending" | "audit", "owner": "alice", "item": {...}}
    {"type": "status", "owner": "alice", "key": ..., "value": ..., "expires_at": ...}
    {"type": "version", "owner": "alice", "item": {...}}   a superseded rule or fact
    {"type": "status_change", "owner": "alice", "item": {...}}   a kept status value
    {"type": "memory", "owner": "alice", "item": {...}, "embedding": [...] | null}
    {"type": "memory_version", "owner": "alice", "item": {...}}   an earlier version
    {"type": "window", "owner": "alice", "conversation": "c1",
     "messages": [{"role": "user", "content": ..., "created_at": ...}, ...]}
    {"type": "end", "counts": {"rule": 2, ...}}

Every record names its owner, and an import refuses a record of another owner than
the header's: a document cannot write into someone else's memory. The closing
``end`` record counts the records, so a truncated file is refused too. Everything is
checked before anything is written, and the target owner must be empty (forget it
first). Ids, times, sources and metadata are kept; embeddings are kept when the
importing system uses the model that made them, and made again otherwise.

A ``window`` record is the chat window of one open conversation, its messages oldest
first: an owner moved mid-conversation keeps what its extraction has not read yet. An
import appends them to the conversation as they were (roles, texts, times); documents
written before windows were exported have none and import as before.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ValidationError

from .. import validation as check
from ..errors import InvalidImport, InvalidInput, OwnerNotEmpty
from ..history import ItemVersion, StatusChange
from ..models import (
    AuditEntry,
    ChatMessage,
    MemoryFact,
    MemoryPendingItem,
    MemoryRule,
    MemoryVersion,
    VectorMemory,
    new_id,
    utcnow,
)
from ..storage.memory import InMemoryStructuredStore
from ..storage.ops import AddAudit, SetStatus
from ..validation import l1 as check_l1
from .replay import l1_writes

if TYPE_CHECKING:
    from ..config import MemorySettings
    from ..embedding import CachedEmbedder
    from ..storage.base import StructuredStore, VectorStore


class Stores(Protocol):
    """What an export or import works on: a ``MemoryEngine``, or anything with its
    stores, settings and embedder (``None``: keyword only)."""

    settings: MemorySettings
    structured: StructuredStore
    vector: VectorStore
    embedder: CachedEmbedder | None

FORMAT = "dream-memory-export"
VERSION = 1
#: The longest line an import reads (a memory of 32 KiB with a 1,536-dim embedding
#: fits several times over).
MAX_LINE_BYTES = 4 * 1024 * 1024

_ITEMS: dict[str, type[Any]] = {"rule": MemoryRule, "fact": MemoryFact,
                               "version": ItemVersion, "status_change": StatusChange,
                               "pending": MemoryPendingItem, "audit": AuditEntry,
                               "memory": VectorMemory, "memory_version": MemoryVersion}


async def export_owner(engine: Stores, owner: str) -> list[str]:
    """The export document of ``owner``, line by line (no trailing newlines)."""
    check.owner_id(owner)
    snap = await engine.structured.load(owner)
    audit = await engine.structured.audit(owner, limit=None)
    closed, changes = await engine.structured.past(owner)
    memories = await engine.vector.dump(owner)
    records: list[dict[str, Any]] = []
    records += [{"type": "rule", "item": r.model_dump(mode="json")} for r in snap.rules]
    records += [{"type": "fact", "item": f.model_dump(mode="json")} for f in snap.facts]
    for key, value in snap.status.items():
        expires = snap.status_expires_at.get(key)
        records.append({"type": "status", "key": key, "value": value,
                        "expires_at": None if expires is None else expires.isoformat()})
    records += [{"type": "version", "item": v.model_dump(mode="json")}
                for v in closed]
    records += [{"type": "status_change", "item": c.model_dump(mode="json")}
                for c in changes]
    records += [{"type": "pending", "item": p.model_dump(mode="json")} for p in snap.pending]
    records += [{"type": "audit", "item": e.model_dump(mode="json")}
                for e in reversed(audit)]  # oldest first, as they were written
    records += [{"type": "memory", "item": m.model_dump(mode="json"), "embedding": emb}
                for m, emb in memories]
    records += [{"type": "memory_version", "item": v.model_dump(mode="json")}
                for v in await engine.vector.versions(owner)]
    for conversation in await engine.structured.conversations(owner):
        window = await engine.structured.load_window(owner, conversation)
        if window:
            records.append({"type": "window", "conversation": conversation,
                            "messages": [m.model_dump(mode="json") for m in window]})
    header = {"type": "header", "format": FORMAT, "version": VERSION, "owner": owner,
              "exported_at": utcnow().isoformat(),
              "embedding_model": _model(engine),
              "dim": engine.vector.dim}
    counts = Counter(r["type"] for r in records)
    lines = [json.dumps(header, ensure_ascii=False)]
    lines += [json.dumps({"type": r["type"], "owner": owner,
                          **{k: v for k, v in r.items() if k != "type"}}, ensure_ascii=False)
              for r in records]
    lines.append(json.dumps({"type": "end", "counts": dict(sorted(counts.items()))}))
    return lines


class _Document:
    """A parsed, checked export document."""

    def __init__(self, header: dict[str, Any], records: list[dict[str, Any]]) -> None:
        self.header = header
        self.owner: str = header["owner"]
        self.records = records

    def items(self, kind: str) -> list[Any]:
        return [r["item"] for r in self.records if r["type"] == kind]

    def windows(self) -> list[tuple[str, list[ChatMessage]]]:
        return [(r["conversation"], r["messages"]) for r in self.records
                if r["type"] == "window"]


def _json_records(lines: Iterable[str | bytes]) -> Iterator[tuple[int, dict[str, Any]]]:
    """The records of a document's lines with their line numbers, blank lines skipped;
    ``InvalidImport`` for a line too long, not JSON, or not an object with a type."""
    for n, raw in enumerate(lines, 1):
        if len(raw) > MAX_LINE_BYTES:
            raise InvalidImport(f"line {n} is longer than {MAX_LINE_BYTES} bytes")
        text = raw.decode("utf-8", "strict") if isinstance(raw, bytes) else raw
        if not text.strip():
            continue
        try:
            rec = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InvalidImport(f"line {n} is not JSON: {exc}") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("type"), str):
            raise InvalidImport(f"line {n} is not a record (an object with a type)")
        yield n, rec


def parse(lines: Iterable[str | bytes]) -> _Document:
    """Read and check a document: format, version, every record's owner and shape."""
    header: dict[str, Any] | None = None
    records: list[dict[str, Any]] = []
    end: dict[str, Any] | None = None
    for n, rec in _json_records(lines):
        if end is not None:
            raise InvalidImport(f"line {n}: a record after the end record")
        if header is None:
            header = _header(rec)
            continue
        if rec["type"] == "end":
            end = rec
            continue
        records.append(_record(rec, header["owner"], n))
    if header is None:
        raise InvalidImport("the document is empty: no header")
    if end is None:
        raise InvalidImport("the document has no end record: it may be truncated")
    counts = dict(Counter(r["type"] for r in records))
    if end.get("counts") != dict(sorted(counts.items())):
        raise InvalidImport(f"the end record counts {end.get('counts')!r}, the document "
                            f"holds {counts!r}: it is incomplete")
    _unique_ids(records)
    return _Document(header, records)


#: Record kinds whose ids share one space: a rule, a fact and a rule's or fact's closed
#: version are all items of L1; each other kind is a space of its own.
_ID_SPACES = {"rule": "item", "fact": "item", "version": "item", "pending": "pending",
              "memory": "memory", "memory_version": "memory version"}


def renamed(lines: Iterable[str | bytes], owner: str) -> list[str]:
    """The document of ``lines`` as the document of ``owner`` (``import --as``): every
    record's owner is ``owner``, and its memories and their versions have new ids, so
    the copy can live in the store beside the owner it was exported from (memory ids
    are unique in a store; rule, fact, pending and audit ids are an owner's own and
    stay).
    The copy is then read and checked by :func:`import_owner` like any document;
    ``InvalidImport`` here only for a line that is not a JSON record (``_json_records``)."""
    check.owner_id(owner)
    ids: dict[str, str] = {}

    def new(old: Any) -> Any:
        if not isinstance(old, str):
            return old
        return ids.setdefault(old, new_id())

    out: list[str] = []
    for _, rec in _json_records(lines):
        if "owner" in rec:
            rec["owner"] = owner
        item = rec.get("item")
        if isinstance(item, dict):
            if "owner" in item:
                item["owner"] = owner
            if rec.get("type") == "memory":
                item["id"] = new(item.get("id"))
            elif rec.get("type") == "memory_version":
                item["id"] = new(item.get("id"))
                item["memory_id"] = new(item.get("memory_id"))
                if item.get("superseded_by") is not None:
                    item["superseded_by"] = new(item["superseded_by"])
        out.append(json.dumps(rec, ensure_ascii=False))
    return out


def _unique_ids(records: list[dict[str, Any]]) -> None:
    """Every id once in its space, and every closed version closed: a document that
    would be imported as less than it says is refused, not silently shortened."""
    seen: dict[tuple[str, str], str] = {}
    for rec in records:
        if rec["type"] == "window":
            key = ("window", rec["conversation"])
            if key in seen:
                raise InvalidImport(f"conversation {rec['conversation']!r} has two window "
                                    "records in the document")
            seen[key] = "window"
            continue
        space = _ID_SPACES.get(rec["type"])
        if space is None:
            continue
        item = rec["item"]
        if rec["type"] == "version" and item.valid_to is None:
            raise InvalidImport(f"version {item.id!r} of a {item.kind} is not closed "
                                "(valid_to): the current one is its rule or fact record")
        key = (space, item.id)
        if key in seen:
            raise InvalidImport(f"{space} id {item.id!r} appears twice in the document "
                              f"(as {seen[key]} and {rec['type']})")
        seen[key] = rec["type"]


def _header(rec: dict[str, Any]) -> dict[str, Any]:
    if rec.get("type") != "header" or rec.get("format") != FORMAT:
        raise InvalidImport(f"not a {FORMAT} document (the first line is not its header)")
    if rec.get("version") != VERSION:
        raise InvalidImport(f"export version {rec.get('version')!r} is not supported "
                            f"(this library reads version {VERSION})")
    check.owner_id(rec.get("owner"))
    dim = rec.get("dim")
    if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
        raise InvalidImport(f"invalid embedding dimension {dim!r} in the header")
    return rec


def _naive_time(value: Any, path: str = "") -> str | None:
    """The path of the first time in ``value`` (a model, its models and lists) without a
    UTC offset, or ``None``."""
    if isinstance(value, datetime):
        return path if value.tzinfo is None else None
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            found = _naive_time(getattr(value, name), f"{path}.{name}" if path else name)
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _naive_time(v, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def _record(rec: dict[str, Any], owner: str, n: int) -> dict[str, Any]:
    kind = rec["type"]
    if rec.get("owner") != owner:
        raise InvalidImport(f"line {n}: a record of owner {rec.get('owner')!r} in the "
                            f"document of {owner!r}")
    if kind == "status":
        try:
            expires = rec.get("expires_at")
            at = None if expires is None else datetime.fromisoformat(expires)
        except (TypeError, ValueError):
            raise InvalidImport(f"line {n}: invalid expires_at") from None
        if not isinstance(rec.get("key"), str) or not isinstance(rec.get("value"), str):
            raise InvalidImport(f"line {n}: a status record needs a key and a value")
        if at is not None and at.tzinfo is None:
            raise InvalidImport(f"line {n}: expires_at has no UTC offset")
        return {"type": kind, "key": rec["key"], "value": rec["value"], "expires_at": at}
    if kind == "window":
        return _window(rec, n)
    model = _ITEMS.get(kind)
    if model is None:
        raise InvalidImport(f"line {n}: unknown record type {kind!r}")
    try:
        item = model.model_validate(rec.get("item"))
    except ValidationError as exc:
        raise InvalidImport(f"line {n}: invalid {kind}: {exc.errors()[0]['msg']}") from None
    naive = _naive_time(item)
    if naive is not None:
        raise InvalidImport(f"line {n}: {kind} {naive} has no UTC offset: every time of a "
                            "document says which zone it is in")
    out = {"type": kind, "item": item}
    if kind in ("memory", "memory_version") and item.owner != owner:
        raise InvalidImport(f"line {n}: a {kind} of owner {item.owner!r}")
    if kind == "memory":
        emb = rec.get("embedding")
        if emb is not None and not (isinstance(emb, list)
                                    and all(isinstance(x, (int, float)) for x in emb)):
            raise InvalidImport(f"line {n}: the embedding is not a list of numbers")
        out["embedding"] = emb
    return out


def _window(rec: dict[str, Any], n: int) -> dict[str, Any]:
    """A window record checked: a conversation id, and 1 to ``MAX_WINDOW`` messages,
    each a chat message whose time says its zone (their contents are checked against
    the importing store's limit before anything is written)."""
    conversation = rec.get("conversation")
    try:
        check.conversation_id(conversation)
    except InvalidInput as exc:
        raise InvalidImport(f"line {n}: a window record's {exc}") from None
    raw = rec.get("messages")
    if not isinstance(raw, list) or not 1 <= len(raw) <= check.MAX_WINDOW:
        raise InvalidImport(f"line {n}: a window record needs a list of 1 to "
                            f"{check.MAX_WINDOW} messages")
    messages = []
    for i, m in enumerate(raw):
        try:
            msg = ChatMessage.model_validate(m)
        except ValidationError as exc:
            raise InvalidImport(f"line {n}: invalid message {i} of window {conversation!r}: "
                                f"{exc.errors()[0]['msg']}") from None
        if msg.created_at.tzinfo is None:
            raise InvalidImport(f"line {n}: message {i} of window {conversation!r}: "
                                "created_at has no UTC offset")
        messages.append(msg)
    return {"type": "window", "conversation": conversation, "messages": messages}


async def import_owner(engine: Stores, lines: Iterable[str | bytes]) -> dict[str, int]:
    """Import a document into its owner, which must be empty; how many of each kind
    were written. Nothing is written when the document or the owner is refused; the
    writes are one unit of the owner (``StructuredStore.owner_unit``: on PostgreSQL one
    transaction, so an import refused or killed at any record leaves the owner as it
    was, and two imports of one owner take turns: the second finds it not empty).
    On Redis the document is written apart and moved in at once, so an import refused
    or killed at any record leaves the owner as it was too. On the in-process store an
    import refused at any record empties the owner again (``StructuredStore.clear``)."""
    doc = parse(lines)
    owner = doc.owner
    embeddings = await _embeddings(engine, doc)
    st, vec = engine.structured, engine.vector
    await vec._record_model(any(e is not None for e in embeddings))
    async with st.owner_unit(owner, vec) as (into, into_vec):
        snap = await st.load(owner)
        if snap.version or await vec.count(owner) or await st.conversations(owner):
            raise OwnerNotEmpty(f"owner {owner!r} holds data already; forget it first")
        try:
            return await _import(into, into_vec, doc, embeddings)
        except BaseException:
            if not st.atomic_units:  # the owner was empty: what was written goes again
                await vec.forget(owner)
                await st.clear(owner)
            raise


async def _import(st: StructuredStore, vector: VectorStore, doc: _Document,
                  embeddings: list[list[float] | None]) -> dict[str, int]:
    owner = doc.owner
    now = utcnow()
    status = [r for r in doc.records if r["type"] == "status"]
    writes = l1_writes(doc.items("rule"), doc.items("fact"), doc.items("version"), status,
                       doc.items("status_change"), doc.items("pending"), now)
    audit = [check_l1.audit_entry(e, st.max_content_bytes) for e in doc.items("audit")]
    memories = vector.check_restore(
        owner, list(zip(doc.items("memory"), embeddings, strict=True)))
    vector.check_versions(owner, doc.items("memory_version"))
    windows = [(conversation, [check.message(m, st.max_content_bytes) for m in messages])
               for conversation, messages in doc.windows()]
    # A rehearsal on the reference backend first: any write the target would refuse
    # (limits, ids, a broken chain) is refused here, before the target has anything.
    rehearsal = InMemoryStructuredStore(max_content_bytes=st.max_content_bytes)
    rehearsal.limits = st.limits
    for target in (rehearsal, st):
        # Each write is applied at the time it was first made, so times are kept.
        for at, op in writes:
            await target.apply(owner, [op], now=at)
    if audit:  # the decisions as they were taken (``apply`` refuses to write audit entries)
        await st._apply(owner, [AddAudit(e) for e in audit], now, None)
    for conversation, messages in windows:  # a window as large as what it held
        await st.append_messages(owner, conversation, messages, window=len(messages))
    written = await vector.restore(owner, memories, doc.items("memory_version"))
    counts = Counter(r["type"] for r in doc.records)
    counts["status"] = sum(isinstance(op, SetStatus) for _, op in writes)
    counts["memory"] = written
    return dict(sorted(counts.items()))


async def _embeddings(engine: Stores, doc: _Document) -> list[list[float] | None]:
    """The embeddings to store: the exported ones when this engine uses the model that
    made them, made again when it uses another, none without an embedder."""
    mems = doc.items("memory")
    given = [r.get("embedding") for r in doc.records if r["type"] == "memory"]
    if engine.vector.dim is None:  # a keyword-only store: the vectors are not kept
        return [None] * len(mems)
    if doc.header.get("embedding_model") == _model(engine):
        dim = engine.vector.dim
        for mem, emb in zip(mems, given, strict=True):
            if emb is not None and len(emb) != dim:
                raise InvalidImport(f"memory {mem.id}: an embedding of {len(emb)} dimensions "
                                    f"for a store of {dim}")
        return [None if e is None else [float(x) for x in e] for e in given]
    if engine.embedder is None:
        return [None] * len(mems)
    out: list[list[float] | None] = []
    for start in range(0, len(mems), _EMBED_BATCH):
        out += await engine.embedder.embed([m.content for m in mems[start:start + _EMBED_BATCH]])
    return out


def _model(engine: Stores) -> str | None:
    """The name of the model that makes this engine's embeddings (``None``: given ones)."""
    return engine.settings.embedding_model if engine.embedder is not None else None


#: Memories embedded per call when an import re-embeds.
_EMBED_BATCH = 64

