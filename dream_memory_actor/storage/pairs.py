"""What two memories differ in: a comparison of their texts, pure functions.

A sentence embedding puts "the staging web server listens on 8080" and "the staging
admin server listens on 8080" as close as two wordings of one fact, so the write
path compares the texts too (:func:`compare`). Both are cut into tokens (words,
numbers, and single characters of Chinese, Japanese and Korean, where words have no
spaces), normalized (case, number words and Chinese numerals as digits, everyday
Chinese wordings of one thing as one: 礼拜/星期 as 周, 闺女 as 女儿; "free of" and
"sugar-free" as "without"; a time of day on a 24-hour clock: "half past nine" and 九点半
are 9:30, "3 pm" and 下午三点 are 15), and aligned: what is left is what was
substituted, inserted or deleted at the same place, less what is no change (a name and
its short form, two forms of one word: deploys / deployments). Each such change is of
one kind, the strongest of its tokens:

- ``negation``: one side says "not", "no longer", "dislikes", 不, 没 where the
  other does not (a preference reversed);
- ``value``: a number, version, date, time, weekday, month or colour;
- ``name``: a capitalized word (not one that starts a sentence after another, or
  after a speaker's label), a quoted one, a Latin word in a Chinese text (a tool, a
  person, a place);
- ``word``: any other content word;

and it sits on one side of what the two texts share: in the *subject* (more of the
shared text follows the change than precedes it: "the **web** server listens on
8080") or in the *value* (the shared text is before it: "the user lives in
**Porto**"). Function words and punctuation never count as a change.

A text may open with a speaker's label, as a turn of a conversation does ("Jon: Thanks,
Gina!"): one to three capitalized words and a colon. The label says who speaks, not what
is said, so it is no shared content (two turns of one speaker share their label and may
share nothing else), and a word after it starts a sentence. Two labels that differ are
still a change (two people said it).

When most of the two texts is shared (:attr:`Comparison.aligned`), the change is
what the texts disagree on. When little is, the texts are two wordings or two
facts, which only the similarity of their meaning can tell; what the comparison
still gives is whether their numbers agree (:attr:`Comparison.numbers_conflict`).
"""

from __future__ import annotations

import difflib
import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from ..text import CJK_RUN, is_cjk

__all__ = ["Change", "Comparison", "Token", "compare", "tokens"]

Kind = Literal["negation", "value", "name", "word"]
Side = Literal["subject", "value"]

#: English words that carry no fact of their own: an alignment that differs only in
#: these (and punctuation) says the same thing.
FUNCTION_WORDS = frozenset(
    """
    a an the of in on at to for from by with as into onto over about
    is are was were be been being am 's s 'd 'll 're 've
    and or but so then also just really very quite only still now currently
    it its it's this that these those there here their they them our we us my
    his her he she you your i me
    do does did has have had will would shall should can could may might must
    which who whom whose what when where how
    every each all some any per
    """.split()  # noqa: SIM905 - a word list reads better as text
)

#: Chinese characters that carry no fact of their own (particles, copula, measure
#: words that every wording uses): 的, 了, 是, 在 ...
CJK_FUNCTION = frozenset("的了着过吗呢吧啊呀嘛哦么是在都也就还又很把被将给对于着之其这那个")

NEGATIONS = frozenset({"not", "no", "never", "n't", "nor", "none", "nobody", "nothing",
                       "neither", "without", "anymore"})
CJK_NEGATIONS = frozenset("不没别非未无勿莫")
#: Chinese words that hold a negation character and negate nothing: 非常 is "very",
#: 未来 "the future", 没问题 "fine". Each is one token, so its 非, 未 or 没 is no "not".
CJK_UNNEGATED = ("没问题", "没关系", "非常", "未来", "不错", "不断", "不久", "不过", "不仅",
                 "不管", "无论", "不少", "不然", "莫名", "差不多", "不得不")
#: Prefixes that turn a word into its opposite: likes / dislikes, happy / unhappy.
ANTONYM_PREFIXES = ("dis", "un", "in", "im", "non")

