"""Pure functions of a store: insert or merge, and the document-frequency change."""

from __future__ import annotations

from dream_memory_actor.storage.dedup import df_delta


def test_df_delta_counts_distinct_terms_of_insert_merge_and_delete() -> None:
    assert df_delta(None, "deploy helm helm") == {"deploy": 1, "helm": 1}
    assert df_delta("deploy helm", "Deploy argo") == {"helm": -1, "argo": 1}
    assert df_delta("deploy helm", None) == {"deploy": -1, "helm": -1}
    assert df_delta("same text", "same text") == {}
    assert df_delta(None, "系统部署") == {"系统": 1, "统部": 1, "部署": 1}
