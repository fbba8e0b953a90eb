"""What a store does, decided once for every backend: pure functions.

``judge``: what a new memory is to the owner's nearest ones (:class:`Judgement`):
a ``duplicate`` (merged into it), an ``update`` (it supersedes it, both kept in the
history), ``distinct`` or ``unsure`` (stored beside it). ``merged``: what a merge
does to the surviving memory (content updated, metadata merged, the original
embedding kept, ``merged_from`` / ``merged_at`` recorded so the merge can be
traced). ``df_delta``: how a write moves the owner's document frequencies.

A similarity alone cannot tell "the staging web server listens on 8080" from "the
staging admin server listens on 8080" (two facts), nor "Kubernetes 1.27" from
"Kubernetes 1.29" (a changed value): a sentence embedding puts them as close as
two wordings of one fact. So each near memory is judged on the similarity *and*
on what the two texts differ in (``pairs.compare``):

- texts that share most of their content and differ in one place are judged by
  that place: a negation or another value (a number, date, time, weekday) is an
  ``update``; another name in the value ("lives in Lisbon" / "in Porto") too (a name
  only added or dropped is said more or less fully, not replaced); a
  change in the subject ("the **web** server") is ``distinct``; another common word
  in the value ("a desk at the office" / "at home") is ``unsure``; so is a change too
  long to be one value ("playing Mario Kart" / "at the cinema": another event), and a
  rewording that also swaps what the sentence ends on ("喜欢大象" / "最喜欢企鹅");
- texts worded apart (little shared) are a ``duplicate`` when their similarity is
  above the paraphrase cut and nothing conflicts: no other number or value, not one
  saying "not" where the other does not, not each naming what the other does not
  ("The Simpsons" / "Tom and Jerry"; a short form, "TS" for "TypeScript", is the same
  name); ``unsure`` when something does, and below the cut, where the similarity
  alone cannot tell a rewording from another fact of the same subject (``distinct``
  where a rewording never merges: turns, memories with a context; or without a
  similarity);
- the same text, case and spaces aside, is a ``duplicate`` whatever the similarity.

Two turns of a conversation ("Jon: Thanks!" / "Jon: Bye!") open with their speakers'
labels, which a sentence embedding reads with the rest: turns of one speaker, or of two
who name each other, are near whatever they say. Their cosine so finds candidates but
never merges two turns worded apart (as for memories with a context, ``judge_near``),
and the label is no content the two share (``pairs``): what the turns say decides.

One substituted content word is so never a duplicate, and a rewording that
conflicts in nothing merges below the plain duplicate cut. ``unsure`` is what a
language model, when one is configured, decides (``judge_model``); without one, it
is stored beside the other, which loses nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from ..limits import DEFAULT_LIMITS, Limits
from ..models import MemoryFact, MemoryRule, MemoryVersion, StoreResult, VectorMemory
from ..text import content_hash, has_cjk, is_cjk, terms
from ..validation import RESERVED_METADATA_KEYS
from .pairs import Change, Comparison, compare
from .versions import closed, successor

#: How many earlier contents ``merged_from`` keeps by default (oldest dropped first).
MERGE_HISTORY = DEFAULT_LIMITS.merge_history


def merged(existing: VectorMemory, content: str, metadata: dict[str, Any],
           now: datetime, limits: Limits = DEFAULT_LIMITS) -> VectorMemory:
    """The memory after merging ``content`` / ``metadata`` into ``existing``.

    New metadata keys win over old ones; the oldest old keys are dropped while the
    merged metadata has more keys or serialized bytes than ``limits`` allow.
    ``merged_from`` lists the earlier contents, newest kept, at most
    ``limits.merge_history`` of them and ``limits.merge_history_bytes`` in all;
    ``merged_at`` is the time of this merge, ``merge_count`` counts merges.
    ``updated_at`` moves to ``now`` (never backwards).
    """
    history = [h for h in existing.metadata.get("merged_from", []) if isinstance(h, str)]
    if existing.content != content:
        history.append(existing.content)
    meta = _bounded({k: v for k, v in existing.metadata.items()
                     if k not in RESERVED_METADATA_KEYS}, metadata, limits)
    count = int(existing.metadata.get("merge_count", 0)) + 1
    return _recorded(existing, content, meta, history, count, now, limits)


def absorbed(kept: VectorMemory, others: Sequence[VectorMemory], content: str,
             now: datetime, limits: Limits = DEFAULT_LIMITS) -> VectorMemory:
    """``kept`` after a consolidation pass merged its duplicates ``others`` (oldest
    first) into it, with ``content``: the merge records a store's merge writes
    (:func:`merged`), the others' contents in ``merged_from`` (and ``kept``'s own when
    ``content`` replaces it), their metadata under ``kept``'s."""
    history = [h for h in kept.metadata.get("merged_from", []) if isinstance(h, str)]
    count = int(kept.metadata.get("merge_count", 0))
    theirs: dict[str, Any] = {}
    for m in others:
        history += [h for h in m.metadata.get("merged_from", []) if isinstance(h, str)]
        history.append(m.content)
        count += int(m.metadata.get("merge_count", 0)) + 1
        theirs.update((k, v) for k, v in m.metadata.items() if k not in RESERVED_METADATA_KEYS)
    if content != kept.content:
        history.append(kept.content)
    meta = _bounded(theirs, {k: v for k, v in kept.metadata.items()
                             if k not in RESERVED_METADATA_KEYS}, limits)
    return _recorded(kept, content, meta, history, count, now, limits)


