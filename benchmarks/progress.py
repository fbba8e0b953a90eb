"""A one-line progress bar on standard error for long CLI work (benchmarks, imports).

Drawn only when standard error is a terminal (or ``DREAM_MEMORY_PROGRESS=1``),
so JSON on standard output and CI logs stay clean; redrawn at most 10 times a
second.
"""

from __future__ import annotations

import os
import sys
import time
from types import TracebackType
from typing import TextIO


class Progress:
    """``with Progress("ingest", total) as p: ... p.advance()``"""

    def __init__(self, what: str, total: int, stream: TextIO | None = None,
                 enabled: bool | None = None) -> None:
        self.what = what
        self.total = max(0, total)
        self.stream = stream or sys.stderr
        if enabled is None:
            enabled = (os.environ.get("DREAM_MEMORY_PROGRESS") == "1"
                       or bool(getattr(self.stream, "isatty", lambda: False)()))
        self.enabled = enabled
        self.done = 0
        self._t0 = time.monotonic()
        self._drawn = 0.0

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and (now - self._drawn >= 0.1 or self.done >= self.total):
            self._drawn = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        width = 30
        share = self.done / self.total if self.total else 1.0
        bar = "#" * int(width * min(share, 1.0))
        rate = self.done / max(now - self._t0, 1e-9)
        self.stream.write(f"\r{self.what}: [{bar:<{width}}] {self.done}/{self.total} "
                          f"{rate:,.0f}/s")
        self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.enabled and self.done:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()
