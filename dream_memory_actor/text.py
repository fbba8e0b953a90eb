"""Keyword terms, content normalization and LIKE escaping: pure functions.

Terms are what the keyword signal counts. Latin (and other space-separated)
scripts give lower-cased words; Chinese, Japanese and Korean runs give
overlapping character bigrams, as Lucene's CJK analyzer does, so "部署" matches
"系统部署完成" without a word segmenter. A lone CJK character is a term of its own.

A query's terms (``query_terms``) are bounded, and leave out the Chinese bigrams made
only of function characters (我们, 今天, 的时 ...): they carry no topic, as English
stopwords do not, while a mixed bigram (的部) and a content bigram (部署) stay. How much
each remaining term counts is the store's business (its rarity, ``scoring.term_weights``).

Where a term is found (``occurs``): a CJK term anywhere in the text (its bigrams have no
word boundaries to respect), any other term only where a word starts, so "deploy"
finds "deployment" and "ate" does not find "create". A word starts at the beginning of
the text or after a character of :data:`BREAK_RANGES` (white space, punctuation,
symbols, CJK); letters and digits of every script continue a word. A database
searches the text's ``word_starts`` in its stead, where that rule is one substring test.
"""

from __future__ import annotations

import bisect
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
#: A query's term counts its first this many characters (``word_starts`` keeps as many
#: of each word's).
MAX_TERM_CHARS = 64

# Underscores stay inside words: "snake_case" is one term, as identifiers are.
_WORD = re.compile(r"\w+(?:['’]\w+)*", re.UNICODE)


# The characters after which a word starts. Everything else (letters and digits of any
# script, combining marks, ``_``) continues the word before it. NFKC (``fold``) has
# already turned full-width forms into ASCII.
BREAK_RANGES: tuple[tuple[int, int], ...] = tuple(sorted((
    (0x0000, 0x002F),  # controls, space, ASCII punctuation before the digits
    (0x003A, 0x0040),  # :;<=>?@
    (0x005B, 0x005E),  # [\]^
    (0x0060, 0x0060),  # `
    (0x007B, 0x00BF),  # {|}~, DEL, C1 controls, Latin-1 punctuation and symbols
    (0x00D7, 0x00D7),  # multiplication sign
    (0x00F7, 0x00F7),  # division sign
    (0x2000, 0x206F),  # general punctuation: spaces, dashes, quotes
    (0x2190, 0x2BFF),  # arrows, mathematical and technical symbols, shapes, dingbats
    (0x3000, 0x303F),  # CJK symbols and punctuation
    (0xFE30, 0xFE4F),  # CJK compatibility forms
    (0xFF01, 0xFF0F), (0xFF1A, 0xFF20), (0xFF3B, 0xFF40), (0xFF5B, 0xFF65),  # full-width
    (0x1F000, 0x1FAFF),  # emoji and pictographs
    *_CJK_RANGES,  # a Latin word right after Chinese text starts there
)))
_BREAK_LO = [lo for lo, _ in BREAK_RANGES]
_ASCII_BREAK = frozenset(chr(c) for lo, hi in BREAK_RANGES if lo < 0x80
                         for c in range(lo, min(hi, 0x7F) + 1))

#: Sorts after every term that starts with a given term (``term + PREFIX_END``): the
#: upper end of the range of a prefix in a sorted list of terms.
PREFIX_END = "\U0010ffff"


def is_break(ch: str) -> bool:
    """True if a word starts after ``ch`` (a character of :data:`BREAK_RANGES`)."""
    cp = ord(ch)
    if cp < 0x80:
        return ch in _ASCII_BREAK
    i = bisect.bisect_right(_BREAK_LO, cp) - 1
    return i >= 0 and cp <= BREAK_RANGES[i][1]


def is_cjk_term(term: str) -> bool:
    """True for a CJK term (a bigram or a lone character): found anywhere in a text."""
    return is_cjk(term[0])


def occurs(term: str, folded: str) -> bool:
    """True if ``term`` is found in ``folded`` (text passed through ``fold``): anywhere
    for a CJK term, where a word starts for any other.

    >>> occurs("deploy", "the deployment"), occurs("ate", "create"), occurs("部署", "系统部署")
    (True, False, True)
    """
    pos = folded.find(term)
    if pos < 0 or is_cjk(term[0]):
        return pos >= 0
    return word_start_at(term, folded, pos) >= 0


def word_start_at(term: str, folded: str, pos: int, end: int = -1) -> int:
    """The first position >= ``pos`` (and before ``end``, if >= 0) where ``term`` starts
    a word of ``folded``, or -1; ``pos`` must be an occurrence of ``term`` or -1."""
    while pos >= 0 and (end < 0 or pos < end):
        if pos == 0 or is_break(folded[pos - 1]):
            return pos
        pos = folded.find(term, pos + 1)
    return -1


#: A run of the characters a term is made of (``_WORD``'s, apostrophes included).
_TERM_RUN = re.compile(r"[\w'’]+")
#: ASCII characters that end such a run: blanked, a folded ASCII text splits into runs.
_ASCII_BLANK = str.maketrans({chr(c): " " for c in range(128)
                              if not (chr(c).isalnum() or chr(c) in "_'")})