def _recorded(memory: VectorMemory, content: str, meta: dict[str, Any], history: list[str],
              count: int, now: datetime, limits: Limits) -> VectorMemory:
    """``memory`` with ``content`` and ``meta`` and the records of a merge at ``now``:
    ``merged_from`` (the newest of ``history`` within ``limits``), ``merged_at`` and
    ``merge_count`` (``count``); ``updated_at`` moves to ``now`` (never backwards)."""
    meta["merged_from"] = _recent(history, limits)
    meta["merged_at"] = now.isoformat()
    meta["merge_count"] = count
    return memory.model_copy(update={"content": content, "metadata": meta,
                                     "updated_at": max(memory.updated_at, now)})


def _bounded(old: dict[str, Any], new: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """``old`` updated by ``new``, the oldest keys of ``old`` only dropped to fit ``limits``
    (``new`` fits them: it was checked)."""
    meta = {**old, **new}
    kept = [k for k in old if k not in new]  # droppable, oldest first
    size = _json_size(meta)
    while kept and (len(meta) > limits.metadata_keys or size > limits.metadata_bytes):
        key = kept.pop(0)
        # '"key": value, ' leaves: the size of {"key": value}, its braces counted for ", "
        size -= _json_size({key: meta.pop(key)})
    return meta


def _recent(history: list[str], limits: Limits) -> list[str]:
    """The newest entries of ``history`` within the count and byte bounds, oldest first."""
    out: list[str] = []
    total = 0
    for text in reversed(history[-limits.merge_history:] if limits.merge_history else []):
        total += len(text.encode("utf-8"))
        if total > limits.merge_history_bytes:
            break
        out.append(text)
    out.reverse()
    return out


def _json_size(value: dict[str, Any]) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))


Outcome = Literal["duplicate", "update", "distinct", "unsure"]



@dataclass(frozen=True)
class Neighbour:
    """A memory the new one is judged against: its id, text and raw cosine to the new
    embedding (``None``: found by its text, without a vector). ``context``: either
    memory carries a context (``VectorMemory.context``), so the cosine of their
    embeddings measures their contexts as much as their contents."""

    id: str
    content: str
    similarity: float | None
    context: bool = False


@dataclass(frozen=True)
class Judgement:
    """What a new memory is to a stored one (``memory_id``), and why."""

    outcome: Outcome
    memory_id: str | None = None
    similarity: float | None = None
    reason: str = ""


@dataclass(frozen=True)
class Band:
    """The raw cosine cuts of one script (Latin, or Chinese/Japanese/Korean)."""

    #: Below this, a memory is not judged at all.
    candidate: float
    #: Above this, a rewording that conflicts in nothing is a duplicate.
    paraphrase: float