WEEKDAYS = {d: str(i) for i, d in enumerate(
    ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"], 1)}
WEEKDAYS.update({d[:3]: v for d, v in list(WEEKDAYS.items())})
WEEKDAYS.update({d + "s": v for d, v in list(WEEKDAYS.items()) if len(d) > 3})  # on Fridays
MONTHS = frozenset(
    """january february march april may june july august september october november
    december jan feb mar apr jun jul aug sep sept oct nov dec""".split())  # noqa: SIM905
COLOURS = frozenset(
    """red orange yellow green blue purple violet pink brown black white grey gray
    cyan magenta teal navy beige gold silver""".split())  # noqa: SIM905
CJK_COLOURS = frozenset("红橙黄绿蓝紫粉棕黑白灰青金银")
NUMBER_WORDS = {w: str(i) for i, w in enumerate(
    """zero one two three four five six seven eight nine ten eleven twelve thirteen
    fourteen fifteen sixteen seventeen eighteen nineteen twenty""".split())}  # noqa: SIM905
NUMBER_WORDS.update({"thirty": "30", "forty": "40", "fifty": "50", "sixty": "60",
                     "seventy": "70", "eighty": "80", "ninety": "90", "hundred": "100",
                     "thousand": "1000", "once": "1", "twice": "2", "dozen": "12"})
CJK_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5,
              "六": 6, "七": 7, "八": 8, "九": 9}
CJK_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10000}
#: Everyday Chinese words and the one each is compared as: the week (星期四 and 礼拜四 are
#: 周四, 周天 is 周日), a day of the month (五号 is 五日), a part of the day (夜里 is
#: 晚上), now (目前 is 现在), usually (通常 is 一般), family (闺女 is 女儿, 小孩 is
#: 孩子), a plan (打算 is 计划), liking to do something (爱吃 is 喜欢吃), going live
#: (部署 is 上线). Only words that mean the same wherever they stand: a synonym that is
#: another fact elsewhere (读书: studying, or reading a book; 爱 alone: love) stays a
#: change, which keeps both memories.
CJK_WORDINGS = {"星期天": "周日", "礼拜天": "周日", "周天": "周日", "星期": "周", "礼拜": "周",
                "号": "日", "夜里": "晚上", "晚间": "晚上", "早晨": "早上", "目前": "现在",
                "当前": "现在", "通常": "一般", "闺女": "女儿", "小孩": "孩子", "打算": "计划",
                "爱": "喜欢", "部署": "上线"}
#: A wording of :data:`CJK_WORDINGS`, the longest first; 号 only after a numeral, 爱 only
#: before an everyday activity (爱喝, 爱看: likes to; 爱人, 可爱 are other words).
_CJK_WORDING = re.compile("|".join(
    r"(?<=[\d零〇一二两三四五六七八九十])号" if k == "号"
    else r"(?<![可恋热亲])爱(?=[吃喝看玩听读唱跑逛打睡])" if k == "爱" else k
    for k in sorted(CJK_WORDINGS, key=len, reverse=True)))
#: "Free of" and "-free" say "without": "kept free of meetings" is "without meetings",
#: "sugar-free" is "without sugar" (a negation, as "no meetings" is).
_FREE_OF = re.compile(r"\bfree\s+(?:of|from)\b", re.I)
_X_FREE = re.compile(r"\b([^\W\d_]+)-free\b", re.I)
#: A time of day in English words or on a 12-hour clock: "half past nine", "a quarter to
#: eight", "3 pm", "9:30 a.m.".
_HOUR = r"(\d{1,2}|" + "|".join(list(NUMBER_WORDS)[1:13]) + ")"
_SPOKEN_TIME = re.compile(r"\b(?:a\s+)?(half|quarter)\s+(past|to)\s+" + _HOUR + r"\b", re.I)
_MERIDIEM = re.compile(r"\b(\d{1,2})(?::(\d{2}))?\s*([ap])\.?\s?m\b\.?", re.I)
_OCLOCK = re.compile(r"\s*o'clock\b", re.I)
#: A Chinese time of day: 九点半, 三点一刻, 下午三点, 晚上八点二十分. The hour is moved to a
#: 24-hour clock only after a word for the afternoon or evening (not 夜里两点: 2:00).
_CJK_TIME = re.compile(r"(下午|傍晚|晚上|今晚|夜里|中午)?([零〇一二两三四五六七八九十\d]+)[点點]"
                       r"(半|一刻|三刻|[零〇一二两三四五六七八九十\d]+分)?")
#: The hours from which a word for part of the day means the afternoon or evening: 下午
#: 两点 is 14:00, 中午十二点 noon and 中午一点 13:00, 晚上八点 20:00 but 夜里两点 2:00.
_CJK_PM_FROM = {"下午": 0, "中午": 0, "傍晚": 5, "晚上": 5, "今晚": 5, "夜里": 5}
_CJK_QUARTERS = {"半": 30, "一刻": 15, "三刻": 45}

_TOKEN = re.compile(
    r"\d+(?:[.,:]\d+)*(?:st|nd|rd|th)?"      # 1.27, 20,000, 9:30, 14th
    r"|n't"                                   # the negation of a contraction
    r"|'s\b"                                  # a possessive
    r"|[@#]?[^\W\d_](?:[\w]|[-.](?=\w))*"     # words: Node.js, Wi-Fi, K8s, @kwolfe
    r"|\S", re.UNICODE)
_QUOTES = frozenset("'\"“”‘’「」《》")
_CJK_NUMERAL = re.compile("[零〇一二两三四五六七八九十百千万]+")


