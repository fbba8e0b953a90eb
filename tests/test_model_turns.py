"""An in-process model embeds one call at a time, a waiting search query before waiting
memory texts (``embedding.turns.ModelTurns``)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.embedding import multilingual, open_embedder
from dream_memory_actor.embedding import turns as turns_module
from dream_memory_actor.embedding.base import InProcessEmbedder
from dream_memory_actor.embedding.calibration import IDENTITY
from dream_memory_actor.embedding.multilingual import E5Embedder, engines_for, idle_engines_for
from dream_memory_actor.embedding.turns import QUERY_STREAK, ModelTurns
from dream_memory_actor.errors import ConfigurationError, EmbeddingError


class _Gated(InProcessEmbedder):
    """A model whose first call blocks until ``release`` is set; records the calls' order."""

    model = "gated"
    dim = 2

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.order: list[str] = []
        self._lock = threading.Lock()

    def _loaded(self) -> tuple[Any, threading.Lock]:
        return None, self._lock

    def _encode(self, texts: list[str], query: bool) -> list[list[float]]:
        with self._lock:
            self.started.set()
            self.release.wait(5)
            self.order.append(texts[0])
        return [[1.0, 0.0] for _ in texts]


async def _started(model: _Gated) -> None:
    for _ in range(5000):  # 5 s at most
        if model.started.is_set():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the model was never called")


async def test_a_waiting_query_goes_before_waiting_memory_texts() -> None:
    model = _Gated()
    first = asyncio.create_task(model.embed(["store 0"]))
    await _started(model)
    later = []
    for i in range(1, 5):
        later.append(asyncio.create_task(model.embed([f"store {i}"])))
        await asyncio.sleep(0.005)
    query = asyncio.create_task(model._embed(["search"], True))
    await asyncio.sleep(0.005)
    model.release.set()
    await asyncio.gather(first, query, *later)
    assert model.order == ["store 0", "search", "store 1", "store 2", "store 3", "store 4"]


async def test_a_caller_that_leaves_its_place_passes_the_turn_on() -> None:
    turns = ModelTurns()
    ran: list[str] = []

    async def call(name: str, query: bool, hold: float = 0.0) -> None:
        async with turns.turn(query):
            ran.append(name)
            await asyncio.sleep(hold)

    holder = asyncio.create_task(call("holder", False, 0.02))
    await asyncio.sleep(0.001)
    gone = asyncio.create_task(call("gone", True))
    kept = asyncio.create_task(call("kept", False))
    await asyncio.sleep(0.001)
    gone.cancel()  # waiting: it leaves the queue
    await asyncio.gather(holder, kept)
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert ran == ["holder", "kept"]



async def test_a_turn_granted_to_a_caller_as_it_leaves_goes_on() -> None:
    turns = ModelTurns()
    await turns._acquire(False)  # held
    granted = asyncio.create_task(turns._acquire(True))
    after = asyncio.create_task(turns._acquire(False))
    await asyncio.sleep(0)  # both wait, the query first
    turns._release(False)  # the holder is done: the turn goes to the query ...
    granted.cancel()  # ... whose caller is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await granted
    await asyncio.wait_for(after, 1)  # it passed the turn on
    turns._release(False)
    assert turns._held == [0, 0]


async def test_a_call_waiting_past_its_timeout_is_an_embedding_error() -> None:
    model = _Gated()
    first = asyncio.create_task(model.embed(["store 0"]))
    await _started(model)
    model.timeout_s = 0.05  # for the calls from now on
    t0 = asyncio.get_running_loop().time()
    with pytest.raises(EmbeddingError, match=r"within 0\.05 s"):
        await model._embed(["search"], True)  # waits behind the blocked call
    assert asyncio.get_running_loop().time() - t0 < 1
    model.timeout_s = None
    later = asyncio.create_task(model.embed(["store 1"]))
    await asyncio.sleep(0.01)
    model.release.set()
    await asyncio.gather(first, later)
    assert model.order == ["store 0", "store 1"]  # the timed-out query left the queue


async def test_open_embedder_gives_a_local_model_the_settings_timeout() -> None:
    settings = MemorySettings(embedding_model="local:multilingual-e5-small",
                              embedding_timeout_s=7.5)
    embedder = await open_embedder(settings)
    assert embedder is not None and getattr(embedder.inner, "timeout_s", None) == 7.5


