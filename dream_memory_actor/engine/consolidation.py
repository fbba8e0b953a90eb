"""The consolidation pass ("dreaming"): what one owner's memories would be, tidied, as
proposals a person decides.

The pass reads an owner's live memories with their embeddings and judges pairs of them
as a store judges a new memory against its nearest ones (``storage.dedup.judge_pair``,
with the store's cuts, and the judge model on the pairs the rules call ``unsure``):

* memories that say one thing become one ``merge`` proposal: a cluster of duplicates,
  each judged a duplicate of the one kept (the newest, whose text is the result, or
  the judge model's wording of them all);
* a memory that a newer one updates ("Kubernetes 1.27" -> "1.29") becomes a
  ``supersede`` proposal, the newer kept;
* with ``consolidation_expire_after_days``, a memory neither changed nor found by a
  search for longer (``engine.reads``) becomes an ``expire`` proposal.

Among the owner's rules and facts, one that a newer one updates or contradicts becomes
a pending correction (:func:`corrections`), decided like any other: the newer wins
when a person confirms it. With ``consolidation_expire_after_days``, a status value
without an expiry of its own and unchanged for longer becomes an ``expire`` of that
key (:func:`status_expiries`), decided as a correction is: a person's confirmation
deletes it.

Each item is in one proposal at most, so they can be decided in any order, and a
proposal already decided for the same items (rejected, or confirmed and undone) is
not made again. Nothing is written here: ``ExtractionService.consolidate`` queues the
proposals as pending items, and a confirmed one is applied through the owner's writer
(``VectorStore.apply_proposal``), reversibly (``undo_proposal``).

Pairs are found as a store finds them: each memory's ``cuts.nearest`` most similar
by cosine above the candidate cut (a matrix product in blocks); memories without an
embedding, by the rarest words they share.

The pass runs where the owner's writes run (the engine's event loop; on Ray, the
VectorIndex actor's), and judging the pairs of a large owner takes seconds to minutes:
it lets the loop go every ``SLICE_S`` of work, so a write waits for a slice, not for
the pass.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from ..history import StatusChange, last_change
from ..models import (
    PROPOSAL_KINDS,
    ExtractedKind,
    MemoryFact,
    MemoryPendingItem,
    MemoryRule,
    MemorySnapshot,
    Proposal,
    ProposalKind,
    Touched,
    VectorMemory,
)
from ..scoring import cosine
from ..storage.dedup import Cuts, Judgement, asked, judge_near, updated_item
from ..storage.ops import SHOWN_CHARS, pending_fingerprint
from ..text import terms
from ..validation.l1 import MAX_TOUCHED

#: Rows of the similarity matrix computed at once (a block of 256 x n float32).
BLOCK = 256
#: The most characters of the memories' texts a proposal's evidence shows.
EVIDENCE_CHARS = 2000
#: Words held by more memories than this do not make two memories a pair by themselves.
COMMON_WORD = 50
#: The longest the pass computes before it lets other work on its event loop run (s).
#: A store waits about one slice per step it awaits: at 10,000 memories a writer's
#: median wait during a pass was 73 ms with 2 ms slices and 41 ms with 0.5 ms, the pass
#: 20 s and 22 s (``python -m benchmarks consolidation --parts scale``).
SLICE_S = 0.0005

Item = tuple[VectorMemory, "list[float] | None"]
#: A merge's texts, oldest first, to the one text a model words for them (or ``None``).
Phrase = Callable[[list[str]], Awaitable["str | None"]]


class _Slices:
    """Awaited between steps of the pass: lets the event loop go once ``SLICE_S`` of
    work has passed since it last did."""

    def __init__(self) -> None:
        self._end = time.perf_counter() + SLICE_S

    async def __call__(self) -> None:
        if time.perf_counter() > self._end:
            await asyncio.sleep(0)
            self._end = time.perf_counter() + SLICE_S


@dataclass(frozen=True)
class Pair:
    """Two memories judged: ``old`` the earlier changed, ``new`` the later."""

    old: VectorMemory
    new: VectorMemory
    judgement: Judgement


async def proposals(items: Sequence[Item], cuts: Cuts, *, skip: Iterable[str] = (),
                    expire_before: datetime | None = None,
                    reads: Mapping[str, datetime] | None = None, most: int = 100,
                    expires_at: datetime | None = None, phrase: Phrase | None = None
                    ) -> list[MemoryPendingItem]:
    """The proposals for an owner whose live memories are ``items`` (with their
    embeddings), at most ``most`` of them, none whose fingerprint is in ``skip``
    (``storage.ops.pending_fingerprint``: already decided, or queued). Memories neither
    changed nor read (``reads``: when a search last found each) before
    ``expire_before`` are proposed to expire. ``expires_at``: when the queued
    proposals expire unless decided. ``phrase`` (a judge model's) words a merge's
    result from its memories' texts, oldest first; without it, or when it gives
    none, the newest text is the result."""
    reads = reads or {}
    mems = sorted((m for m, _ in items), key=lambda m: (m.updated_at, m.id))
    vecs = {m.id: v for m, v in items if v is not None}
    judged: dict[tuple[str, str], Pair] = {}
    pause = _Slices()
    async for found in _pairs(mems, vecs, cuts):
        await pause()
        if found is None:
            continue
        a, b, sim = found
        old, new = (a, b) if (a.updated_at, a.id) <= (b.updated_at, b.id) else (b, a)
        key = (old.id, new.id)
        if key not in judged:
            judged[key] = Pair(old, new, await _judge(old, new, sim, cuts))
    skipped = set(skip)
    offered: dict[ProposalKind, list[MemoryPendingItem]] = {k: [] for k in PROPOSAL_KINDS}
    used: set[str] = set()

    def offer(kind: ProposalKind, touched: Sequence[VectorMemory], keep: VectorMemory | None,
              reason: str, confidence: float) -> None:
        if any(m.id in used for m in touched):
            return
        item = MemoryPendingItem(
            kind=kind, content=None if keep is None else keep.content,
            confidence=min(1.0, max(0.0, confidence)), source="consolidation",
            expires_at=expires_at, evidence=_evidence(touched, keep),
            proposal=Proposal(touches=tuple(Touched(id=m.id, content=m.content,
                                                    updated_at=m.updated_at)
                                            for m in touched),
                              keep=None if keep is None else keep.id, reason=reason),
        )
        if pending_fingerprint(item) in skipped:
            return
        used.update(m.id for m in touched)
        offered[kind].append(item)

    for cluster in await _clusters(judged, vecs, cuts, pause):
        keep = cluster[-1]
        pairs = [judged.get((m.id, keep.id)) for m in cluster[:-1]]
        sims = [p.judgement.similarity for p in pairs if p and p.judgement.similarity]
        reasons = sorted({p.judgement.reason for p in pairs if p is not None})
        offer("merge", cluster, keep, "the same fact: " + "; ".join(reasons),
              min(sims) if sims else 1.0)
    updates = sorted((p for p in judged.values() if p.judgement.outcome == "update"),
                     key=lambda p: (p.new.updated_at, p.new.id), reverse=True)
    for p in updates:
        offer("supersede", [p.old, p.new], p.new, f"a newer version: {p.judgement.reason}",
              p.judgement.similarity or 1.0)
    if expire_before is not None:
        for m in mems:
            used_at = max(m.updated_at, reads.get(m.id, m.updated_at))
            if used_at < expire_before:
                read = reads.get(m.id)
                offer("expire", [m], None,
                      f"unchanged since {m.updated_at.date().isoformat()}, "
                      + ("never found by a search" if read is None
                         else f"last found by a search on {read.date().isoformat()}"), 1.0)
    out = _taking_turns(offered, most)
    if phrase is not None:
        out = [await _worded(p, phrase) if p.kind == "merge" else p for p in out]
    return out


def _taking_turns(found: Mapping[ProposalKind, list[MemoryPendingItem]], most: int
                  ) -> list[MemoryPendingItem]:
    """At most ``most`` proposals, the kinds taking turns (a merge, a supersession, an
    expiry, a merge, ...), so one kind in abundance does not crowd out the others."""
    queues = [list(found[k]) for k in PROPOSAL_KINDS]
    out: list[MemoryPendingItem] = []
    while len(out) < most and any(queues):
        for q in queues:
            if q and len(out) < most:
                out.append(q.pop(0))
    return out


async def _worded(item: MemoryPendingItem, phrase: Phrase) -> MemoryPendingItem:
    """A merge proposal with the judge model's wording of its memories, when it gives one
    other than the kept text."""
    prop = item.proposal
    assert prop is not None
    text = await phrase([t.content for t in prop.touches])
    if text is None or text == item.content:
        return item
    worded = prop.model_copy(update={"result": text,
                                     "reason": prop.reason + "; worded by the model"})
    return item.model_copy(update={"content": text, "proposal": worded})


def corrections(items: Sequence[MemoryRule | MemoryFact], *, skip: Iterable[str] = (),
                expires_at: datetime | None = None) -> list[MemoryPendingItem]:
    """The owner's current rules or facts (``items``, one kind) that a newer one of them
    updates or contradicts ("deploys on Friday" / "deploys on Thursday", "likes coffee" /
    "does not like coffee"; ``dedup.updated_item``), each as a pending correction: the
    newer wins when a person confirms (the older is closed in its favour, kept in its
    history). Each item in one correction at most; none in ``skip``."""
    kind: ExtractedKind = "rule" if items and isinstance(items[0], MemoryRule) else "fact"
    skipped = set(skip)
    out: list[MemoryPendingItem] = []
    used: set[str] = set()
    ordered = sorted(items, key=lambda i: (i.created_at, i.id))
    for n, newer in reversed(list(enumerate(ordered))):
        if newer.id in used:
            continue
        found = updated_item([i for i in ordered[:n] if i.id not in used], newer.content)
        if found is None:
            continue
        older, why = found
        item = MemoryPendingItem(
            kind=kind, content=newer.content, confidence=1.0, source="consolidation",
            expires_at=expires_at, supersedes=older.id,
            supersedes_content=older.content[:SHOWN_CHARS],
            evidence=(f"- [{older.created_at.date().isoformat()}] {older.content}\n"
                      f"kept [{newer.created_at.date().isoformat()}] {newer.content}\n"
                      f"{why}")[:EVIDENCE_CHARS])
        if pending_fingerprint(item) in skipped:
            continue
        used.update((older.id, newer.id))
        out.append(item)
    return out


def status_expiries(snap: MemorySnapshot, changes: Sequence[StatusChange],
                    expire_before: datetime, *, skip: Iterable[str] = (),
                    expires_at: datetime | None = None) -> list[MemoryPendingItem]:
    """The status values of ``snap`` with no expiry of their own (a TTL expires them
    already) that last changed before ``expire_before``, each as a proposal to let it
    expire: the key, its value and when it last changed (``changes``, the kept status
    history; a key with none kept changed at the latest when the snapshot did). None in
    ``skip``: a value rejected once is not proposed again."""
    skipped = set(skip)
    out: list[MemoryPendingItem] = []
    for key, value in snap.status.items():
        if key in snap.status_expires_at:
            continue
        at = last_change(key, changes) or snap.updated_at
        if at is None or at >= expire_before:
            continue
        since = at.date().isoformat()
        item = MemoryPendingItem(
            kind="expire", key=key, value=value, confidence=1.0, source="consolidation",
            expires_at=expires_at, evidence=f"[{since}] {key} = {value}"[:EVIDENCE_CHARS],
            proposal=Proposal(touches=(Touched(id=key, content=value, updated_at=at),),
                              reason=f"status value unchanged since {since}"))
        if pending_fingerprint(item) not in skipped:
            out.append(item)
    return out


async def _judge(old: VectorMemory, new: VectorMemory, sim: float | None, cuts: Cuts
                 ) -> Judgement:
    """What ``new`` is to ``old``, as a store judges a new memory against a stored one."""
    j = judge_near(old.content, new.content, sim, cuts, bool(old.context or new.context))
    return await asked(j, old.content, new.content, cuts)


async def _pairs(mems: Sequence[VectorMemory], vecs: dict[str, list[float]], cuts: Cuts
                 ) -> AsyncIterator[tuple[VectorMemory, VectorMemory, float | None] | None]:
    """Each memory with its ``cuts.nearest`` nearest above the candidate cut (cosine), or,
    without an embedding, those that share the most of its rarer words; ``None`` after
    each memory's (a point where the pass may let its event loop go). The products of
    the similarity matrix, the longest steps, run in a worker thread (numpy lets the
    event loop's thread run meanwhile)."""
    k = max(cuts.nearest, 1)
    with_vec = [m for m in mems if m.id in vecs]
    if len(with_vec) > 1:
        parts, cuts_of = [], []
        for start in range(0, len(with_vec), BLOCK):  # in blocks too: a pause between
            part = with_vec[start:start + BLOCK]
            parts.append(np.asarray([vecs[m.id] for m in part], dtype=np.float32))
            cuts_of += [cuts.band(m.content).candidate for m in part]
            yield None
        mat = np.concatenate(parts)
        norms = np.linalg.norm(mat, axis=1)
        mat /= np.where(norms == 0, 1.0, norms)[:, None]
        cut = np.asarray(cuts_of, dtype=np.float32)
        for start in range(0, len(with_vec), BLOCK):
            sims = await asyncio.to_thread(np.matmul, mat[start:start + BLOCK], mat.T)
            for row in range(sims.shape[0]):
                i = start + row
                sims[row, i] = -np.inf
                top = np.argpartition(-sims[row], min(k, len(with_vec) - 1) - 1)[:k]
                for j in top:
                    s = float(sims[row, j])
                    if s > cut[i]:
                        yield with_vec[i], with_vec[j], s
                yield None
    without = [m for m in mems if m.id not in vecs]
    if without:
        for found in _worded_pairs(without, mems, k):
            yield found


def _worded_pairs(todo: Sequence[VectorMemory], mems: Sequence[VectorMemory], k: int
                  ) -> Iterable[tuple[VectorMemory, VectorMemory, None] | None]:
    words: dict[str, set[str]] = {}
    holders: defaultdict[str, list[VectorMemory]] = defaultdict(list)
    for m in mems:
        words[m.id] = set(terms(m.content))
        for w in words[m.id]:
            holders[w].append(m)
        yield None
    for m in todo:
        shared: Counter[str] = Counter()
        for w in words[m.id]:
            if 1 < len(holders[w]) <= COMMON_WORD:
                for other in holders[w]:
                    if other.id != m.id:
                        shared[other.id] += 1
        by_id = {o.id: o for w in words[m.id] for o in holders[w]}
        for other_id, _ in shared.most_common(k):
            yield m, by_id[other_id], None
        yield None


async def _clusters(judged: dict[tuple[str, str], Pair], vecs: dict[str, list[float]],
                    cuts: Cuts, pause: _Slices) -> list[list[VectorMemory]]:
    """Groups of memories joined by duplicate judgements, oldest first, each member a
    duplicate of the newest as judged directly (a chain of look-alikes, each like the
    next, is not one fact) and judged nothing else against another member (two that
    each reword a third may still be an update of one another: "last Friday", "last
    Thursday"); at most ``MAX_TOUCHED`` of them, those nearest the newest."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    mem: dict[str, VectorMemory] = {}
    for p in judged.values():
        if p.judgement.outcome == "duplicate":
            mem[p.old.id], mem[p.new.id] = p.old, p.new
            parent[root(p.old.id)] = root(p.new.id)
    groups: defaultdict[str, list[VectorMemory]] = defaultdict(list)
    for mid, m in mem.items():
        groups[root(mid)].append(m)
    out = []
    for group in groups.values():
        group.sort(key=lambda m: (m.updated_at, m.id))
        keep = group[-1]
        members: list[VectorMemory] = []  # newest first
        for m in reversed(group[:-1]):
            if len(members) >= MAX_TOUCHED - 1:
                break
            await pause()
            if _duplicate_of(m, keep, judged, vecs, cuts) and not any(
                    (j := judged.get((m.id, o.id))) is not None
                    and j.judgement.outcome != "duplicate" for o in members):
                members.append(m)
        if members:
            out.append([*reversed(members), keep])
    out.sort(key=lambda c: (c[-1].updated_at, c[-1].id))
    return out


def _duplicate_of(m: VectorMemory, keep: VectorMemory, judged: dict[tuple[str, str], Pair],
                  vecs: dict[str, list[float]], cuts: Cuts) -> bool:
    p = judged.get((m.id, keep.id))
    if p is None:
        sim = (cosine(vecs[m.id], vecs[keep.id]) if m.id in vecs and keep.id in vecs
               else None)
        j = judge_near(m.content, keep.content, sim, cuts, bool(m.context or keep.context))
        return j.outcome == "duplicate"
    return p.judgement.outcome == "duplicate"


def _evidence(touched: Sequence[VectorMemory], keep: VectorMemory | None) -> str:
    lines = [f"{'kept' if keep is not None and m.id == keep.id else '-'} "
             f"[{m.updated_at.date().isoformat()}] {m.content}" for m in touched]
    return "\n".join(lines)[:EVIDENCE_CHARS]


def expiry_cut(now: datetime, days: float | None) -> datetime | None:
    """The time before which a memory or status value last changed is proposed to expire
    (``None``: off)."""
    return None if days is None else now - timedelta(days=days)