#: Asks a language model about the pairs the rules call ``unsure``: (stored text, new
#: text) to a verdict, or ``None`` when it gave none (the rules' answer stands).
Ask = Callable[[str, str], Awaitable["Outcome | None"]]


@dataclass(frozen=True)
class Cuts:
    """What the write path of one store judges with: the cuts per script (raw cosines of
    the store's model, from its calibration), how many nearest memories it judges, and
    the model that decides the unsure pairs (``None``: none)."""

    latin: Band
    cjk: Band
    nearest: int = 3
    ask: Ask | None = field(default=None, compare=False)

    @classmethod
    def uniform(cls, threshold: float) -> Cuts:
        """One cut for everything: memories above ``threshold`` are judged, and a
        rewording above it merges (the cut of a store given a bare threshold)."""
        band = Band(threshold, threshold)
        return cls(band, band)

    @classmethod
    def off(cls) -> Cuts:
        """No judgement: no memory is judged, not even one of the same text, so every
        write is stored beside the others (records that are not memories to merge,
        such as a LangGraph store's items)."""
        band = Band(1.0, 1.0)
        return cls(band, band, nearest=0)

    def band(self, text: str) -> Band:
        return self.cjk if has_cjk(text) else self.latin


def judge_pair(stored: str, new: str, similarity: float | None, band: Band) -> Judgement:
    """What ``new`` is to ``stored`` (see the module doc); ``memory_id`` left unset."""
    c = compare(stored, new)
    if c.same:
        return Judgement("duplicate", similarity=similarity, reason="the same text")
    if c.labelled:
        band = Band(band.candidate, math.inf)
    if c.aligned:
        found = _aligned(c, similarity)
        if found is not None:
            return found
    sim = "no similarity" if similarity is None else f"similarity {similarity:.3f}"
    conflict = _conflict(c)
    if conflict is not None:
        return Judgement("unsure", similarity=similarity,
                         reason=f"worded apart ({sim}) and {conflict}")
    if similarity is not None and similarity > band.paraphrase:
        return Judgement("duplicate", similarity=similarity,
                         reason=f"a rewording ({sim}) with nothing in conflict")
    if similarity is not None and band.paraphrase <= 1:
        return Judgement("unsure", similarity=similarity,
                         reason=f"worded apart, below the rewording cut ({sim})")
    return Judgement("distinct", similarity=similarity, reason=f"another fact ({sim})")


def _aligned(c: Comparison, similarity: float | None) -> Judgement | None:
    """Texts that share most of their content: judged by what is changed where; ``None``
    for a rewording in several places, which only the similarity can judge."""
    places = _places(c)
    if not c.changes:
        return Judgement("duplicate", similarity=similarity,
                         reason="the same content in other words")
    first = places[0]
    if len(places) > 1 and all(p.kind == "word" for p in places):
        swapped = next((p for p in places if p.side == "value" and p.a and p.b), None)
        if swapped is not None:  # "liked the elephants" -> "liked the penguins"
            return Judgement("unsure", similarity=similarity,
                             reason=f"reworded, and another word for what it says: "
                                    f"{swapped.describe()}")
        return None  # reworded in several places: as texts worded apart
    if len(places) == 1 and first.kind == "negation" and c.shared >= 0.6:
        return Judgement("update", similarity=similarity, reason=f"reversed: {first.describe()}")
    if len(places) == 1 and first.kind == "value" and _short(first):
        return Judgement("update", similarity=similarity,
                         reason=f"another value: {first.describe()}")
    subject = next((p for p in c.changes if p.side == "subject"), None)
    if subject is not None:
        return Judgement("distinct", similarity=similarity,
                         reason=f"another subject: {subject.describe()}")
    if len(places) == 1 and first.kind == "name" and _short(first) and first.a and first.b:
        return Judgement("update", similarity=similarity,
                         reason=f"another value: {first.describe()}")
    return Judgement("unsure", similarity=similarity,
                     reason="; ".join(p.describe() for p in c.changes))