async def test_a_long_call_lets_a_waiting_query_in_between_its_turns() -> None:
    model = _Gated()
    model.chunk = 4
    bulk = asyncio.create_task(model.embed([f"import {i}" for i in range(10)]))
    await _started(model)  # its first turn runs
    query = asyncio.create_task(model._embed(["search"], True))
    await asyncio.sleep(0.01)
    model.release.set()
    vectors, _ = await asyncio.gather(bulk, query)
    assert len(vectors) == 10
    assert model.order == ["import 0", "search", "import 4", "import 8"]


async def test_memory_texts_get_the_model_after_a_few_query_turns() -> None:
    turns = ModelTurns()
    await turns._acquire(False)  # held
    order: list[str] = []

    async def wait(name: str, query: bool) -> None:
        await turns._acquire(query)
        order.append(name)
        turns._release(query)

    store = asyncio.create_task(wait("store", False))
    await asyncio.sleep(0)
    searches = [asyncio.create_task(wait(f"search {i}", True)) for i in range(QUERY_STREAK + 2)]
    await asyncio.sleep(0)
    turns._release(False)
    await asyncio.gather(store, *searches)
    assert order == [*(f"search {i}" for i in range(QUERY_STREAK)), "store",
                     f"search {QUERY_STREAK}", f"search {QUERY_STREAK + 1}"]


async def test_a_model_of_two_engines_holds_two_calls_at_once() -> None:
    turns = ModelTurns(slots=2)
    order: list[str] = []
    await turns._acquire(False)
    await asyncio.wait_for(turns._acquire(False), 1)  # the second engine: no wait
    assert turns._held == [0, 2]

    async def wait(name: str, query: bool) -> None:
        await turns._acquire(query)
        order.append(name)

    store = asyncio.create_task(wait("store", False))
    await asyncio.sleep(0)
    search = asyncio.create_task(wait("search", True))
    await asyncio.sleep(0)
    assert order == []  # both engines busy: both wait
    turns._release(False)  # one engine is free: the query takes it
    await asyncio.wait_for(search, 1)
    assert order == ["search"] and not store.done()
    turns._release(False)
    await asyncio.wait_for(store, 1)
    turns._release(True)
    turns._release(False)
    assert turns._held == [0, 0] and order == ["search", "store"]


async def test_an_engine_kept_for_queries_never_takes_a_memory_text() -> None:
    turns = ModelTurns(slots=1, query_slots=1)
    await turns._acquire(False)  # the shared engine: a store's text
    store = asyncio.create_task(turns._acquire(False))
    await asyncio.sleep(0)
    assert not store.done()  # the other engine is the queries'
    await asyncio.wait_for(turns._acquire(True), 1)  # a query does not wait
    assert turns._held == [1, 1]
    search = asyncio.create_task(turns._acquire(True))
    await asyncio.sleep(0)
    assert not search.done()  # both engines busy
    turns._release(True)  # the queries' engine: to the waiting query, not the store
    await asyncio.wait_for(search, 1)
    assert not store.done()
    turns._release(False)  # the shared engine: to the store
    await asyncio.wait_for(store, 1)
    turns._release(True)
    turns._release(False)
    assert turns._held == [0, 0]


class _TwoEngines(multilingual._NumpyEmbedder):
    """A model of two engines whose calls each wait, inside the engine, for the other."""

    model = "two-engines (test)"
    dim = 2
    engines = 2
    calibration = IDENTITY

    def __init__(self) -> None:
        self.both_inside = threading.Barrier(2, timeout=5)
        self.engines_used: set[int] = set()

    def _make(self) -> Any:
        return object()

    def _run(self, engine: Any, texts: list[str], query: bool) -> Any:
        self.engines_used.add(id(engine))
        self.both_inside.wait()  # broken (an error) unless the other call runs meanwhile
        return [[1.0, 0.0] for _ in texts]


async def test_a_model_of_two_engines_embeds_two_calls_at_once() -> None:
    model = _TwoEngines()
    try:
        a, b = await asyncio.gather(model.embed(["store"]), model._embed(["search"], True))
    finally:
        multilingual._engines.pop(model.model, None)
    assert a == b == [[1.0, 0.0]]
    assert len(model.engines_used) == 2


