"""Pure functions of a store: insert or merge, and the document-frequency change."""

from __future__ import annotations

from dream_memory_actor.storage.dedup import df_delta, merge_target


def test_merge_target_prefers_a_near_vector_then_the_same_text() -> None:
    calls: list[int] = []

    def same_text() -> str | None:
        calls.append(1)
        return "m-text"

    assert merge_target(("m-vec", 0.9), 0.85, same_text) == ("m-vec", 0.9)
    assert calls == []  # the text is not looked up when the vector decides
    assert merge_target(("m-vec", 0.85), 0.85, same_text) == ("m-text", None)  # strictly above
    assert merge_target(None, 0.85, same_text) == ("m-text", None)
    assert merge_target(("m-vec", 0.2), 0.85, lambda: None) is None


def test_df_delta_counts_distinct_terms_of_insert_merge_and_delete() -> None:
    assert df_delta(None, "deploy helm helm") == {"deploy": 1, "helm": 1}
    assert df_delta("deploy helm", "Deploy argo") == {"helm": -1, "argo": 1}
    assert df_delta("deploy helm", None) == {"deploy": -1, "helm": -1}
    assert df_delta("same text", "same text") == {}
    assert df_delta(None, "系统部署") == {"系统": 1, "统部": 1, "部署": 1}