def _places(c: Comparison) -> list[Change]:
    """The places where the texts differ: changes at most one token apart are one (6 月
    30 日 -> 7 月 15 日 is one date, 儿子 -> 女儿 one word), of their strongest kind."""
    out: list[Change] = []
    for ch in c.changes:
        if out and ch.gap <= 1 and (out[-1].kind == ch.kind or "word" in (out[-1].kind, ch.kind)):
            if ch.kind != "word":
                out[-1] = ch
            continue
        out.append(ch)
    return out


def _short(ch: Change) -> bool:
    """A change small enough to be one value replaced by another ("1.27" -> "1.29",
    "Berlin" -> "Lisbon"), not one event told instead of another ("spent the afternoon
    playing It Takes Two" -> "a picnic at the park")."""
    most = 4 if any(is_cjk(t[:1]) for t in (*ch.a, *ch.b)) else 2
    return len(ch.a) <= most and len(ch.b) <= most


def _conflict(c: Comparison) -> str | None:
    """Why two texts worded apart may not be one fact, or ``None``: their numbers or
    values differ, only one of them says "not", or each names something the other
    does not ("The Simpsons" -> "Tom and Jerry"; "TS" and "TypeScript" are one name)."""
    if c.numbers_conflict:
        return "their numbers differ"
    if (ch := c.value_change) is not None:
        return ch.describe()
    if c.negation_differs:
        return "only one of them says not"
    if c.names_apart is not None:
        only_a, only_b = c.names_apart
        return f"each names what the other does not: {list(only_a)} / {list(only_b)}"
    return None


def judge_near(stored: str, new: str, similarity: float | None, cuts: Cuts,
               context: bool = False) -> Judgement:
    """:func:`judge_pair` with the cuts of ``new``'s script. ``context``: either memory
    carries one (the turns before it, its date); two such memories are near when their
    contexts are, whatever they say, so their cosine finds candidates but never merges
    two texts worded apart: the comparison of the contents decides alone."""
    band = cuts.band(new)
    if context:
        band = Band(band.candidate, math.inf)
    return judge_pair(stored, new, similarity, band)


async def asked(j: Judgement, stored: str, new: str, cuts: Cuts) -> Judgement:
    """``j``, or, for a pair the rules call ``unsure``, the verdict of ``cuts.ask`` (the
    judge model) when it gives one."""
    if j.outcome != "unsure" or cuts.ask is None:
        return j
    verdict = await cuts.ask(stored, new)
    if verdict is None or verdict == "unsure":
        return j
    return replace(j, outcome=verdict, reason=f"judged by the model; rules: {j.reason}")


def judge(content: str, neighbours: Sequence[Neighbour], cuts: Cuts) -> Judgement | None:
    """What ``content`` is to the owner's memories nearest to it (``neighbours``, best
    first): a duplicate of the most similar duplicate, else an update of the most
    similar it updates, else distinct or unsure (of the most similar judged); ``None``
    when none is near enough to judge (below the candidate cut, and not the same text).
    Only the first ``cuts.nearest`` neighbours are judged (none: ``Cuts.off``)."""
    if cuts.nearest == 0:
        return None
    band = cuts.band(content)
    same = content_hash(content)
    judged = [
        replace(judge_near(n.content, content, n.similarity, cuts, n.context), memory_id=n.id)
        for i, n in enumerate(neighbours)
        if content_hash(n.content) == same or (i < cuts.nearest and (
            n.similarity is None or n.similarity > band.candidate))
    ]
    for wanted in ("duplicate", "update"):
        found = next((j for j in judged if j.outcome == wanted), None)
        if found is not None:
            return found
    return judged[0] if judged else None


