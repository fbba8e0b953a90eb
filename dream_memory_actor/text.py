"""Keyword terms, content normalization and LIKE escaping: pure functions.

Terms are what the keyword signal counts. Latin (and other space-separated)
scripts give lower-cased words; Chinese, Japanese and Korean runs give
overlapping character bigrams, as Lucene's CJK analyzer does, so "部署" matches
"系统部署完成" without a word segmenter. A lone CJK character is a term of its own.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable

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

# Underscores stay inside words: "snake_case" is one term, as identifiers are.
_WORD = re.compile(r"\w+(?:['’]\w+)*", re.UNICODE)


def is_cjk(ch: str) -> bool:
    """True for a Chinese, Japanese or Korean character."""
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def _split_runs(word: str) -> Iterable[tuple[bool, str]]:
    """Split a word into maximal runs of CJK and non-CJK characters."""
    if word.isascii():  # most words: no CJK character, one run (checked in C)
        yield False, word
        return
    start = 0
    for i in range(1, len(word) + 1):
        if i == len(word) or is_cjk(word[i]) != is_cjk(word[start]):
            yield is_cjk(word[start]), word[start:i]
            start = i


def terms(text: str, *, stopwords: frozenset[str] = STOPWORDS) -> list[str]:
    """The distinct keyword terms of ``text``, in order of first appearance.

    >>> terms("Did we discuss the K8s deployment?")
    ['discuss', 'k8s', 'deployment']
    >>> terms("系统部署")
    ['系统', '统部', '部署']
    """
    seen: dict[str, None] = {}
    folded = unicodedata.normalize("NFKC", text).casefold()
    for match in _WORD.finditer(folded):
        for cjk, run in _split_runs(match.group(0)):
            if cjk:
                grams = [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
                for g in grams:
                    seen.setdefault(g, None)
            elif run not in stopwords:
                seen.setdefault(run, None)
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
