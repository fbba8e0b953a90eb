"""The threaded face of the owner actors (no Ray needed: it is a plain class)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from dream_memory_actor.runtime.threaded import threaded_actor


class _Counter:
    def __init__(self, start: int) -> None:
        self.n = start
        self.lock = asyncio.Lock()  # made on the actor's loop: usable there

    async def add(self, k: int) -> tuple[int, str]:
        async with self.lock:
            n = self.n
            await asyncio.sleep(0)  # a lost update would show if calls interleaved here
            self.n = n + k
        return self.n, threading.current_thread().name

    def peek(self) -> tuple[int, str]:
        return self.n, threading.current_thread().name

    async def fail(self) -> None:
        raise KeyError("from the loop")

    def _private(self) -> None:  # not served
        raise AssertionError


def test_coroutines_run_on_one_loop_thread_and_plain_methods_on_the_caller() -> None:
    cls = threaded_actor(_Counter)
    assert cls.__name__ == "_Counter" and not hasattr(cls, "_private")
    assert not any(asyncio.iscoroutinefunction(getattr(cls, m)) for m in ("add", "peek"))
    counter = cls(10)
    with ThreadPoolExecutor(8) as pool:  # as Ray's call threads would call it
        done = list(pool.map(lambda _: counter.add(1), range(200)))
    assert counter.peek()[0] == 210  # serialized on the loop: no lost update
    assert {thread for _, thread in done} == {"_Counter-loop"}
    assert counter.peek()[1] == threading.current_thread().name
    with pytest.raises(KeyError, match="from the loop"):
        counter.fail()
