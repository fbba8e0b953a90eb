"""Pure functions: keyword terms (Latin words, CJK bigrams), normalization, LIKE escaping."""

from __future__ import annotations

import pytest

from dream_memory_actor.text import content_hash, escape_like, fold, normalize_content, terms


def test_latin_terms_are_lowercased_words_without_stopwords() -> None:
    assert terms("Did we discuss the K8s deployment?") == ["discuss", "k8s", "deployment"]


def test_terms_are_distinct_in_first_order() -> None:
    assert terms("deploy Deploy DEPLOY helm") == ["deploy", "helm"]


def test_identifiers_keep_underscores_and_apostrophes() -> None:
    assert terms("snake_case user's") == ["snake_case", "user's"]


@pytest.mark.parametrize(("text", "expected"), [
    ("部署", ["部署"]),
    ("系统部署", ["系统", "统部", "部署"]),
    ("我", ["我"]),
    ("K8s部署", ["k8s", "部署"]),
    ("デプロイ", ["デプ", "プロ", "ロイ"]),
    ("배포 완료", ["배포", "완료"]),
    ("以后用中文回复", ["以后", "后用", "用中", "中文", "文回", "回复"]),
])
def test_cjk_text_gives_character_bigrams(text: str, expected: list[str]) -> None:
    assert terms(text) == expected


def test_fold_is_nfkc_casefold() -> None:
    assert fold("Straße ＫＵＢＥ") == "strasse kube"


def test_normalize_and_hash_ignore_case_and_spacing() -> None:
    assert normalize_content("  a \n b\t c ") == "a b c"
    assert content_hash("Reply in  Chinese") == content_hash(" reply in chinese")
    assert content_hash("a") != content_hash("b")


def test_escape_like() -> None:
    assert escape_like("50%_off\\") == "50\\%\\_off\\\\"