def _inner_breaks() -> re.Pattern[str]:
    """Characters of a term after which a word starts: the apostrophes and the few word
    characters among :data:`BREAK_RANGES` (ª, ², ①...); CJK apart."""
    cjk = set(_CJK_RANGES)
    chars = [chr(c) for lo, hi in BREAK_RANGES if (lo, hi) not in cjk
             for c in range(max(lo, 1), hi + 1) if chr(c).isalnum() or chr(c) in "'’"]
    return re.compile("[" + "".join(map(re.escape, chars)) + "]")


_INNER_BREAK = _inner_breaks()


def word_starts(folded: str) -> str:
    """``folded`` as a list of the places a term can be found in it: a space, then, once
    each and separated by spaces, the run of term characters from every place a word
    starts (its first :data:`MAX_TERM_CHARS`; a CJK character ends it) and every CJK
    run whole. A query term (``query_terms``) ``occurs`` in ``folded`` exactly when
    ``" " + term`` (a CJK term: the term) is in this text; and ``occurs`` gives the
    same answers on it as on ``folded``. So a database finds a term where a word starts
    with one substring test a row.

    >>> word_starts("we don't deploy, we ship 部署v2")
    " we don't t deploy ship 部署 v2"
    """
    if folded.isascii():  # most texts: every run starts a word, apostrophes aside
        runs = folded.translate(_ASCII_BLANK).split()
        if "'" in folded:
            runs += [r[m.end():] for r in runs if "'" in r
                     for m in _INNER_BREAK.finditer(r) if m.end() < len(r)]
        if len(folded) > MAX_TERM_CHARS:
            runs = [r[:MAX_TERM_CHARS] for r in runs]
        return " " + " ".join(dict.fromkeys(runs))
    out: dict[str, None] = {}
    for m in _TERM_RUN.finditer(folded):
        at = m.start()
        starts = at == 0 or is_break(folded[at - 1])
        for i, (cjk, part) in enumerate(_split_runs(m.group())):
            if cjk:
                out[part] = None
                continue
            if i > 0 or starts:  # after a CJK part, or where the run starts a word
                out[part[:MAX_TERM_CHARS]] = None
            for b in _INNER_BREAK.finditer(part):
                if b.end() < len(part):
                    out[part[b.end():b.end() + MAX_TERM_CHARS]] = None
    return " " + " ".join(out)


def is_cjk(ch: str) -> bool:
    """True for a Chinese, Japanese or Korean character."""
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


CJK_RUN = re.compile(
    "([" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in _CJK_RANGES) + "]+)")


def has_cjk(text: str) -> bool:
    """True when ``text`` holds a Chinese, Japanese or Korean character (one scan)."""
    return CJK_RUN.search(text) is not None


def _split_runs(word: str) -> Iterable[tuple[bool, str]]:
    """Split a word into maximal runs of CJK and non-CJK characters."""
    if word.isascii():  # most words: no CJK character, one run (checked in C)
        yield False, word
        return
    # with a capturing group, split alternates non-CJK (even) and CJK (odd) parts
    for i, part in enumerate(CJK_RUN.split(word)):
        if part:
            yield i % 2 == 1, part


def _iter_terms(text: str, stopwords: frozenset[str]) -> Iterator[str]:
    """Every term occurrence of ``text`` in order (repeats included), lazily."""
    for match in _WORD.finditer(fold(text)):
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
    """The terms a search looks for: ``terms`` without all-function CJK terms, each cut
    to :data:`MAX_TERM_CHARS`, the first ``limit`` distinct ones (the rest of the text
    is not read).

    >>> query_terms("我们今天的部署")
    ['的部', '部署']
    """
    seen: dict[str, None] = {}
    for t in _iter_terms(text, STOPWORDS):
        t = t[:MAX_TERM_CHARS]
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


#: What a memory's vector is made of: its content and its context (``None``: none).
MemoryText = tuple[str, "str | None"]


def context_lines(context: str) -> list[str]:
    """The parts of a memory's context, a line each (a date, an earlier turn), each
    normalized as content is; empty lines are no part.

    >>> context_lines(" 8 May 2023\\n\\n  Ann:  hi ")
    ['8 May 2023', 'Ann: hi']
    """
    return [line for line in map(normalize_content, context.splitlines()) if line]


def with_context(content: str, context: str | None) -> str:
    """What the keyword signal searches a memory as: its content, then its context's
    lines, on one line. (Its vector is made of the two apart: ``embedding.memory_vector``.)
    A space, not a line break, between them: the keyword test in Python (``scoring.rank``)
    takes a term after a space as a word start without looking further, and a context's
    lines often start with a word searched for (a speaker's name).

    >>> with_context("Caroline: congrats!", "8 May 2023\\nMelanie: I got the job")
    'Caroline: congrats! 8 May 2023 Melanie: I got the job'
    """
    return content if not context else content + " " + context.replace("\n", " ")
