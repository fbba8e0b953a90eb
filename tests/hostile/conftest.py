"""The hostile-input suite prints, per door, how many inputs it tried and what came back."""

from __future__ import annotations

from typing import Any

from tests.hostile.inputs import TALLY


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TALLY.doors:
        terminalreporter.section("hostile input per door")
        for line in TALLY.report():
            terminalreporter.write_line(line)
