"""Pages from templates: the Jinja environment and the pure helpers the templates use."""

from __future__ import annotations

from datetime import datetime, timezone
from functools import lru_cache
from typing import Any, NamedTuple

from ..models import MemoryPendingItem, MemorySnapshot, Touched, utcnow


class Replaced(NamedTuple):
    """What a pending item would replace when confirmed, shown beside it."""

    what: str
    text: str


def replaced(item: MemoryPendingItem, snap: MemorySnapshot) -> Replaced | None:
    """The memory ``item`` would supersede in ``snap``, or ``None``.

    A status item replaces the current value of its key. An item that names the
    rule or fact it supersedes (``supersedes``: that memory's id) replaces that one.
    This is the one place the pages learn what an item supersedes.
    """
    if item.kind == "status" and item.key is not None and item.key in snap.status:
        return Replaced(f"current value of {item.key}", snap.status[item.key])
    target = item.supersedes
    if not target:
        return None
    for kind, rows in (("rule", snap.rules), ("fact", snap.facts)):
        for row in rows:
            if row.id == target:
                return Replaced(f"the {kind} it supersedes", row.content)
    # the queued text of the item, as it was when the correction was extracted
    return Replaced("the item it supersedes (no longer current)",
                    item.supersedes_content or str(target))


class Sides(NamedTuple):
    """A consolidation proposal as a before/after card: the memories as the pass saw
    them, each with whether confirming closes it, and the text that stays afterwards
    (``None``: an expiry leaves none)."""

    before: list[tuple[Touched, bool]]
    after: str | None


def sides(item: MemoryPendingItem) -> Sides:
    """What the card of proposal ``item`` shows: a merge, its memories and the one result;
    a supersession, the outdated memory and its newer version; an expiry, the memory."""
    prop = item.proposal
    if prop is None:
        return Sides([], None)
    shown = [t for t in prop.touches if item.kind == "merge" or t.id != prop.keep]
    return Sides([(t, t.id != prop.keep) for t in shown], item.content)


def editable(item: MemoryPendingItem) -> bool:
    """Whether a confirmation of ``item`` may carry an edited text: any item but an
    expiry, which keeps no text."""
    return item.proposal is None or item.proposal.keep is not None


def proposed(item: MemoryPendingItem) -> str:
    """The text a confirmation writes unless edited: the content, or a status value."""
    return (item.value if item.kind == "status" else item.content) or ""


def age(at: datetime | None, now: datetime | None = None) -> str:
    """``"3 h ago"`` / ``"in 2 d"``: a short relative time for a person."""
    if at is None:
        return "never"
    now = now or utcnow()
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    seconds = (now - at).total_seconds()
    future, s = seconds < 0, abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            text = f"{int(s // size)} {unit}"
            break
    else:
        text = f"{int(s)} s"
    return f"in {text}" if future else f"{text} ago"


def stamp(at: datetime | None) -> str:
    """A UTC time to the second, for tooltips and the audit trail."""
    if at is None:
        return ""
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    return at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def day(at: datetime | None) -> str:
    """A UTC date, for when a memory last changed."""
    return "" if at is None else stamp(at)[:10]


def score(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


@lru_cache(maxsize=1)
def environment() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("dream_memory_actor.review", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(age=age, stamp=stamp, day=day, score=score)
    env.globals.update(replaced=replaced, proposed=proposed, sides=sides, editable=editable)
    return env


def render(template: str, **context: Any) -> str:
    text: str = environment().get_template(template).render(**context)
    return text
