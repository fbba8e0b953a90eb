"""Contract of a memory's context: kept beside the content, embedded and searched with it,
never returned as the content, kept through versions and moves, refused when bad."""

from __future__ import annotations

import pytest

from dream_memory_actor.errors import InvalidBatch, InvalidContent
from tests.conftest import Stores
from tests.contract.test_vector import vec

CTX = "8 May 2023\nMelanie: I got the job at the animal shelter!"


async def test_context_is_kept_beside_the_content(stores: Stores) -> None:
    v = stores.vector
    r = await v.store("alice", "Caroline: That's great, congrats!", embedding=vec(1),
                      context=" 8 May 2023\n  Melanie: I got the job at the animal shelter! ")
    assert r.memory.content == "Caroline: That's great, congrats!"
    assert r.memory.context == CTX
    got = await v.get("alice", r.memory.id)
    assert (got.content, got.context) == (r.memory.content, CTX)
    assert [m.context for m in await v.list("alice")] == [CTX]
    assert [(m.content, e) for m, e in await v.dump("alice")] == [
        ("Caroline: That's great, congrats!", vec(1))]


async def test_the_keyword_signal_searches_the_context(stores: Stores) -> None:
    v = stores.vector
    await v.store("alice", "Caroline: That's great, congrats!", context=CTX)
    await v.store("alice", "Caroline: I painted a lake last week")
    hits = await v.search("alice", "shelter job")
    assert [h.memory.content for h in hits][:1] == ["Caroline: That's great, congrats!"]
    assert hits[0].keyword_score == pytest.approx(1.0)
    assert hits[0].memory.context == CTX
    stats = await v._term_stats(["alice"], ["shelter", "lake"])
    assert stats.df == {"shelter": 1, "lake": 1}


async def test_a_memory_found_by_its_vector_is_scored_with_its_context(
        stores: Stores) -> None:
    """The keyword signal reads the context of every candidate, the nearest memories
    included, as it reads the context of the memories its words found."""
    v = stores.vector
    await v.store("alice", "Caroline: That's great, congrats!", embedding=vec(1, 0.1),
                  context=CTX)
    await v.store("alice", "Caroline: I painted a lake last week", embedding=vec(0, 1))
    hits = await v.search("alice", "shelter job", embedding=vec(1))
    assert hits[0].memory.content == "Caroline: That's great, congrats!"
    assert hits[0].keyword_score == pytest.approx(1.0)
    assert hits[0].vector_score is not None


async def test_the_context_is_embedded_with_the_content(stores: Stores) -> None:
    seen: list[tuple[str, str | None]] = []

    async def embed(text: str, context: str | None) -> list[float]:
        seen.append((text, context))
        return vec(1)

    await stores.vector.store("alice", "  congrats!  ", context=" 8 May 2023 \n\n Ann:  hi ",
                              embed=embed)
    await stores.vector.store("alice", "no context here", embed=embed)
    assert seen == [("congrats!", "8 May 2023\nAnn: hi"), ("no context here", None)]


async def test_contexts_alike_do_not_merge_contents_worded_apart(stores: Stores) -> None:
    """Two memories said after the same turn are near in their embeddings because their
    contexts are the same; what they say is different, and both are kept."""
    v = stores.vector
    a = await v.store("alice", "Caroline: I love the lake at sunrise", embedding=vec(1),
                      context=CTX)
    b = await v.store("alice", "Caroline: my brother moved to Denver", embedding=vec(1),
                      context=CTX)
    assert not b.merged and b.memory.id != a.memory.id
    assert b.judgement in ("distinct", "unsure")
    assert await v.count("alice") == 2
    # without contexts (nor speakers' labels, which act as one) the same vectors merge a
    # rewording (the plain dedup contract)
    c = await v.store("bob", "I love the lake at sunrise", embedding=vec(1))
    d = await v.store("bob", "my brother moved to Denver", embedding=vec(1))
    assert d.merged and d.memory.id == c.memory.id


