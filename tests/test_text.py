"""Pure functions: keyword terms (Latin words, CJK bigrams), normalization, LIKE escaping."""

from __future__ import annotations

import random

import pytest

from dream_memory_actor.text import (
    CJK_FUNCTION_CHARS,
    MAX_QUERY_TERMS_SCANNED,
    MAX_TERM_CHARS,
    content_hash,
    escape_like,
    fold,
    is_cjk_term,
    normalize_content,
    occurs,
    query_terms,
    terms,
    with_context,
    word_starts,
)


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


def test_query_terms_leave_out_bigrams_of_function_characters_only() -> None:
    assert query_terms("我们今天的部署") == ["的部", "部署"]
    assert query_terms("什么时候可以") == []
    assert query_terms("部署") == ["部署"]
    assert query_terms("的") == []
    # content words with one function character stay; English is as terms() gives it
    assert query_terms("天气 地址 我的猫") == ["天气", "地址", "的猫"]
    assert query_terms("Did we discuss the K8s deployment?") == ["discuss", "k8s", "deployment"]
    # a memory's own terms (what document frequencies count) keep every bigram
    assert terms("我们今天") == ["我们", "们今", "今天"]


def test_function_characters_are_not_content_characters() -> None:
    assert not CJK_FUNCTION_CHARS & set("部署系统完成集群绿茶")
    # words of a function character and a listed-out one stay
    assert query_terms("地点 自由 不同") == ["地点", "自由", "不同"]


def test_a_chinese_content_query_still_matches_its_memory() -> None:
    from dream_memory_actor.scoring import keyword_score

    q = query_terms("部署")
    assert keyword_score(q, "系统部署完成") == 1.0


def test_query_terms_are_bounded_and_the_first_ones() -> None:
    words = " ".join(f"w{i}x" for i in range(5000))
    got = query_terms(words)
    assert got == [f"w{i}x" for i in range(MAX_QUERY_TERMS_SCANNED)]
    zh = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(6000))
    assert len(query_terms(zh)) == MAX_QUERY_TERMS_SCANNED
    assert query_terms("a b c d", limit=2) == ["b", "c"]  # "a" is a stopword


def test_the_keyword_text_of_a_memory_is_its_content_and_its_context_s_lines_on_one_line(
        ) -> None:
    assert with_context("Bob: which breed?", "8 May 2023\nAnn: I adopted a dog.") == (
        "Bob: which breed? 8 May 2023 Ann: I adopted a dog.")
    assert with_context("Bob: which breed?", None) == "Bob: which breed?"


def _found(term: str, starts: str) -> bool:
    """The test a database runs on ``word_starts``: one substring test."""
    return (term if is_cjk_term(term) else " " + term) in starts


def test_word_starts_finds_a_term_exactly_where_occurs_does() -> None:
    """Random texts over an alphabet of the cases that matter: spaces, punctuation,
    apostrophes (a word starts after one, inside a term), word characters that are
    breaks (², ①), a combining mark (continues a word without being part of a term), CJK
    next to Latin, full-width and ligature forms that folding changes."""
    alphabet = [*"abc '’.-_x2²ªé部署 \n\t(\"", "ー", "ア", "가", "µ", "‿", "\u0301", "①",
                "Ⓐ", "Ｋ", "ﬁ"]
    rng = random.Random(7)
    for n in range(4000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        if n % 3 == 0:
            text = "".join(c for c in text if c.isascii())
        folded = fold(text)
        starts = word_starts(folded)
        every = terms(text, stopwords=frozenset())
        wanted = {*query_terms(text), *(t[:MAX_TERM_CHARS] for t in every),
                  "a", "ab", "b'c", "'", "x2", "部", "部署", "c①"}
        for term in wanted:
            assert _found(term, starts) == occurs(term, folded), (text, term, starts)
            assert occurs(term, starts) == occurs(term, folded), (text, term, starts)


def test_word_starts_lists_each_run_once_and_keeps_its_first_characters() -> None:
    assert word_starts(fold("We don't deploy, we ship: deploy!")) == " we don't deploy ship t"
    long = "x" * 100
    starts = word_starts(fold(f"see {long} and {long}y"))
    assert starts == f" see {'x' * MAX_TERM_CHARS} and"
    term = query_terms(long)[0]
    assert term == "x" * MAX_TERM_CHARS
    assert _found(term, starts) and occurs(term, fold(long))
    # a text of many apostrophes lists a bounded run from each
    tricky = "'".join(f"w{i}" for i in range(2000))
    assert len(word_starts(tricky)) <= (MAX_TERM_CHARS + 1) * 2001 + 1