class Token:
    """A token as written (``text``) and as compared (``norm``), with what it is (derived
    from those once, as it is made: a comparison reads them many times). Immutable by
    use. A plain class with slots: a frozen dataclass sets each field through
    ``object.__setattr__`` (a LoCoMo turn's tokens took 1.7x as long to make), and a
    tuple's fields are slower to read. Comparing pairs is most of a batch store: this
    class, the per-text reading (:class:`_Reading`) and the one-pass :func:`_unmoved`
    took ``python -m benchmarks locomo-ingest`` from 688-700 to 767-777 turns/s, in
    three alternating pairs, every comparison of 18,127 pairs unchanged."""

    __slots__ = ("cjk", "content", "function", "initial", "label", "name", "negation", "norm",
                 "quoted", "text", "value")

    def __init__(self, text: str, norm: str, *, cjk: bool = False, quoted: bool = False,
                 label: bool = False, initial: bool = False) -> None:
        self.text = text
        self.norm = n = norm
        self.cjk = cjk
        self.quoted = quoted
        #: Part of the speaker's label the text opens with ("Jon" and ":" of "Jon: Hi!").
        self.label = label
        #: Starts a sentence after another one or after the speaker's label: its capital
        #: says nothing. (A text's first word keeps its capital as a name's: a fact often
        #: opens with whom it is about, "Alice is on call".)
        self.initial = initial
        #: A function word or punctuation: never a change of its own.
        self.function = function = (n in CJK_FUNCTION if cjk else n in FUNCTION_WORDS
                                    or not any(c.isalnum() for c in n))
        #: A word that says something: no function word, punctuation or speaker label.
        self.content = not function and not label
        #: Quoted, an @handle, or a capitalized Latin word that does not start a sentence
        #: (or starts one in a Chinese text, which has no capitals of its own).
        self.name = not function and (quoted or text.startswith("@")
                                      or (not cjk and text[:1].isupper() and not initial))
        self.negation = n in (CJK_NEGATIONS if cjk else NEGATIONS)
        self.value = ((n.isdigit() or n in CJK_COLOURS) if cjk
                      else n[:1].isdigit() or n.startswith("wd:") or n in MONTHS
                      or n in COLOURS)

    def _key(self) -> tuple[str, str, bool, bool, bool, bool]:
        return self.text, self.norm, self.cjk, self.quoted, self.label, self.initial

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Token) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"Token(text={self.text!r}, norm={self.norm!r}, cjk={self.cjk}, "
                f"quoted={self.quoted}, label={self.label}, initial={self.initial})")

    def placed(self, label: bool, initial: bool) -> Token:
        """This token in a speaker's label or not, starting a sentence or not."""
        return Token(self.text, self.norm, cjk=self.cjk, quoted=self.quoted, label=label,
                     initial=initial)