def updated_item(items: Sequence[MemoryRule | MemoryFact], text: str
                 ) -> tuple[MemoryRule | MemoryFact, str] | None:
    """The current rule or fact of ``items`` that ``text`` is a new version of, and why:
    the two texts aligned with one place changed, and that a name or a negation on
    either side (a rule or fact is about its owner: "a **Java** developer" -> "a **Go**
    developer" is the owner changed, not another owner), or a value after what the
    texts share ("deploys on **Friday**"; "server **0** is in Oslo" -> "server **1**"
    names another server). ``None`` when
    ``text`` already is an item, when none fits, or when two fit equally well."""
    h = content_hash(text)
    if any(content_hash(i.content) == h for i in items):
        return None
    fits: list[tuple[float, MemoryRule | MemoryFact, Change]] = []
    for item in items:
        c = compare(item.content, text)
        places = _places(c) if c.aligned else []
        if len(places) == 1 and _short(places[0]) and (
                places[0].kind in ("name", "negation")
                or (places[0].kind == "value" and places[0].side == "value")):
            fits.append((c.shared, item, places[0]))
    fits.sort(key=lambda f: -f[0])
    if not fits or (len(fits) > 1 and fits[1][0] == fits[0][0]):
        return None
    _, item, change = fits[0]
    return item, f"another {change.describe()}"


async def decide(content: str, neighbours: Sequence[Neighbour], cuts: Cuts
                 ) -> Judgement | None:
    """:func:`judge`, with ``cuts.ask`` deciding a pair the rules call ``unsure``."""
    j = judge(content, neighbours, cuts)
    if j is None:
        return None
    stored = next(n for n in neighbours if n.id == j.memory_id)
    return await asked(j, stored.content, content, cuts)


def df_delta(old: str | None, new: str | None) -> dict[str, int]:
    """How a write changes document frequencies: +1 for each term only ``new`` has, -1 for
    each only ``old`` has (insert: ``old`` None; delete: ``new`` None).

    >>> df_delta("deploy helm", "deploy argo")
    {'helm': -1, 'argo': 1}
    """
    if old == new:
        return {}
    gone = [] if old is None else terms(old)
    come = [] if new is None else terms(new)
    come_set = set(come)
    gone_set = set(gone)
    delta = {t: -1 for t in gone if t not in come_set}
    delta.update({t: 1 for t in come if t not in gone_set})
    return delta


@dataclass(frozen=True)
class Write:
    """What a store writes once judged (:func:`outcome_of`): the memory to write (the
    new one, or the merged one keeping its vector), the version it closes into the
    history (``None``: nothing closed), and the live memory it removes (an update's
    predecessor)."""

    result: StoreResult
    version: MemoryVersion | None = None
    removes: str | None = None

    @property
    def memory(self) -> VectorMemory:
        return self.result.memory

    @property
    def inserts(self) -> bool:
        """A new row (an insert, or a successor), not a merge into an existing one."""
        return not self.result.merged


def outcome_of(judgement: Judgement | None, near: VectorMemory | None, owner: str,
               content: str, metadata: dict[str, Any], has_embedding: bool, now: datetime,
               limits: Limits = DEFAULT_LIMITS, context: str | None = None) -> Write:
    """The write a judgement calls for, the same on every backend.

    ``near`` is the stored memory the judgement names (``judgement.memory_id``).
    A ``duplicate`` merges into it (``merged``: its context stays, with the embedding it
    was made with) and closes its previous content as a ``"merge"`` version when the
    content changes; an ``update`` writes a successor (``versions.successor``:
    ``metadata``, or else the old memory's; ``context``) and closes the old memory as a
    ``"supersede"`` version naming it, with the judgement's reason; anything else
    inserts a new memory (with ``context``).
    """
    j = judgement
    info: dict[str, Any] = {} if j is None else {
        "judgement": j.outcome, "related": j.memory_id, "reason": j.reason,
        "similarity": j.similarity}
    if j is not None and near is not None and j.outcome == "duplicate":
        new = merged(near, content, metadata, now, limits)
        version = closed(near, now, "merge") if near.content != new.content else None
        return Write(StoreResult(memory=new, merged=True, **info), version)
    if j is not None and near is not None and j.outcome == "update":
        new = successor(near, content, metadata or None, has_embedding, now, context)
        version = closed(near, now, "supersede", superseded_by=new.id, reason=j.reason)
        return Write(StoreResult(memory=new, merged=False, superseded=True, **info),
                     version, removes=near.id)
    mem = VectorMemory(owner=owner, content=content, metadata=metadata, context=context,
                       created_at=now, updated_at=now, has_embedding=has_embedding)
    return Write(StoreResult(memory=mem, merged=False, **info))
