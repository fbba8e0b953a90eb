"""docs/scaling.md's capacity model: written from the kept results, and nothing typed."""

from __future__ import annotations

import copy
import re
from pathlib import Path

from benchmarks.capacity import DOC, block, current
from benchmarks.report import RESULTS, load_results

ROOT = Path(__file__).resolve().parents[2]
UNIT = re.compile(r"\d[\d,.]*\s*(ms|s|GiB|GB|MB|kB|B|x|%|h|min|days|/s)\b")


def test_scaling_doc_holds_what_the_kept_results_give() -> None:
    """A figure typed into the block, or results changed without
    ``python -m benchmarks capacity``, fails here."""
    text = (ROOT / DOC).read_text(encoding="utf-8")
    got = current(text)
    assert got is not None, f"{DOC} lost its capacity markers"
    assert got == "\n" + "\n".join(block(load_results(ROOT / RESULTS))) + "\n"


def test_every_cited_result_file_is_kept() -> None:
    text = (ROOT / DOC).read_text(encoding="utf-8")
    cited = set(re.findall(r"`([\w.-]+\.json)`", text))
    assert cited
    for name in cited:
        assert (ROOT / RESULTS / name).is_file(), name


def test_the_prose_quotes_no_figure_of_its_own() -> None:
    """Outside the block, figures appear only inside the names of its rows."""
    text = (ROOT / DOC).read_text(encoding="utf-8")
    inside = current(text) or ""
    prose = text.replace(inside, "")
    labels = [line.split("|")[1].strip() for line in inside.splitlines()
              if line.startswith("| ") and not line.startswith("| ---")]
    prose = re.sub(r"\*\*[^*\n]+\*\*", "", prose)  # bold headings of list items
    italic = re.compile(r"\*([^*\s](?:[^*]*[^*\s])?)\*")
    for quoted in italic.findall(prose):
        name = " ".join(quoted.split())
        if UNIT.search(name):
            assert any(name in label for label in labels), name
    bare = re.sub(r"`[^`]+`", "", italic.sub("", prose))
    assert not UNIT.search(bare), UNIT.search(bare)


def test_the_block_follows_the_results() -> None:
    results = load_results(ROOT / RESULTS)
    changed = copy.deepcopy(results)
    _, data = changed["footprint"][-1]
    data["sharded"]["bytes_per_live_owner"] *= 2
    assert block(changed) != block(results)
