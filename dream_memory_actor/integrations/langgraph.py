"""A LangGraph store over this memory: ``DreamMemoryStore``, a ``langgraph.store.base.BaseStore``.

A LangGraph agent that uses ``InMemoryStore`` today swaps in this store unchanged::

    from dream_memory_actor import MemorySettings
    from dream_memory_actor.integrations.langgraph import DreamMemoryStore

    store = DreamMemoryStore(MemorySettings(embedding_model="local:multilingual-e5-small"))
    graph = builder.compile(store=store)
    ...
    store.close()

How LangGraph's items map onto the memory:

* **Namespaces and owners.** One label of the namespace names the owner (a user or a
  team), by default the first: ``("alice", "memories")`` is owner ``alice``, sub-path
  ``("memories",)``. ``owner_label=1`` reads ``("memories", "alice")`` instead. The
  owner label must be a valid owner id. The other labels are kept with the item.
* **Items.** Each item is one semantic memory of its owner: the item's text (the
  ``index`` fields of LangGraph's index configuration, default the whole value as
  JSON) is the memory's content, embedded with the configured embedding model; the
  value, key and sub-path are kept in the memory's metadata (under ``langgraph``), so
  a value is limited by ``max_metadata_bytes``. Items are never merged with one
  another: a ``put`` on an existing key replaces that item (its ``created_at`` kept).
  ``index=False`` stores an item without an embedding (found by keyword only).
* **Search** is the memory's hybrid search (meaning, words, recency) over the owner's
  items under the namespace prefix, with LangGraph's ``query``, ``filter``, ``limit``
  and ``offset``; without a ``query`` the items come newest first, unscored. The
  ``filter`` is applied to the values with LangGraph's operators (``$eq``, ``$ne``,
  ``$gt``, ``$gte``, ``$lt``, ``$lte``, nested objects). A prefix must reach the owner
  label; ``list_namespaces`` and a search under a shorter prefix cover the owners
  named by ``owners=`` (there is no listing of every owner).
* **TTL** is not supported (``supports_ttl`` is False, as in LangGraph's own stores
  without a TTL configuration): a ``put`` with a ``ttl`` raises ``NotImplementedError``.

The store runs the memory on its own event-loop thread, so ``batch`` (from sync
nodes) and ``abatch`` (from async nodes) both work from any thread or loop. Finding
an item by key reads the owner's memories (pages of 1000); the metadata filter of
the memory's search and list is the place to narrow that read (``_owner_items``).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Coroutine, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
    from langgraph.store.base.embed import get_text_at_path, tokenize_path
except ImportError as exc:  # pragma: no cover - exercised via the extras message
    from ..errors import missing_dependency

    raise missing_dependency("langgraph", "langgraph") from exc

from .. import validation as check
from ..config import MemorySettings
from ..models import VectorMemory, utcnow
from ..text import content_hash

T = TypeVar("T")
META = "langgraph"
PAGE = 1000
#: The most memories of one owner read to find items (beyond: not looked at).
MAX_ITEMS = 100_000

__all__ = ["DreamMemoryStore"]


class DreamMemoryStore(BaseStore):
    """LangGraph's store interface over the memory (see the module docstring)."""

    supports_ttl = False

    def __init__(self, settings: MemorySettings | None = None, *, owner_label: int = 0,
                 owners: Sequence[str] = (), index: IndexConfig | None = None) -> None:
        if isinstance(owner_label, bool) or not isinstance(owner_label, int) or owner_label < 0:
            raise ValueError(f"owner_label must be a namespace position >= 0, got {owner_label!r}")
        self.settings = settings or MemorySettings()
        self.owner_label = owner_label
        self.owners = check.owner_ids(list(owners)) if owners else ()
        fields = (index or {}).get("fields") or ["$"]
        self._fields = [(f, tokenize_path(f)) for f in fields]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="dream-memory-langgraph")
        self._thread.start()
        self._engine: Any = None
        self._closed = False

    # -- the event loop of the store ------------------------------------------------

    def _submit(self, coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        if self._closed:
            coro.close()
            raise RuntimeError("this DreamMemoryStore was closed")
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def _open(self) -> Any:
        if self._engine is None:
            from ..engine import MemoryEngine

            self._engine = await MemoryEngine.open(self.settings)
        return self._engine

    def close(self) -> None:
        """Close the memory and stop the store's thread. Safe to call twice."""
        if self._closed:
            return

        async def shut() -> None:
            if self._engine is not None:
                await self._engine.close()

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(60)
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> DreamMemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- BaseStore ----------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        if _in_loop(self._loop):
            raise RuntimeError("DreamMemoryStore.batch called from the store's own loop")
        return asyncio.run_coroutine_threadsafe(self._run(ops), self._loop).result()

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await self._submit(self._run(list(ops)))

    async def _run(self, ops: list[Op]) -> list[Result]:
        engine = await self._open()
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(await self._get(engine, op))
            elif isinstance(op, SearchOp):
                results.append(await self._search(engine, op))
            elif isinstance(op, PutOp):
                await self._put(engine, op)
                results.append(None)
            elif isinstance(op, ListNamespacesOp):
                results.append(await self._namespaces(engine, op))
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        return results

    # -- namespaces ---------------------------------------------------------------------

    def _split(self, namespace: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        """The owner of ``namespace`` and its other labels."""
        if len(namespace) <= self.owner_label:
            raise InvalidNamespaceError(
                f"namespace {namespace!r} has no owner label at position {self.owner_label}")
        owner = check.owner_id(namespace[self.owner_label])
        rest = namespace[:self.owner_label] + namespace[self.owner_label + 1:]
        return owner, rest

    def _join(self, owner: str, rest: Sequence[str]) -> tuple[str, ...]:
        rest = tuple(rest)
        return (*rest[:self.owner_label], owner, *rest[self.owner_label:])

    def _prefix_owners(self, prefix: tuple[str, ...]) -> tuple[str, ...]:
        """The owners a namespace prefix covers."""
        if len(prefix) > self.owner_label and prefix[self.owner_label] != "*":
            return (check.owner_id(prefix[self.owner_label]),)
        if not self.owners:
            raise InvalidNamespaceError(
                f"the namespace prefix {prefix!r} does not name the owner (label "
                f"{self.owner_label}); give DreamMemoryStore(owners=[...]) to cover known owners")
        return self.owners

    # -- items --------------------------------------------------------------------------

    async def _owner_items(self, engine: Any, owner: str) -> list[VectorMemory]:
        """The owner's memories that are items of this store, newest first."""
        # With a metadata filter on list, ask for {"langgraph": ...} items only, here.
        out: list[VectorMemory] = []
        offset = 0
        while offset < MAX_ITEMS:
            page = await engine.list(owner, limit=PAGE, offset=offset)
            out.extend(m for m in page if isinstance(m.metadata.get(META), dict))
            if len(page) < PAGE:
                break
            offset += PAGE
        return out

    def _item(self, owner: str, memory: VectorMemory, score: float | None = None,
              scored: bool = False) -> Item:
        meta = memory.metadata[META]
        namespace = self._join(owner, meta.get("namespace", ()))
        created = _time(meta.get("created_at")) or memory.created_at
        args = dict(namespace=namespace, key=meta["key"], value=dict(meta.get("value", {})),
                    created_at=created, updated_at=memory.updated_at)
        if scored:
            return SearchItem(score=score, **args)
        return Item(**args)

    @staticmethod
    def _is(memory: VectorMemory, rest: tuple[str, ...], key: str) -> bool:
        meta = memory.metadata[META]
        return meta.get("key") == key and tuple(meta.get("namespace", ())) == rest

    async def _get(self, engine: Any, op: GetOp) -> Item | None:
        owner, rest = self._split(op.namespace)
        found = next((m for m in await self._owner_items(engine, owner)
                      if self._is(m, rest, op.key)), None)
        return None if found is None else self._item(owner, found)

    def _text(self, value: dict[str, Any], index: Any) -> str:
        paths = self._fields if index is None else [(f, tokenize_path(f)) for f in index]
        texts: list[str] = []
        for path, tokens in paths:
            if path == "$":
                texts.append(json.dumps(value, ensure_ascii=False, sort_keys=True))
            else:
                texts.extend(get_text_at_path(value, tokens))
        text = " ".join(t for t in texts if t and t.strip())
        return text or json.dumps(value, ensure_ascii=False, sort_keys=True)

    async def _put(self, engine: Any, op: PutOp) -> None:
        owner, rest = self._split(op.namespace)
        if not isinstance(op.key, str) or not op.key:
            raise ValueError("an item key must be a non-empty string")
        items = await self._owner_items(engine, owner)
        old = [m for m in items if self._is(m, rest, op.key)]
        if op.value is None:
            for m in old:
                await engine.delete(owner, m.id)
            return
        content = self._text(dict(op.value), op.index)
        # Items are never merged: a text another item already has gets the key appended.
        taken = {content_hash(m.content) for m in items if m not in old}
        if content_hash(content) in taken:
            content = f"{content} ({op.key})"
        created = old[0].metadata[META].get("created_at") if old else None
        meta = {META: {"namespace": list(rest), "key": op.key, "value": dict(op.value),
                       "created_at": created or utcnow().isoformat()}}
        embedding = None if op.index is False else await engine.embed(content)
        await engine.vector.store(owner, content, embedding=embedding, metadata=meta,
                                  threshold=1.0)
        for m in old:
            await engine.delete(owner, m.id)

    async def _search(self, engine: Any, op: SearchOp) -> list[SearchItem]:
        check.limit(op.limit)
        check.offset(op.offset)
        owners = self._prefix_owners(op.namespace_prefix)
        want = op.offset + op.limit
        if op.query:
            hits = []
            for owner in owners:  # one owner at a time: the prefix is matched per owner
                limit = check.MAX_SEARCH_LIMIT
                for h in await engine.search(owner, op.query, limit=limit):
                    if isinstance(h.memory.metadata.get(META), dict):
                        hits.append((h.score, owner, h.memory))
            hits.sort(key=lambda t: -t[0])
            found = [self._item(o, m, s, True) for s, o, m in hits]
        else:
            found = []
            for owner in owners:
                found += [self._item(o, m, None, True) for o, m in
                          ((owner, m) for m in await self._owner_items(engine, owner))]
            found.sort(key=lambda i: i.updated_at, reverse=True)
        prefix = op.namespace_prefix
        kept = [i for i in found if _under(i.namespace, prefix)
                and (not op.filter or _matches(i.value, op.filter))]
        return kept[op.offset:want]  # type: ignore[return-value]

    async def _namespaces(self, engine: Any, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        prefix = next((c.path for c in conditions if c.match_type == "prefix"), ())
        seen: set[tuple[str, ...]] = set()
        for owner in self._prefix_owners(tuple(prefix)):
            for m in await self._owner_items(engine, owner):
                seen.add(self._join(owner, m.metadata[META].get("namespace", ())))
        names = [ns for ns in seen if all(_does_match(c, ns) for c in conditions)]
        if op.max_depth is not None:
            names = list({ns[:op.max_depth] for ns in names})
        return sorted(names)[op.offset:op.offset + op.limit]


# -- LangGraph's matching rules, as its in-memory store applies them --------------------


def _in_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _time(value: object) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def _under(namespace: tuple[str, ...], prefix: tuple[str, ...]) -> bool:
    return len(namespace) >= len(prefix) and all(
        p == "*" or p == n for n, p in zip(namespace, prefix, strict=False))


def _does_match(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    pairs = (zip(namespace, path, strict=False) if condition.match_type == "prefix"
             else zip(reversed(namespace), reversed(path), strict=False))
    return all(p == "*" or n == p for n, p in pairs)


def _matches(value: dict[str, Any], filters: dict[str, Any]) -> bool:
    return all(_compare(value.get(k), v) for k, v in filters.items())


def _compare(item: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_operator(item, k, v) for k, v in wanted.items())
        return isinstance(item, dict) and all(_compare(item.get(k), v)
                                              for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (isinstance(item, (list, tuple)) and len(item) == len(wanted)
                and all(_compare(i, w) for i, w in zip(item, wanted, strict=False)))
    return bool(item == wanted)


def _operator(value: Any, operator: str, wanted: Any) -> bool:
    if operator == "$eq":
        return bool(value == wanted)
    if operator == "$ne":
        return bool(value != wanted)
    if operator in ("$gt", "$gte", "$lt", "$lte"):
        try:
            a, b = float(value), float(wanted)
        except (TypeError, ValueError):
            return False
        return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[operator]
    raise ValueError(f"Unsupported operator: {operator}")