async def test_the_same_text_merges_whatever_the_context(stores: Stores) -> None:
    v = stores.vector
    a = await v.store("alice", "Went live on Kubernetes", embedding=vec(1), context=CTX)
    b = await v.store("alice", "went live on kubernetes", embedding=vec(1, 0.1),
                      context="9 May 2023")
    assert b.merged and b.memory.id == a.memory.id
    assert b.memory.context == CTX  # the context the kept embedding was made with


async def test_a_value_changed_under_a_context_is_an_update(stores: Stores) -> None:
    v = stores.vector
    a = await v.store("alice", "The cluster runs Kubernetes 1.27", embedding=vec(1),
                      context=CTX)
    b = await v.store("alice", "The cluster runs Kubernetes 1.29", embedding=vec(1),
                      context="a week later")
    assert b.superseded and b.related == a.memory.id
    assert b.memory.context == "a week later"
    history = await v.memory_history("alice", b.memory.id)
    assert [(h.content, h.context) for h in history] == [
        ("The cluster runs Kubernetes 1.27", CTX),
        ("The cluster runs Kubernetes 1.29", "a week later")]


async def test_versions_keep_the_context(stores: Stores) -> None:
    v = stores.vector
    first = await v.store("alice", "deploys go out on Fridays", embedding=vec(1),
                          context=CTX)
    kept = await v.update("alice", first.memory.id, "deploys go out on Thursdays",
                          embedding=vec(0, 1))
    assert kept.context == CTX
    changed = await v.update("alice", first.memory.id, "deploys go out on Mondays",
                             embedding=vec(0, 1), context="after the freeze")
    assert changed.context == "after the freeze"
    succ = await v.supersede_memory("alice", first.memory.id, "no deploys in December",
                                    embedding=vec(0, 0, 1))
    assert succ.context == "after the freeze"
    history = await v.memory_history("alice", succ.id)
    assert [h.context for h in history] == [CTX, CTX, "after the freeze", "after the freeze"]
    assert [h.context for h in await v.versions("alice")] == [CTX, CTX, "after the freeze"]


async def test_an_update_embeds_with_the_context_it_keeps(stores: Stores) -> None:
    v = stores.vector
    seen: list[tuple[str, str | None]] = []

    async def embed(text: str, context: str | None) -> list[float]:
        seen.append((text, context))
        return vec(1)

    r = await v.store("alice", "deploys go out on Fridays", context=CTX, embed=embed)
    await v.update("alice", r.memory.id, "deploys go out on Thursdays", embed=embed)
    await v.supersede_memory("alice", r.memory.id, "no deploys at all", embed=embed,
                             context="the freeze")
    assert seen == [("deploys go out on Fridays", CTX), ("deploys go out on Thursdays", CTX),
                    ("no deploys at all", "the freeze")]


async def test_batches_carry_contexts(stores: Stores) -> None:
    v = stores.vector
    results = await v.store_many("alice", [
        {"content": "Caroline: congrats!", "context": CTX},
        "Caroline: I painted a lake",
        {"content": "Melanie: thanks!", "context": "8 May 2023", "metadata": {"n": 1}},
    ], embeddings=[vec(1), vec(0, 1), vec(0, 0, 1)])
    assert [r.memory.context for r in results] == [CTX, None, "8 May 2023"]
    assert {m.content: m.context for m in await v.list("alice")} == {
        "Caroline: congrats!": CTX, "Caroline: I painted a lake": None,
        "Melanie: thanks!": "8 May 2023"}


@pytest.mark.parametrize("bad", ["", "   \n ", 3, b"bytes", "a\x00b", "x" * 40_000])
async def test_a_bad_context_is_refused_and_writes_nothing(stores: Stores, bad: object) -> None:
    v = stores.vector
    with pytest.raises(InvalidContent, match="context"):
        await v.store("alice", "fine content", embedding=vec(1), context=bad)  # type: ignore[arg-type]
    with pytest.raises((InvalidContent, InvalidBatch), match="context"):
        await v.store_many("alice", [{"content": "fine", "context": bad}])
    assert await v.count("alice") == 0
    r = await v.store("alice", "fine content", embedding=vec(1))
    with pytest.raises(InvalidContent, match="context"):
        await v.update("alice", r.memory.id, "new content", context=bad)  # type: ignore[arg-type]
    assert (await v.get("alice", r.memory.id)).content == "fine content"
