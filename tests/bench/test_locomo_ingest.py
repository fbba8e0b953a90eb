"""The locomo-ingest benchmark on a tiny made-up conversation, with no model."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from benchmarks import locomo_ingest
from dream_memory_actor.embedding.hashing import HashingEmbedder
from tests.bench.test_context_latency import conversation


class Hashing(HashingEmbedder):
    """The hashing test double in the disk cache's place (same constructor)."""

    def __init__(self, model: str, directory: str) -> None:
        super().__init__(32)


@pytest.mark.parametrize("batch", ["session", "conversation"])
async def test_every_turn_is_stored_each_round_on_a_fresh_schema(
        tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch, batch: str) -> None:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([conversation()]), encoding="utf-8")
    monkeypatch.setattr(locomo_ingest, "DiskCachedEmbedder", Hashing)
    args = argparse.Namespace(path=str(path), model="multilingual-e5-small",
                              cache_dir=str(tmp_path), ingest="store_many", batch=batch,
                              rounds=2, dsn=pg_dsn)
    out = await locomo_ingest.run(args)
    assert out["benchmark"] == "locomo-ingest" and out["turns"] == 4 and out["batch"] == batch
    assert len(out["rounds"]) == 2
    for r in out["rounds"]:  # a fresh schema each round: every turn stored again
        assert r["memories"] + r["merges"] == 4 and r["stores_per_s"] > 0
        assert r["cpu_share"] > 0 and len(r["load_average"]) == 3
    assert out["median_stores_per_s"] in [r["stores_per_s"] for r in out["rounds"]]