def test_e5_runs_as_many_engines_as_half_the_cores_hold_its_calls(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert engines_for(None, 8) == 1  # a call takes every core
    assert engines_for(1, 2) == 1 and engines_for(1, 4) == 2 and engines_for(2, 8) == 2
    assert engines_for(1, 64) == multilingual.MAX_ENGINES and engines_for(3, 4) == 1
    monkeypatch.setattr(multilingual, "_cpus", lambda: 4)
    for value, engines in (("1", 2), ("2", 1), ("1,1", 2), ("", 1), ("0", 1), ("x", 1)):
        monkeypatch.setenv("OMP_NUM_THREADS", value)  # "1": a Ray actor's
        assert E5Embedder().engines == engines, value
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert E5Embedder().query_engines == 1  # and one engine for queries alone
    assert E5Embedder().chunk == InProcessEmbedder.chunk
    monkeypatch.delenv("OMP_NUM_THREADS")
    one = E5Embedder()  # a call takes every core: one engine, no other
    assert (one.engines, one.query_engines, one.idle_engines, one.chunk) == (1, 0, 0, 1)


async def test_the_engines_setting_sets_a_local_numpy_model_s_engines() -> None:
    settings = MemorySettings(embedding_model="local:multilingual-e5-small",
                              embedding_engines=3)
    embedder = await open_embedder(settings)
    assert embedder is not None and getattr(embedder.inner, "engines", None) == 3
    default = await open_embedder(MemorySettings(embedding_model="local:multilingual-e5-small"))
    assert default is not None
    assert getattr(default.inner, "engines", None) == engines_for(
        multilingual._omp_threads(), multilingual._cpus())
    with pytest.raises(ConfigurationError, match="embedding_engines"):
        MemorySettings(embedding_engines=0)


class _QueryEngine(multilingual._NumpyEmbedder):
    """One engine for any call and one for queries; a memory text holds its engine until
    ``release`` is set."""

    model = "one engine and one for queries (test)"
    dim = 2
    engines = 1
    query_engines = 1
    calibration = IDENTITY

    def __init__(self) -> None:
        self.release = threading.Event()
        self.inside = threading.Event()

    def _make(self) -> Any:
        return object()

    def _run(self, engine: Any, texts: list[str], query: bool) -> Any:
        if not query:
            self.inside.set()
            self.release.wait(5)
        return [[0.0, 1.0] if query else [1.0, 0.0] for _ in texts]


async def test_a_search_query_does_not_wait_for_a_store_s_text() -> None:
    model = _QueryEngine()
    try:
        store = asyncio.create_task(model.embed(["store"]))
        for _ in range(5000):
            if model.inside.is_set():
                break
            await asyncio.sleep(0.001)
        second = asyncio.create_task(model.embed(["another store"]))
        query = await asyncio.wait_for(model._embed(["search"], True), 2)
        assert query == [[0.0, 1.0]]
        assert not store.done() and not second.done()  # the other store waits its turn
        model.release.set()
        assert await store == await second == [[1.0, 0.0]]
    finally:
        model.release.set()
        multilingual._engines.pop(model.model, None)


class _Threads(_QueryEngine):
    """One engine for any call and one for queries, recording the threads each runs on."""

    model = "threads of engines (test)"

    def __init__(self) -> None:
        super().__init__()
        self.threads: dict[int, set[int]] = {}

    def _run(self, engine: Any, texts: list[str], query: bool) -> Any:
        self.threads.setdefault(id(engine), set()).add(threading.get_ident())
        return [[1.0, 0.0] for _ in texts]


async def test_each_engine_runs_its_calls_on_one_thread_of_its_own() -> None:
    """OpenMP gives every thread that calls it a team of its own: an engine called from
    any worker thread would leave the process more team threads than cores."""
    model = _Threads()
    try:
        for _ in range(3):
            await asyncio.gather(*(model.embed([f"text {i}"]) for i in range(8)),
                                 *(model._embed([f"query {i}"], True) for i in range(8)))
    finally:
        multilingual._engines.pop(model.model, None)
    assert len(model.threads) == 2  # both engines ran ...
    assert all(len(t) == 1 for t in model.threads.values())  # ... each on one thread
    assert len(set.union(*model.threads.values())) == 2  # of its own


async def test_a_store_s_text_never_runs_on_the_query_engine() -> None:
    """Even where its own engine is still held by a call that timed out, a memory text
    waits for that engine instead of taking the one kept for queries."""
    model = _QueryEngine()
    model.release.set()  # memory texts do not block inside the engine here
    used: dict[bool, set[int]] = {True: set(), False: set()}
    run = model._run

    def recording(engine: Any, texts: list[str], query: bool) -> Any:
        used[query].add(id(engine))
        return run(engine, texts, query)

    model._run = recording  # type: ignore[method-assign]
    try:
        pool = model._loaded()
        held = pool[0].lock
        held.acquire()  # the memory engine, still running a call that timed out
        store = asyncio.create_task(model.embed(["store"]))
        await asyncio.sleep(0.05)
        assert not store.done()  # it waits for its engine ...
        assert await asyncio.wait_for(model._embed(["search"], True), 2) == [[0.0, 1.0]]
        held.release()  # ... and runs there once it is free
        assert await asyncio.wait_for(store, 2) == [[1.0, 0.0]]
        assert used[False] == {id(pool[0].model)} and used[True] == {id(pool[1].model)}
    finally:
        multilingual._engines.pop(model.model, None)


async def test_memory_texts_take_the_idle_engines_only_while_no_query_comes() -> None:
    turns = ModelTurns(slots=1, query_slots=1, idle_slots=1)
    await asyncio.wait_for(turns._acquire(False), 1)
    await asyncio.wait_for(turns._acquire(False), 1)  # no query yet: the idle engine too
    third = asyncio.create_task(turns._acquire(False))
    await asyncio.sleep(0)
    assert not third.done()  # every engine memory texts may take is busy
    await asyncio.wait_for(turns._acquire(True), 1)  # the query's own engine is free
    assert turns._held == [1, 2]
    turns._release(False)  # a query came: the idle engine is not given again ...
    await asyncio.sleep(0)
    assert not third.done()
    turns._release(False)  # ... only the engine for any call
    await asyncio.wait_for(third, 1)
    turns._release(True)
    assert turns._held == [0, 1]
    turns._last_query -= turns_module.QUIET_S  # no query for QUIET_S seconds
    await asyncio.wait_for(turns._acquire(False), 1)  # the idle engine again
    assert turns._held == [0, 2]
    turns._release(False)
    turns._release(False)


class _IdleEngine(multilingual._NumpyEmbedder):
    """One engine for any call, one for queries and one idle; memory texts wait inside
    the engine for each other."""

    model = "one engine, one for queries, one idle (test)"
    dim = 2
    engines = 1
    query_engines = 1
    idle_engines = 1
    calibration = IDENTITY

    def __init__(self) -> None:
        self.both_inside = threading.Barrier(2, timeout=5)
        self.engines_used: dict[int, str] = {}

    def _make(self) -> Any:
        return object()

    def _run(self, engine: Any, texts: list[str], query: bool) -> Any:
        self.engines_used[id(engine)] = "query" if query else "memory"
        if not query:
            self.both_inside.wait()  # broken (an error) unless the other runs meanwhile
        return [[1.0, 0.0] for _ in texts]


async def test_two_memory_texts_embed_at_once_on_the_engines_a_query_does_not_need() -> None:
    model = _IdleEngine()
    try:
        await asyncio.gather(model.embed(["store a"]), model.embed(["store b"]))
        pool = multilingual._engines[model.model]
        await model._embed(["search"], True)
    finally:
        multilingual._engines.pop(model.model, None)
    shared, kept, idle = (id(engine.model) for engine in pool)
    assert model.engines_used == {shared: "memory", idle: "memory", kept: "query"}


def test_e5_takes_the_cores_its_engines_leave_idle_unless_the_setting_sets_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert idle_engines_for(None, 2, 1) == 0  # a call takes every core
    assert idle_engines_for(1, 2, 1) == 1 and idle_engines_for(1, 4, 2) == 2
    assert idle_engines_for(1, 64, 4) == 0 and idle_engines_for(2, 4, 1) == 1
    monkeypatch.setattr(multilingual, "_cpus", lambda: 2)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a Ray actor's
    assert E5Embedder().idle_engines == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert E5Embedder().idle_engines == 0


async def test_the_engines_setting_leaves_no_idle_engines(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(multilingual, "_cpus", lambda: 2)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    chosen = await open_embedder(MemorySettings(
        embedding_model="local:multilingual-e5-small", embedding_engines=1))
    default = await open_embedder(MemorySettings(embedding_model="local:multilingual-e5-small"))
    assert chosen is not None and getattr(chosen.inner, "idle_engines", None) == 0
    assert default is not None and getattr(default.inner, "idle_engines", None) == 1
