"""A LangGraph store over this memory: ``DreamMemoryStore``, a ``langgraph.store.base.BaseStore``.

A LangGraph agent that uses ``InMemoryStore`` today swaps in this store unchanged::

    from dream_memory_actor import MemorySettings
    from dream_memory_actor.integrations.langgraph import DreamMemoryStore

    store = DreamMemoryStore(MemorySettings(embedding_model="local:multilingual-e5-small"))
    graph = builder.compile(store=store)
    ...
    store.close()

How LangGraph's items map onto the memory:

* **A keyspace of their own.** Items are key-value records of their namespace, kept in
  the store's own keyspace of the configured backend (PostgreSQL schema
  ``<postgres_schema>_<keyspace>``, Redis prefix ``<redis_prefix>_<keyspace>``; the
  in-process backend: the store's own memory). No other door sees them, so an item
  is never merged with another door's memory nor erased by another door's delete,
  and items are never merged with one another.
* **Owners.** By default every item is a record of one owner of that keyspace
  (``items``), so any namespace works, as in LangGraph's own stores.
  ``owner_label=N`` makes label N of each namespace the owner (a user or a team; it
  must then be a valid owner id): each owner's items are searched, counted and
  locked apart, and a prefix that does not name the owner covers the owners given
  by ``owners=``.
* **Records.** An item is one memory (its *head*: the value, key, namespace and
  ``created_at`` in the metadata, so a value is JSON, without NaN or NUL, within
  ``max_metadata_bytes``; another is ``InvalidMetadata`` naming the item, before
  anything is written) and, when its index fields give several texts, one more
  memory per further text, each embedded on its own; a search scores an item by its
  best text, as LangGraph's stores do. A ``put`` writes the item's new records and
  then removes the old ones (a reader between the two sees the newest head;
  ``created_at`` is kept).
* **Embedding.** ``index={"dims": ..., "embed": ..., "fields": [...]}`` is LangGraph's
  index configuration: ``embed`` goes through LangGraph's ``ensure_embeddings`` (an
  ``Embeddings``, a function, or a ``"provider:model"`` string), and its name and
  ``dims`` are recorded with the keyspace's data like any embedding model. Without
  ``embed`` the settings' ``embedding_model`` embeds (and its recorded model is
  used, as at every door); with neither, the store is keyword-only.
  ``put(..., index=False)`` stores an item without an embedding; ``index=[...]``
  chooses its fields.
* **Search** is the memory's search over the items under the namespace prefix, with
  LangGraph's ``query``, ``filter``, ``limit`` and ``offset``. It ranks with
  ``weights``; by default LangGraph's ranking: with an embedding, the vector signal
  alone, and the score is the cosine similarity of the query and the item's best
  text (as LangGraph's stores report it); keyword-only, the keyword signal. Items
  the query does not score (no embedding, or no word in common) follow, newest
  first, with no score, so a search returns what a search without a query would,
  ranked. Without a ``query`` the items come newest first, unscored. ``filter`` is
  applied to the values with LangGraph's operators (``$eq``, ``$ne``, ``$gt``,
  ``$gte``, ``$lt``, ``$lte``, nested objects).
* **TTL** is not supported (``supports_ttl`` is False, as in LangGraph's stores without
  a TTL configuration): a ``put`` with a ``ttl`` raises ``NotImplementedError``.

The store runs the memory on its own event-loop thread, so ``batch`` (from sync
nodes) and ``abatch`` (from async nodes) both work from any thread or loop; the
memory is opened once, on first use, and closed with the store. Writes of one
store are serialised per owner; two processes writing one key at once can leave two
heads, and readers then see the newest, which the next ``put`` of that key cleans up.
Listing namespaces and searching without a query read the heads under the prefix in
pages of 1000.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import threading
from collections import defaultdict
from collections.abc import AsyncIterator, Coroutine, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

try:
    from langgraph.store.base import (
        NOT_PROVIDED,
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
    from langgraph.store.base.embed import ensure_embeddings, get_text_at_path, tokenize_path
except ImportError as exc:  # pragma: no cover - exercised via the extras message
    from ..errors import missing_dependency

    raise missing_dependency("langgraph", "langgraph") from exc

from .. import validation as check
from ..config import MemorySettings
from ..errors import InvalidFilter, InvalidInput, InvalidMetadata
from ..models import SearchHit, VectorMemory, utcnow
from ..scoring import Weights
from ..storage.dedup import Cuts

T = TypeVar("T")
#: The head's record of the item (namespace, key, value, created_at).
ITEM = "lg"
#: On every record of an item: the item's id (a hash of namespace and key) and which
#: of its texts the record holds (0: the head).
ITEM_ID, PART = "lg:id", "lg:part"
#: Namespace labels kept on every record for the backends to filter on, as ``lg:0`` ...
LABELS = 15
PAGE = 1000
#: The owner of every item when namespaces do not name owners (``owner_label=None``).
ITEMS_OWNER = "items"

__all__ = ["DreamMemoryStore"]


class LangGraphEmbedder:
    """LangGraph's embeddings (``index["embed"]``) as this package's embedder."""

    def __init__(self, embeddings: Any, dims: int, model: str) -> None:
        self.embeddings = embeddings
        self.dim = dims
        self.model = model

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [list(v) for v in await self.embeddings.aembed_documents(list(texts))]

    async def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        return [list(await self.embeddings.aembed_query(t)) for t in texts]


def embeddings_name(embed: Any) -> str:
    """How the keyspace records LangGraph's ``embed``: the model string as given, else
    ``langgraph:<module>.<class or function>``."""
    if isinstance(embed, str):
        return embed
    kind = embed if callable(embed) and not hasattr(embed, "embed_documents") else type(embed)
    return f"langgraph:{kind.__module__}.{getattr(kind, '__qualname__', kind.__name__)}"


class DreamMemoryStore(BaseStore):
    """LangGraph's store interface over the memory (see the module docstring)."""

    supports_ttl = False

    def __init__(self, settings: MemorySettings | None = None, *,
                 index: IndexConfig | None = None, owner_label: int | None = None,
                 owners: Sequence[str] = (), weights: Weights | None = None,
                 keyspace: str = "langgraph") -> None:
        if owner_label is not None and (isinstance(owner_label, bool)
                                        or not isinstance(owner_label, int) or owner_label < 0):
            raise ValueError(f"owner_label must be a namespace position >= 0, got {owner_label!r}")
        settings = settings or MemorySettings()
        self.keyspace = keyspace
        self.settings = settings.model_copy(update={
            "postgres_schema": f"{settings.postgres_schema}_{keyspace}",
            "redis_prefix": f"{settings.redis_prefix}_{keyspace}"})
        MemorySettings.model_validate(self.settings.model_dump())  # the keyspace's names
        self.owner_label = owner_label
        self.owners = check.owner_ids(list(owners)) if owners else ()
        self.index: dict[str, Any] = dict(index or {})
        embed = self.index.get("embed")
        self._embedder: LangGraphEmbedder | None = None
        #: LangGraph's embeddings of ``index["embed"]`` (``None`` without), as its stores
        #: expose them.
        self.embeddings: Any = None
        if embed is not None:
            dims = self.index.get("dims")
            if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
                raise ValueError(f"index['dims'] must be a positive int with 'embed', got {dims!r}")
            embeddings = ensure_embeddings(embed)
            self._embedder = LangGraphEmbedder(embeddings, dims, embeddings_name(embed))
            self.index["embed"] = self.embeddings = embeddings
            self.settings = self.settings.model_copy(update={"embedding_model": None})
        #: LangGraph's index configuration, as its stores keep it (``None``: no index).
        self.index_config: IndexConfig | None = self.index or None  # type: ignore[assignment]
        fields = self.index.get("fields") or ["$"]
        self._fields = [(f, tokenize_path(f)) for f in fields]
        self._weights = weights
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="dream-memory-langgraph")
        self._thread.start()
        self._engine: Any = None
        self._opening = asyncio.Lock()
        self._writing: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._closed = False

    # -- the event loop and the memory of the store -------------------------------------

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self._closed:
            coro.close()
            raise RuntimeError("this DreamMemoryStore was closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _open(self) -> Any:
        async with self._opening:  # concurrent first calls open one memory
            if self._engine is None:
                from ..engine import MemoryEngine

                self._engine = await MemoryEngine.open(self.settings, embedder=self._embedder)
            return self._engine

    def close(self) -> None:
        """Close the memory and stop the store's thread. Safe to call twice."""
        if self._closed:
            return

        async def shut() -> None:
            async with self._opening:
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
        return self._submit(self._run(ops)).result()

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.wrap_future(self._submit(self._run(list(ops))))

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

    # -- namespaces and owners ----------------------------------------------------------

    def _owner(self, namespace: tuple[str, ...]) -> str:
        if self.owner_label is None:
            return ITEMS_OWNER
        if len(namespace) <= self.owner_label:
            raise InvalidNamespaceError(
                f"namespace {namespace!r} has no owner label at position {self.owner_label}")
        return check.owner_id(namespace[self.owner_label])

    def _prefix_owners(self, prefix: tuple[str, ...]) -> tuple[str, ...]:
        """The owners a namespace prefix covers."""
        if self.owner_label is None:
            return (ITEMS_OWNER,)
        if len(prefix) > self.owner_label and prefix[self.owner_label] != "*":
            return (check.owner_id(prefix[self.owner_label]),)
        if not self.owners:
            raise InvalidNamespaceError(
                f"the namespace prefix {prefix!r} does not name the owner (label "
                f"{self.owner_label}); give DreamMemoryStore(owners=[...]) to cover known owners")
        return self.owners

    @staticmethod
    def _labels(namespace: Sequence[str]) -> dict[str, str]:
        """The labels a backend filters on (``lg:0`` ...), leaving out any too long to
        compare (those are checked on the items read)."""
        return {f"lg:{i}": label for i, label in enumerate(namespace[:LABELS])
                if len(label.encode("utf-8")) <= check.l2.MAX_FILTER_VALUE_BYTES}

    def _prefix_filter(self, prefix: Sequence[str]) -> dict[str, Any]:
        return {k: v for k, v in self._labels(prefix).items() if v != "*"}

    # -- records ------------------------------------------------------------------------

    @staticmethod
    def _item_id(namespace: Sequence[str], key: str) -> str:
        return hashlib.sha256(json.dumps([list(namespace), key]).encode()).hexdigest()[:32]

    @staticmethod
    def _record(memory: VectorMemory) -> dict[str, Any] | None:
        """The head's item record, or ``None`` for a memory that is not a head."""
        rec = memory.metadata.get(ITEM)
        if (memory.metadata.get(PART) == 0 and isinstance(rec, dict)
                and isinstance(memory.metadata.get(ITEM_ID), str)
                and isinstance(rec.get("key"), str) and isinstance(rec.get("namespace"), list)
                and isinstance(rec.get("value"), dict)):
            return rec
        return None

    def _item(self, memory: VectorMemory, score: float | None = None,
              scored: bool = False) -> Item:
        rec = self._record(memory)
        assert rec is not None
        args = dict(namespace=tuple(rec["namespace"]), key=rec["key"],
                    value=dict(rec["value"]), created_at=_time(rec.get("created_at"))
                    or memory.created_at, updated_at=memory.updated_at)
        if scored:
            return SearchItem(score=score, **args)
        return Item(**args)

    async def _records(self, engine: Any, owner: str, item_id: str, *, heads: bool = False
                       ) -> list[VectorMemory]:
        """The records of one item (its well-formed heads only, with ``heads``), newest
        first."""
        where: dict[str, Any] = {ITEM_ID: item_id}
        if heads:
            where[PART] = 0
        out: list[VectorMemory] = []
        async for page in self._pages(engine, owner, where):
            out += [m for m in page if not heads or self._record(m) is not None]
        return out

    @staticmethod
    async def _pages(engine: Any, owner: str, where: dict[str, Any]
                     ) -> AsyncIterator[list[VectorMemory]]:
        offset = 0
        while True:
            page = await engine.vector.list(owner, limit=PAGE, offset=offset, filter=where)
            yield page
            if len(page) < PAGE:
                return
            offset += PAGE

    async def _heads(self, engine: Any, owner: str, prefix: Sequence[str]
                     ) -> AsyncIterator[VectorMemory]:
        """The heads under ``prefix`` (as far as the backend filters), newest first."""
        async for page in self._pages(engine, owner, {**self._prefix_filter(prefix), PART: 0}):
            for memory in page:
                if self._record(memory) is not None:
                    yield memory

    # -- get and put --------------------------------------------------------------------

    async def _get(self, engine: Any, op: GetOp) -> Item | None:
        owner = self._owner(op.namespace)
        for head in await self._records(engine, owner, self._item_id(op.namespace, op.key),
                                        heads=True):
            rec = self._record(head)
            if rec is not None and tuple(rec["namespace"]) == op.namespace \
                    and rec["key"] == op.key:
                return self._item(head)
        return None

    def _texts(self, value: dict[str, Any], index: Any) -> list[str]:
        """The texts of ``value`` to embed: its index fields' texts, in order."""
        paths = self._fields if index is None else [(f, tokenize_path(f)) for f in index]
        texts: list[str] = []
        for path, tokens in paths:
            if path == "$":
                texts.append(json.dumps(value, ensure_ascii=False, sort_keys=True))
            else:
                texts.extend(t for t in get_text_at_path(value, tokens) if isinstance(t, str))
        return [t for t in texts if t.strip()]

    async def _put(self, engine: Any, op: PutOp) -> None:
        # The public put checks the namespace as LangGraph does (a root label of
        # "langgraph" is LangGraph's own); a PutOp given to batch is taken as it is.
        if not isinstance(op.namespace, tuple) or not all(
                isinstance(label, str) for label in op.namespace):
            raise InvalidNamespaceError(f"a namespace is a tuple of str, got {op.namespace!r}")
        if not isinstance(op.key, str) or not op.key:
            raise InvalidInput("an item key must be a non-empty string")
        ttl: object = op.ttl
        if op.value is not None and ttl is not None and ttl is not NOT_PROVIDED:
            raise NotImplementedError(f"TTL is not supported by {type(self).__name__}")
        if op.value is not None and not isinstance(op.value, dict):
            raise InvalidInput(f"an item value must be a dict, got {type(op.value).__name__}")
        owner = self._owner(op.namespace)
        item_id = self._item_id(op.namespace, op.key)
        async with self._writing[owner]:
            old = await self._records(engine, owner, item_id)
            if op.value is not None:
                await self._write(engine, owner, item_id, op, old)
            for memory in old:
                await engine.vector.delete(owner, memory.id)

    async def _write(self, engine: Any, owner: str, item_id: str, op: PutOp,
                     old: list[VectorMemory]) -> None:
        heads = [r for r in map(self._record, old) if r is not None]
        created = heads[0].get("created_at") if heads else None
        common = {ITEM_ID: item_id, **self._labels(op.namespace)}
        record = {"namespace": list(op.namespace), "key": op.key, "value": dict(op.value or {}),
                  "created_at": created or utcnow().isoformat()}
        head: dict[str, Any] = {**common, PART: 0, ITEM: record}
        try:  # checked before anything is embedded or written, as the memory stores it
            head = check.metadata(head, engine.vector.limits)
        except InvalidMetadata as exc:
            raise InvalidMetadata(f"item {op.key!r} of {op.namespace!r} is kept as a "
                                  f"memory's metadata, and {exc}") from None
        value = head[ITEM]["value"]
        texts = [] if op.index is False else self._texts(value, op.index)
        contents = texts or [self._texts(value, ["$"])[0]]
        items = [{"content": contents[0], "metadata": head}]
        items += [{"content": t, "metadata": {**common, PART: i}}
                  for i, t in enumerate(contents[1:], 1)]
        vectors = await engine.embed_many(texts) if texts else None
        await engine.vector.store_many(owner, items, embeddings=vectors, threshold=Cuts.off())

    # -- search and namespaces ----------------------------------------------------------

    def _ranking(self, engine: Any) -> Weights:
        if self._weights is not None:
            return self._weights
        if engine.embedder is not None:
            return Weights(vector=1.0, keyword=0.0, time=0.0,
                           calibration=engine.weights.calibration)
        return Weights(vector=0.0, keyword=1.0, time=0.0)

    async def _search(self, engine: Any, op: SearchOp) -> list[SearchItem]:
        check.limit(op.limit)
        check.offset(op.offset)
        prefix = tuple(op.namespace_prefix)
        owners = self._prefix_owners(prefix)
        want = op.offset + op.limit

        def wanted(memory: VectorMemory, score: float | None) -> SearchItem | None:
            item = self._item(memory, score, True)
            if _under(item.namespace, prefix) and (not op.filter
                                                   or _matches(item.value, op.filter)):
                return item  # type: ignore[return-value]
            return None

        seen: set[str] = set()
        scored: list[SearchItem] = []
        for owner in owners if op.query else ():
            assert op.query is not None
            for item_id, score, head in await self._scored(engine, owner, op.query, prefix):
                seen.add(item_id)
                if head is None:
                    heads = await self._records(engine, owner, item_id, heads=True)
                    head = heads[0] if heads else None
                item = None if head is None else wanted(head, score)
                if item is not None:
                    scored.append(item)
        scored.sort(key=lambda i: -(i.score or 0.0))
        rest: list[SearchItem] = []
        for owner in owners if len(scored) < want else ():
            async for memory in self._heads(engine, owner, prefix):
                if memory.metadata[ITEM_ID] in seen:
                    continue
                seen.add(memory.metadata[ITEM_ID])
                item = wanted(memory, None)
                if item is not None:
                    rest.append(item)
                if len(owners) == 1 and len(scored) + len(rest) >= want:
                    break  # heads come newest first: the rest are not needed
        rest.sort(key=lambda i: i.updated_at, reverse=True)
        return (scored + rest)[op.offset:want]

    async def _scored(self, engine: Any, owner: str, query: str, prefix: Sequence[str]
                      ) -> list[tuple[str, float, VectorMemory | None]]:
        """The items the query scores, best first: item id, the score of its best
        record, and its head when the search found it."""
        weights = self._ranking(engine)
        vector_only = weights.keyword == 0.0 and weights.time == 0.0
        hits: list[SearchHit] = await engine.vector.search(
            owner, query, limit=check.MAX_SEARCH_LIMIT, weights=weights,
            vector_k=check.MAX_SEARCH_LIMIT, keyword_k=check.MAX_SEARCH_LIMIT,
            embed=engine.embed_query, filter=self._prefix_filter(prefix) or None)
        best: dict[str, float] = {}
        heads: dict[str, VectorMemory] = {}
        for h in hits:
            item_id = h.memory.metadata.get(ITEM_ID)
            if not isinstance(item_id, str):
                continue
            if self._record(h.memory) is not None:
                heads[item_id] = h.memory
            if vector_only and h.cosine is None:
                continue  # not embedded: it follows, unscored
            score = h.cosine if vector_only else h.score
            assert score is not None
            if item_id not in best or score > best[item_id]:
                best[item_id] = score
        return sorted(((i, s, heads.get(i)) for i, s in best.items()), key=lambda t: -t[1])

    async def _namespaces(self, engine: Any, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        prefix = next((tuple(c.path) for c in conditions if c.match_type == "prefix"), ())
        seen: set[tuple[str, ...]] = set()
        for owner in self._prefix_owners(prefix):
            async for memory in self._heads(engine, owner, prefix):
                rec = self._record(memory)
                assert rec is not None
                seen.add(tuple(rec["namespace"]))
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
    if condition.match_type == "prefix":
        return _under(namespace, path)
    return _under(namespace[::-1], path[::-1])


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
    raise InvalidFilter(f"Unsupported operator: {operator}")
