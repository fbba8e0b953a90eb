"""The CLI progress bar: drawn on a terminal (or when asked), silent otherwise."""

from __future__ import annotations

import io

from benchmarks.progress import Progress


def test_draws_and_ends_with_a_newline() -> None:
    out = io.StringIO()
    with Progress("ingest", 4, stream=out, enabled=True) as p:
        for _ in range(4):
            p.advance()
    text = out.getvalue()
    assert "ingest: [" in text and "4/4" in text and text.endswith("\n")


def test_silent_when_not_a_terminal() -> None:
    out = io.StringIO()  # not a tty
    with Progress("ingest", 3, stream=out) as p:
        p.advance(3)
    assert out.getvalue() == ""
