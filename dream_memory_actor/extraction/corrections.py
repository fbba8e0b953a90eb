"""Corrections: an extracted rule or fact that replaces one the owner has.

An extracted item may say what it replaces (``supersedes``: an existing item's id
or its words). :func:`resolve` finds that item among the owner's current rules
(or facts) of the same kind, and only when one item clearly fits; a correction
that names nothing the owner has is an ordinary candidate. A resolved correction
is never written by the extraction: it waits in the pending queue, showing the
item it would replace, and confirming it supersedes that item (``storage.history``).
That is where a wrong guess would cost most: a person decides.

The rule-based extractor recognises these explicit corrections (sentence start or
whole sentence; the quote is the new item, the part after the marker what it
replaces). The two looser forms start at the ``pending`` tier: unresolved, they
still wait for a person (they also read as plain statements, "我把代码改成了 Python").

==========================================  ======  ==========  ===========================
phrasing                                    kind    confidence  replaces
==========================================  ======  ==========  ===========================
"from now on X instead of Y"                rule    0.90        Y
"X, not Y anymore" (the comma is needed)    rule    0.75        Y ("I ..." gives a fact)
"从现在开始/以后 X 而不是 Y"                    rule    0.90        Y
"以后不要X" / "以后别X" / "不要再X了"             rule    0.85        X
"(把)X改成Y" / "X改为Y"                        rule    0.75        X
==========================================  ======  ==========  ===========================

>>> match_correction("From now on, use tabs instead of spaces.").supersedes
'spaces'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..models import MemoryFact, MemoryRule, MemorySnapshot
from ..text import content_hash, fold, terms
from .candidates import ExtractedItem

#: A reference by words fits an item when this share of its terms are the item's.
MIN_OVERLAP = 0.6

#: What a statement's words end with that is not part of them.
TRAILING = " \t.,;:!。，；：！、"


def resolve(snap: MemorySnapshot, kind: str, ref: str | None
            ) -> MemoryRule | MemoryFact | None:
    """The current rule (``kind`` "rule") or fact of ``snap`` that ``ref`` names: its id,
    its text (case and spacing aside), or the one item that holds most of ``ref``'s
    terms (at least ``MIN_OVERLAP``; a tie names nothing)."""
    if not ref or kind not in ("rule", "fact"):
        return None
    items: Sequence[MemoryRule | MemoryFact] = snap.rules if kind == "rule" else snap.facts
    by_id = next((i for i in items if i.id == ref), None)
    if by_id is not None:
        return by_id
    h = content_hash(ref)
    same = next((i for i in items if content_hash(i.content) == h), None)
    if same is not None:
        return same
    wanted = set(terms(ref))
    if not wanted:
        return None
    scored = sorted(((len(wanted & set(terms(i.content))) / len(wanted), i) for i in items),
                    key=lambda p: -p[0])
    if not scored or scored[0][0] < MIN_OVERLAP:
        return None
    if len(scored) > 1 and scored[1][0] == scored[0][0]:
        folded = fold(ref)  # a tie: only an item containing the words verbatim wins
        inside = [i for s, i in scored if s == scored[0][0] and folded in fold(i.content)]
        return inside[0] if len(inside) == 1 else None
    return scored[0][1]


@dataclass(frozen=True)
class Correction:
    """One explicit correction: ``new`` and ``old`` groups; the kind by ``kind_of``."""

    pattern: re.Pattern[str]
    confidence: float
    kind_of: Callable[[str], str]
    content: Callable[[str, str], str]


def _rule(_: str) -> str:
    return "rule"


def _rule_or_fact(new: str) -> str:
    return "fact" if re.match(r"(?i)(?:i|i'm|i am|my|we|our)\b", new) else "rule"


def capitalized(text: str) -> str:
    """``text`` with its first character upper-cased."""
    return text[:1].upper() + text[1:]


CORRECTIONS: tuple[Correction, ...] = (
    Correction(re.compile(r"^from now on\b[\s,:]*(?P<new>.+?)\s+instead of\s+(?P<old>.+)$",
                          re.IGNORECASE | re.DOTALL), 0.90, _rule,
               lambda new, old: capitalized(f"{new} instead of {old}")),
    Correction(re.compile(r"^(?P<new>.+?),\s*(?:but\s+)?not\s+(?P<old>.+?)\s+any\s?more$",
                          re.IGNORECASE | re.DOTALL), 0.75, _rule_or_fact,
               lambda new, old: capitalized(f"{new}, not {old}")),
    Correction(re.compile(r"^(?:从现在开始|从现在起|从今以后|今后|以后)[，,：:\s]*(?P<new>.+?)"
                          r"[，,\s]*而不是(?P<old>.+)$", re.DOTALL), 0.90, _rule,
               lambda new, old: f"{new}，而不是{old}"),
    Correction(re.compile(r"^(?:从现在开始|从今以后|今后|以后)[，,：:\s]*(?:不要|别)再?(?P<old>.+)$",
                          re.DOTALL), 0.85, _rule, lambda new, old: f"不要{old}"),
    Correction(re.compile(r"^不要再(?P<old>.+?)了?$", re.DOTALL), 0.85, _rule,
               lambda new, old: f"不要{old}"),
    Correction(re.compile(r"^(?:以后|今后)?[，,\s]*把?(?P<old>.+?)(?:改成|改为)(?P<new>.+)$",
                          re.DOTALL), 0.75, _rule, lambda new, old: f"{old}改成{new}"),
)


def match_correction(body: str, evidence: str | None = None) -> ExtractedItem | None:
    """The correction ``body`` (a sentence without its lead-in) states, or ``None``."""
    for c in CORRECTIONS:
        m = c.pattern.match(body)
        if m is None:
            continue
        old = m.group("old").strip().rstrip(TRAILING)
        new = (m.groupdict().get("new") or old).strip().rstrip(TRAILING)
        if len(old) < 2 or len(new) < 2:
            return None
        return ExtractedItem(kind=c.kind_of(new), content=c.content(new, old),
                             confidence=c.confidence, evidence=evidence or body,
                             supersedes=old)
    return None
