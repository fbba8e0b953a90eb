"""Keyword terms, content normalization and LIKE escaping: pure functions.

Terms are what the keyword signal counts. Latin (and other space-separated)
scripts give lower-cased words; Chinese, Japanese and Korean runs give
overlapping character bigrams, as Lucene's CJK analyzer does, so "部署" matches
"系统部署完成" without a word segmenter. A lone CJK character is a term of its own.

A query's terms (``query_terms``) are bounded, and leave out the Chinese bigrams made
only of function characters (我们, 今天, 的时 ...): they carry no topic, as English
stopwords do not, while a mixed bigram (的部) and a content bigram (部署) stay. How much
each remaining term counts is the store's business (its rarity, ``scoring.term_weights``).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Iterator

# Han, Hiragana, Katakana, Hangul (syllables and jamo), CJK punctuation excluded.
_CJK_RANGES = (
    (0x3040, 0x309F),  # Hiragana
    (0x30A0, 0x30FF),  # Katakana
    (0x3400, 0x4DBF),  # CJK Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x3130, 0x318F),  # Hangul Compatibility Jamo
    (0xAC00, 0xD7AF),  # Hangul Syllables
    (0x20000, 0x2FA1F),  # Extensions B-F and compatibility supplement
)

# Words that carry no topic; a query's share of matched terms ignores them.
# Kept short on purpose: "deploy", "security", "not" all stay.
STOPWORDS = frozenset(
    """
    a an and are as at be been but by did do does for from had has have how i if in into
    is it its me my of on or our so that the their them then there these they this to
    was we were what when where which who why will with you your
    """.split()  # noqa: SIM905 - a word list reads better as text
)

# Chinese pronouns, particles, auxiliaries, conjunctions, prepositions and deictic
# time words: a query bigram made only of these (我们, 什么, 可以, 今天, 时候, 的时) is
# left out, a bigram with one other character (的部, 部署, 天气) is kept. Characters that
# also make content words with each other are not listed (点: 地点, 由: 自由, 同: 不同).
CJK_FUNCTION_CHARS = frozenset(
    "我你您他她它们咱自己"  # pronouns
    "的地得了着过吗呢吧啊呀嘛哦么"  # particles
    "是有在会能要想可以就都也还又再才很太更最没不别"  # copula, auxiliaries, adverbs
    "这那哪什怎谁几个些每各某一"  # demonstratives, question words, measure
    "和与跟及或而但并且因为所如果虽然把被让给对从向往到于"  # conjunctions, prepositions
    "今明昨天时候现刚已经正"  # deictic time
)

#: A query contributes at most this many distinct terms (the first ones); the rest of
#: a very long query is not scanned. Bounds the work of a search whatever its length.
MAX_QUERY_TERMS_SCANNED = 256

# Underscores stay inside words: "snake_case" is one term, as identifiers are.
_WORD = re.compile(r"\w+(?:['’]\w+)*", re.UNICODE)


def is_cjk(ch: str) -> bool:
    """True for a Chinese, Japanese or Korean character."""
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


_CJK_RUN = re.compile(
    "([" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in _CJK_RANGES) + "]+)")


def _split_runs(word: str) -> Iterable[tuple[bool, str]]:
    """Split a word into maximal runs of CJK and non-CJK characters."""
    if word.isascii():  # most words: no CJK character, one run (checked in C)
        yield False, word
        return
    # with a capturing group, split alternates non-CJK (even) and CJK (odd) parts
    for i, part in enumerate(_CJK_RUN.split(word)):
        if part:
            yield i % 2 == 1, part


def _iter_terms(text: str, stopwords: frozenset[str]) -> Iterator[str]:
    """Every term occurrence of ``text`` in order (repeats included), lazily."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    for match in _WORD.finditer(folded):
        for cjk, run in _split_runs(match.group(0)):
            if cjk:
                if len(run) == 1:
                    yield run
                else:
                    for i in range(len(run) - 1):
                        yield run[i : i + 2]
            elif run not in stopwords:
                yield run


def terms(text: str, *, stopwords: frozenset[str] = STOPWORDS) -> list[str]:
    """The distinct keyword terms of ``text``, in order of first appearance.

    >>> terms("Did we discuss the K8s deployment?")
    ['discuss', 'k8s', 'deployment']
    >>> terms("系统部署")
    ['系统', '统部', '部署']
    """
    return list(dict.fromkeys(_iter_terms(text, stopwords)))


def is_function_term(term: str) -> bool:
    """True for a CJK term made only of :data:`CJK_FUNCTION_CHARS` (我们, 的, 今天)."""
    return all(ch in CJK_FUNCTION_CHARS for ch in term)


def query_terms(text: str, *, limit: int = MAX_QUERY_TERMS_SCANNED) -> list[str]:
    """The terms a search looks for: ``terms`` without all-function CJK terms, the first
    ``limit`` distinct ones (the rest of the text is not read).

    >>> query_terms("我们今天的部署")
    ['的部', '部署']
    """
    seen: dict[str, None] = {}
    for t in _iter_terms(text, STOPWORDS):
        if t not in seen and not is_function_term(t):
            seen[t] = None
            if len(seen) >= limit:
                break
    return list(seen)


def fold(text: str) -> str:
    """The form in which keyword terms are looked for: NFKC, case-folded."""
    return unicodedata.normalize("NFKC", text).casefold()


def normalize_content(text: str) -> str:
    """Content with surrounding white space removed and inner runs collapsed."""
    return " ".join(text.split())


def content_hash(text: str) -> str:
    """Hash used for exact-text dedup: case and white space do not count."""
    return hashlib.sha256(fold(normalize_content(text)).encode("utf-8")).hexdigest()


def escape_like(term: str, escape: str = "\\") -> str:
    """Escape LIKE wildcards so user text matches literally (use with ``ESCAPE '\\'``)."""
    return (
        term.replace(escape, escape + escape).replace("%", escape + "%").replace("_", escape + "_")
    )