def _cjk_number(run: str) -> str:
    """A run of Chinese numerals as digits: 一百二十 -> 120, 四千五 -> 4500, 十二 -> 12."""
    total, section, digit, last_unit = 0, 0, -1, 0
    for ch in run:
        if ch in CJK_DIGITS:
            digit = CJK_DIGITS[ch]
        else:
            unit = CJK_UNITS[ch]
            if unit == 10000:
                total = (total + section + max(digit, 0)) * unit
                section, digit = 0, -1
            else:
                section += (1 if digit < 0 else digit) * unit
                digit = -1
            last_unit = unit
    if digit >= 0:  # 四千五: a trailing digit counts in the unit below the last one
        section += digit * (last_unit // 10 if last_unit >= 100 else 1)
    return str(total + section)


#: Texts up to this many characters keep their reading (:func:`_read`) ...
_KEPT_LENGTH = 1000
#: ... those read last, up to this many characters of text in all: a reading takes
#: about 70 bytes a character (LoCoMo turns, and texts of 1,000 characters), so about
#: 18 MB at most, whatever the texts' lengths. A count of texts bounded memory only
#: for the longest texts and held 512 turns, fewer than one conversation's: a batch
#: store read a stored turn again each time it came back as a neighbour
#: (``python -m benchmarks locomo-ingest``: 5,773 readings a round against 3,573, and
#: 624-651 against 692-713 turns/s in three alternating pairs).
_KEPT_CHARS = 256_000
_readings: OrderedDict[str, _Reading] = OrderedDict()
_readings_chars = 0
_readings_lock = threading.Lock()  # stores judge in several threads of one process


def tokens(text: str) -> tuple[Token, ...]:
    """The tokens of ``text`` for comparison: words and numbers, one token per CJK
    character except runs of Chinese numerals (one number), each normalized."""
    return _read(text).tokens


class _Reading(NamedTuple):
    """What :func:`compare` reads of one text, whatever the other: read once and kept
    for the short texts seen last (a stored memory is compared again with each text
    stored near it, and a new text with each of its nearest memories)."""

    tokens: tuple[Token, ...]
    norms: tuple[str, ...]
    #: How many content tokens come before each place (one more entry than tokens).
    content_before: tuple[int, ...]
    numbers: frozenset[str]
    negation: bool
    names: frozenset[str]
    words: frozenset[str]
    initials: str
    labelled: bool
    #: What :func:`_may_align` reads: the norms of the content tokens, each with its
    #: ``_bare`` form (``None`` for a word not in ASCII); of the words (no function
    #: word), their ``_bare`` forms and their norms by first character; whether one is
    #: in capitals (an acronym, ``_acronym``). And whether the text names a value
    #: (``Token.value``).
    content_forms: tuple[tuple[str, str | None], ...]
    bares: frozenset[str]
    by_first: dict[str, tuple[str, ...]]
    capitals: bool
    values: bool


def _read(text: str) -> _Reading:
    """The reading of ``text``, kept for the short texts read last (``_KEPT_CHARS``)."""
    global _readings_chars
    if len(text) > _KEPT_LENGTH:
        return _reading(text)
    with _readings_lock:
        found = _readings.get(text)
        if found is not None:
            _readings.move_to_end(text)
            return found
    reading = _reading(text)
    with _readings_lock:
        if text not in _readings:
            _readings[text] = reading
            _readings_chars += len(text)
            while _readings_chars > _KEPT_CHARS:
                gone, _ = _readings.popitem(last=False)
                _readings_chars -= len(gone)
    return reading


def _reading(text: str) -> _Reading:
    ts = _tokens(text)
    before = [0]
    for t in ts:
        before.append(before[-1] + t.content)
    words = [t for t in ts if not t.function]
    by_first: dict[str, list[str]] = {}
    for t in words:
        by_first.setdefault(t.norm[:1], []).append(t.norm)
    return _Reading(ts, tuple(t.norm for t in ts), tuple(before), _numbers(ts),
                    any(t.negation for t in ts), frozenset(_names(ts)),
                    frozenset(t.norm for t in ts), _initials(ts), label_length(ts) > 0,
                    tuple((t.norm, _bare(t.norm) if t.norm.isascii() else None)
                          for t in ts if t.content),
                    frozenset(_bare(t.norm) for t in words if t.norm.isascii()),
                    {c: tuple(ns) for c, ns in by_first.items()},
                    any(len(t.text) > 1 and t.text.isalpha() and t.text.isupper()
                        for t in words),
                    any(t.value for t in ts))


def _tokens(text: str) -> tuple[Token, ...]:
    s = unicodedata.normalize("NFKC", text)
    s = _X_FREE.sub(r"without \1", _FREE_OF.sub("without", s))
    s = _clock(_CJK_WORDING.sub(lambda m: CJK_WORDINGS[m.group()], s))
    out: list[Token] = []
    quote = False
    for run in CJK_RUN.split(s):
        if run and is_cjk(run[0]):
            out.extend(_cjk_tokens(run, quote))
            continue
        for m in _TOKEN.finditer(run):
            raw = m.group()
            if raw in _QUOTES:
                quote = not quote
                continue
            out.append(_latin_token(raw, quote))
    return _placed(out)


#: Punctuation that ends a sentence (Chinese full stops included).
SENTENCE_ENDS = frozenset(".!?。")
#: The most words a speaker's label has ("Dr Ana Lima:").
LABEL_WORDS = 3


def _placed(ts: list[Token]) -> tuple[Token, ...]:
    """``ts`` with the speaker's label marked (:func:`label_length`) and the tokens that
    start a sentence after another one or after the label, unless a Chinese text goes on
    after it (there a capital is a name's)."""
    n = label_length(ts)
    out = []
    for i, t in enumerate(ts):
        initial = i > 0 and (i == n or ts[i - 1].norm in SENTENCE_ENDS) and not (
            i + 1 < len(ts) and ts[i + 1].cjk)
        label = i < n
        out.append(t if (t.label, t.initial) == (label, initial)
                   else t.placed(label, initial))
    return tuple(out)


def label_length(ts: Sequence[Token]) -> int:
    """How many tokens the speaker's label that opens ``ts`` takes (its words and the
    colon: "Jon:", "Mary Ann:"), 0 when there is none. A label is one to
    :data:`LABEL_WORDS` capitalized Latin words before a colon, with more text after it."""
    for i, t in enumerate(ts[:LABEL_WORDS + 1]):
        if t.norm == ":":
            return i + 1 if i > 0 and i + 1 < len(ts) else 0
        if t.cjk or t.quoted or not (t.text[:1].isupper() and t.text.isalpha()):
            return 0
    return 0


def _clock(s: str) -> str:
    """``s`` with its times of day as ``H:MM`` on a 24-hour clock (see :data:`_SPOKEN_TIME`,
    :data:`_CJK_TIME`), so that two wordings of one time agree and two times differ."""

    def spoken(m: re.Match[str]) -> str:
        hour = int(NUMBER_WORDS.get(m.group(3).lower(), m.group(3)))
        minutes = 30 if m.group(1).lower() == "half" else 15
        if m.group(2).lower() == "to":
            hour, minutes = (hour - 1) % 12 or 12, 60 - minutes
        return f"{hour}:{minutes:02d}"

    def meridiem(m: re.Match[str]) -> str:
        hour = int(m.group(1))
        if hour > 12:
            return m.group()
        hour = hour % 12 + (12 if m.group(3).lower() == "p" else 0)
        return f"{hour}:{m.group(2) or '00'}"

    def cjk(m: re.Match[str]) -> str:
        when, hour_text, part = m.group(1) or "", m.group(2), m.group(3)
        if not when and not part:
            return m.group()  # 三点 as it is; 一点 is also "a little"
        hour = int(hour_text) if hour_text.isdigit() else int(_cjk_number(hour_text))
        if when and _CJK_PM_FROM[when] <= hour < (11 if when == "中午" else 12):
            hour += 12
        if part is None:
            minutes = 0
        elif part in _CJK_QUARTERS:
            minutes = _CJK_QUARTERS[part]
        else:
            digits = part[:-1]
            minutes = int(digits) if digits.isdigit() else int(_cjk_number(digits))
        return f"{when} {hour}:{minutes:02d} "

    s = _SPOKEN_TIME.sub(spoken, s)
    s = _MERIDIEM.sub(meridiem, s)
    s = _OCLOCK.sub("", s)
    return _CJK_TIME.sub(cjk, s)


#: Latin tokens made so far, by what was written and whether it is quoted: a token is
#: immutable by use, and the same words come back in text after text. Emptied when it
#: holds this many (about 300 bytes each). No lock, unlike the readings: a lookup and an
#: insert are each atomic, and two threads making one word's token at once make equal
#: tokens. ``python -m benchmarks locomo-ingest``, four
#: alternating pairs: 995, 1018, 914, 976 -> 1030, 1091, 987, 1049 turns/s, the
#: comparisons of 7,419 pairs (LoCoMo's and the dedup set's) unchanged.
_KEPT_TOKENS = 50_000
_latin_tokens: dict[tuple[str, bool], Token] = {}


def _latin_token(raw: str, quoted: bool) -> Token:
    """The token of ``raw`` (made once while kept: :data:`_KEPT_TOKENS`)."""
    found = _latin_tokens.get((raw, quoted))
    if found is None:
        if len(_latin_tokens) >= _KEPT_TOKENS:
            _latin_tokens.clear()
        found = _latin_tokens[raw, quoted] = _new_latin_token(raw, quoted)
    return found


def _new_latin_token(raw: str, quoted: bool) -> Token:
    low = raw.lower()
    if low[:1].isdigit():
        low = re.sub(r"(st|nd|rd|th)$", "", low)
        low = re.sub(r"(?<=\d),(?=\d{3}\b)", "", low)  # 20,000 -> 20000
        low = re.sub(r"(?<=\d):00$", "", low)            # 20:00 -> 20
    else:
        low = NUMBER_WORDS.get(low, low)
        low = f"wd:{WEEKDAYS[low]}" if low in WEEKDAYS else low
    return Token(raw, low, quoted=quoted)


def _cjk_tokens(run: str, quoted: bool) -> list[Token]:
    """One token per character; a run of numerals is one number (一百二十 is 120), the
    day of 周日 (周天) the number 7 as 周一 to 周六 are 1 to 6, and a word of
    :data:`CJK_UNNEGATED` one word."""
    out: list[Token] = []
    i = 0
    while i < len(run):
        word = next((w for w in CJK_UNNEGATED if run.startswith(w, i)), None)
        if word is not None:
            out.append(Token(word, word, cjk=True, quoted=quoted))
            i += len(word)
            continue
        # Sunday, the day after 周六; a token here, not a wording of CJK_WORDINGS: 周七
        # would join the numerals after it (周日三点 is not 73 o'clock)
        if run[i] in "日天" and i > 0 and run[i - 1] == "周":
            out.append(Token(run[i], "7", cjk=True, quoted=quoted))
            i += 1
            continue
        m = _CJK_NUMERAL.match(run, i)
        if m is not None and not (m.group() in "万" or _word_numeral(run, i, m.end())):
            out.append(Token(m.group(), _cjk_number(m.group()), cjk=True, quoted=quoted))
            i = m.end()
            continue
        out.append(Token(run[i], run[i], cjk=True, quoted=quoted))
        i += 1
    return out


def _word_numeral(run: str, start: int, end: int) -> bool:
    """A numeral that is part of a word rather than a number (一直, 一起, 统一, 唯一)."""
    word = run[max(0, start - 1):end + 1]
    return any(w in word for w in ("一直", "一起", "一样", "一下", "统一", "唯一", "万一",
                                   "一些", "一般", "一定", "一切"))


@dataclass(frozen=True)
class Change:
    """One place where the texts differ: what ``a`` has there, what ``b`` has."""

    a: tuple[str, ...]
    b: tuple[str, ...]
    kind: Kind
    side: Side
    #: How many tokens of ``a`` lie between the previous change and this one.
    gap: int = 0

    def describe(self) -> str:
        return f"{self.kind} in the {self.side}: {_shown(self.a)!r} -> {_shown(self.b)!r}"


def _shown(words: Sequence[str], most: int = 60) -> str:
    text = (" " if any(not is_cjk(w[:1]) for w in words) else "").join(words) or "nothing"
    return text if len(text) <= most else text[:most - 1] + "…"


class Comparison:
    """What :func:`compare` found. What the two texts' readings tell is set at once; the
    alignment (:attr:`shared`, :attr:`changes`) is made when first asked for. Whether the
    texts are :attr:`aligned`, or change a value (:attr:`value_change`), is often told
    without it: most pairs a store judges are turns or facts with little in common, and
    aligning them was most of a judgement. ``python -m benchmarks locomo-ingest`` now
    aligns 8% of the 7,162 pairs it compares, and went from 1,118-1,163 to 1,289-1,344
    turns/s in three alternating pairs of runs, every judgement of its pairs and of the
    dedup pairs unchanged."""

    __slots__ = ("_a", "_alignment", "_b", "labelled", "negation_differs", "numbers_conflict",
                 "same")

    def __init__(self, a: _Reading, b: _Reading) -> None:
        self._a, self._b = a, b
        self._alignment: tuple[float, tuple[Change, ...]] | None = None
        #: Both texts name numbers (values, times, dates) and neither text's are among
        #: the other's.
        self.numbers_conflict = bool(a.numbers and b.numbers and not (
            a.numbers <= b.numbers or b.numbers <= a.numbers))
        #: The texts are equal once normalized.
        self.same = a.norms == b.norms
        #: Only one of the texts says "not" (anywhere in it).
        self.negation_differs = a.negation != b.negation
        #: Both texts open with a speaker's label (turns of a conversation).
        self.labelled = a.labelled and b.labelled

    @property
    def shared(self) -> float:
        """The content tokens of both texts that the alignment matched, over the content
        tokens of the longer text (a speaker's label is no content)."""
        return self._aligned()[0]

    @property
    def changes(self) -> tuple[Change, ...]:
        """The places where content differs, in text order."""
        return self._aligned()[1]

    @property
    def names_apart(self) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """The names each text has and the other lacks (short forms matched: "TS" is
        "TypeScript"), when both have some: ("the simpsons",) against ("tom", "jerry")."""
        return _names_apart(self._a, self._b)

    @property
    def aligned(self) -> bool:
        """Most content is shared and it differs in at most two places: the changes are
        what the texts disagree on, not a rewording."""
        if self._alignment is None and not _may_align(self._a, self._b):
            return False
        return self.shared >= 0.5 and len(self.changes) <= 2

    @property
    def value_change(self) -> Change | None:
        """The first change of one value for another (``None`` at once when a text names
        no value: such a change has values on both sides, ``_kind``)."""
        if not (self._a.values and self._b.values):
            return None
        return next((ch for ch in self.changes if ch.kind == "value"), None)

    def _aligned(self) -> tuple[float, tuple[Change, ...]]:
        if self._alignment is None:
            self._alignment = _alignment(self._a, self._b)
        return self._alignment


def compare(a: str, b: str) -> Comparison:
    """Compare ``a`` (the stored memory) with ``b`` (the new one).

    >>> c = compare("The user lives in Lisbon.", "The user lives in Porto.")
    >>> c.aligned, c.changes[0].kind, c.changes[0].side
    (True, 'name', 'value')
    """
    return Comparison(_read(a), _read(b))


def _alignment(ra: _Reading, rb: _Reading) -> tuple[float, tuple[Change, ...]]:
    """Align the tokens of ``ra`` with those of ``rb``: the share of content matched
    (:attr:`Comparison.shared`) and the changes."""
    ta, tb = ra.tokens, rb.tokens
    ops = difflib.SequenceMatcher(None, ra.norms, rb.norms, autojunk=False).get_opcodes()
    before = ra.content_before
    # the content words of ``a`` each run of equal tokens holds (0 for the others)
    equal = [before[i2] - before[i1] if tag == "equal" else 0 for tag, i1, i2, _, _ in ops]
    matched = sum(equal)
    regions: list[tuple[int, list[Token], list[Token]]] = []  # (op index, a side, b side)
    for n, (tag, i1, i2, j1, j2) in enumerate(ops):
        if tag == "equal":
            continue
        xa, xb = list(ta[i1:i2]), list(tb[j1:j2])
        if _equivalent(xa, xb):
            matched += min(before[i2] - before[i1],
                           rb.content_before[j2] - rb.content_before[j1])
            continue
        regions.append((n, xa, xb))
    regions = _unmoved(regions)
    changes = tuple(_change(ops, equal, n, xa, xb, n - prev if prev is not None else 0)
                    for (n, xa, xb), prev in zip(regions, [None, *[r[0] for r in regions]],
                                                 strict=False))
    return matched / max(before[-1], rb.content_before[-1], 1), changes


def _may_align(ra: _Reading, rb: _Reading) -> bool:
    """False when the alignment cannot share half of the content (:attr:`Comparison.shared`
    under 0.5), told without aligning: it matches each content token of ``a`` once at
    most, in a run of equal norms or in an equivalent region (``_equivalent``), so only
    those that some token of ``b`` could match count (the same norm, a short form,
    another form of the word; any, where an acronym may stand for words)."""
    total = ra.content_before[-1]
    need = 0.5 * max(total, rb.content_before[-1], 1)
    if ra.capitals or rb.capitals:
        return total >= need
    words, bares, by_first = rb.words, rb.bares, rb.by_first
    found, left = 0, total
    for x, bare in ra.content_forms:
        left -= 1
        if x in words or (bare is not None and bare in bares) or any(
                _abbreviates(x, y) for y in by_first.get(x[:1], ())):
            found += 1
            if found >= need:
                return True
        elif found + left < need:
            return False
    return found >= need


def _names_apart(ra: _Reading, rb: _Reading
                 ) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The names of each text that the other has not (as a word or a long form), when
    both have such names; ``None`` otherwise."""
    na, nb = ra.names, rb.names
    only_a = {x for x in na - rb.words if not any(_abbreviates(x, y) for y in nb)
              and not _spelled_out(x, rb.initials)}
    only_b = {y for y in nb - ra.words if not any(_abbreviates(x, y) for x in na)
              and not _spelled_out(y, ra.initials)}
    return (tuple(sorted(only_a)), tuple(sorted(only_b))) if only_a and only_b else None


def _initials(ts: Sequence[Token]) -> str:
    """The first letters of the Latin content words of ``ts``, in order (what an acronym
    spells out, :func:`_spelled_out`)."""
    return "".join(t.norm[:1] or "\0" for t in ts if not t.function and not t.cjk)


def _spelled_out(name: str, initials: str) -> bool:
    """A text whose :func:`_initials` are ``initials`` has, one after another, the words
    whose initials are ``name`` (an acronym and its long form: CI / "Continuous
    integration"), as :func:`_acronym` reads them."""
    word = name.upper()
    spelled = word.lower()
    return (2 <= len(name) <= 6 and len(spelled) == len(name) and word.isalpha()
            and word.isupper() and spelled in initials)


def _names(ts: Sequence[Token]) -> set[str]:
    """The names of a text: quoted words and capitalized words after its first word (the
    first after its speaker's label). A capital that starts a later sentence counts too:
    texts that each name what the other does not are kept apart, which loses nothing,
    while a change is only another name when no sentence starts with it (``_kind``)."""
    first = label_length(ts)
    return {t.norm for i, t in enumerate(ts) if not t.function and not t.cjk
            and (t.quoted or (i > first and t.text[:1].isupper()))}


def _unmoved(regions: list[tuple[int, list[Token], list[Token]]]
             ) -> list[tuple[int, list[Token], list[Token]]]:
    """The regions less what only moved: a phrase deleted in one place and inserted in
    another ("Backups run every night" / "Every night the backups run") is no change.
    Each content token the other side has in *another* region is taken out."""
    if len(regions) < 2:  # nothing elsewhere: the region stands (compare kept it)
        return regions
    own_a = [_counts(xa) for _, xa, _ in regions]
    own_b = [_counts(xb) for _, _, xb in regions]
    all_a, all_b = _summed(own_a), _summed(own_b)
    out = []
    for (n, xa, xb), mine_a, mine_b in zip(regions, own_a, own_b, strict=True):
        ka = _kept(xa, all_b, mine_b)
        kb = _kept(xb, all_a, mine_a)
        if not _equivalent(ka, kb):
            out.append((n, ka, kb))
    return out


def _counts(ts: Sequence[Token]) -> dict[str, int]:
    """How many times each content token of ``ts`` (no function word) is there."""
    out: dict[str, int] = {}
    for t in ts:
        if not t.function:
            out[t.norm] = out.get(t.norm, 0) + 1
    return out


def _summed(counts: Sequence[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return out


def _kept(side: Sequence[Token], everywhere: dict[str, int], here: dict[str, int]
          ) -> list[Token]:
    """``side`` less each content token that the other side has elsewhere (``everywhere``
    less ``here``), one taken out for each it has there."""
    left: dict[str, int] = {}
    out = []
    for t in side:
        if not t.function:
            n = left.get(t.norm)
            if n is None:
                n = everywhere.get(t.norm, 0) - here.get(t.norm, 0)
            if n > 0:
                left[t.norm] = n - 1
                continue
            left[t.norm] = n
        out.append(t)
    return out


def _equivalent(xa: Sequence[Token], xb: Sequence[Token]) -> bool:
    """A difference that is no change: function words and punctuation only, a name
    and its short form (K8s / Kubernetes, TS / TypeScript, Go / Golang), or two forms
    of one word (deploys / deployments)."""
    ca = [t for t in xa if not t.function]
    cb = [t for t in xb if not t.function]
    if len(ca) == len(cb) == 1 and (_abbreviates(ca[0].norm, cb[0].norm)
                                    or _one_word(ca[0].norm, cb[0].norm)):
        return not any(t.negation for t in (*xa, *xb))
    if _acronym(ca, cb) or _acronym(cb, ca):
        return not any(t.negation for t in (*xa, *xb))
    return all(t.function and not t.negation for t in (*xa, *xb))


def _one_word(x: str, y: str) -> bool:
    """Two forms of one Latin word: the same less one of :data:`_ENDINGS` each (deploys /
    deployments, released / release, moving / moved; not user / uses, coder / codes)."""
    return x != y and x.isascii() and y.isascii() and _bare(x) == _bare(y)


#: Endings of the forms of one English word, the longest first.
_ENDINGS = ("ments", "ment", "ing", "es", "ed", "s", "e")


def _bare(word: str) -> str:
    """``word`` less its first ending of :data:`_ENDINGS` that leaves three letters."""
    if not word.isalpha():
        return word
    for ending in _ENDINGS:
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            return word[:-len(ending)]
    return word


def _acronym(short: Sequence[Token], long: Sequence[Token]) -> bool:
    """``short`` is one word in capitals made of the initials of the words of ``long``:
    CI / continuous integration, SRE / site reliability engineering."""
    if len(short) != 1 or not 2 <= len(long) <= 6:
        return False
    word = short[0].text
    return (word.isalpha() and word.isupper() and not any(t.cjk for t in long)
            and word.lower() == "".join(t.norm[:1] for t in long))


def _abbreviates(x: str, y: str) -> bool:
    """One word is a short form of the other: a numeronym (k8s: k, 8 letters, s), the
    other's start (go, golang), or its letters in order from the first (ts, typescript)."""
    short, long = (x, y) if len(x) <= len(y) else (y, x)
    if len(short) < 2 or short == long or not long.isalpha() or short[0] != long[0]:
        return False
    m = re.fullmatch(r"([a-z])(\d+)([a-z])", short)
    if m is not None:
        return long[-1] == m.group(3) and len(long) - 2 == int(m.group(2))
    if long.startswith(short):
        return True
    it = iter(long)
    return len(short) <= 4 and all(c in it for c in short)


def _change(ops: Sequence[tuple[str, int, int, int, int]], equal: Sequence[int], n: int,
            xa: Sequence[Token], xb: Sequence[Token], since: int) -> Change:
    before, after = sum(equal[:n]), sum(equal[n + 1:])
    gap = sum(i2 - i1 for _, i1, i2, _, _ in ops[n - since + 1:n]) if since else 0
    return Change(tuple(t.text for t in xa), tuple(t.text for t in xb),
                  _kind(xa, xb), "subject" if after >= before else "value", gap)


def _kind(xa: Sequence[Token], xb: Sequence[Token]) -> Kind:
    if any(t.negation for t in xa) != any(t.negation for t in xb) or _antonyms(xa, xb):
        return "negation"
    content = [t for t in (*xa, *xb) if not t.function]
    if any(t.value for t in xa) and any(t.value for t in xb) and not _one_time(xa, xb):
        return "value"  # one value for another
    if any(t.name for t in content):
        return "name"
    return "word"


def _one_time(xa: Sequence[Token], xb: Sequence[Token]) -> bool:
    """Both sides name the same times, one on a 24-hour clock where the other is on a
    12-hour one (下午 15:15 / 3:15): no other value."""
    va = {t.norm for t in xa if t.value}
    vb = {t.norm for t in xb if t.value}
    return va != vb and _twelve_hour(va) == _twelve_hour(vb)


def _twelve_hour(values: set[str]) -> set[str]:
    """``values`` with the afternoon times ``H:MM`` on a 12-hour clock: 15:15 as 3:15."""
    out = set()
    for v in values:
        m = re.fullmatch(r"(\d{1,2}):(\d{2})", v)
        out.add(f"{int(m.group(1)) - 12}:{m.group(2)}" if m and 12 < int(m.group(1)) < 24
                else v)
    return out


def _antonyms(xa: Sequence[Token], xb: Sequence[Token]) -> bool:
    """One word and its opposite by prefix: likes / dislikes, happy / unhappy."""
    a, b = {t.norm for t in xa}, {t.norm for t in xb}
    return _prefixed(a, b) or _prefixed(b, a)


def _prefixed(words: set[str], others: set[str]) -> bool:
    """A word of ``words`` is one of :data:`ANTONYM_PREFIXES` before a word of ``others``
    of more than two letters."""
    for w in words:
        m = _ANTONYM.fullmatch(w)
        if m is not None and m.group(1) in others:
            return True
    return False


#: A word made of one of :data:`ANTONYM_PREFIXES` and more than two letters (no prefix
#: starts another, so a word has one at most).
_ANTONYM = re.compile(f"(?:{'|'.join(ANTONYM_PREFIXES)})(.{{3,}})", re.DOTALL)


def _numbers(ts: Sequence[Token]) -> frozenset[str]:
    """The numbers of a text; a time also names its hour (9:30 is "half past nine"), and
    an afternoon time its hour on a 12-hour clock (15:15 is also 3:15: "三点十五分" says
    no "afternoon" but does not contradict "下午三点一刻")."""
    found = {t.norm for t in ts if t.norm[:1].isdigit()}
    times = [n.split(":") for n in found if re.fullmatch(r"\d{1,2}:\d{2}", n)]
    found |= {h for h, _ in times}
    found |= {f"{int(h) - 12}{suffix}" for h, m in times if 12 < int(h) < 24
              for suffix in ("", f":{m}")}
    return frozenset(found)
