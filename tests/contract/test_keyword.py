"""Contract of the keyword signal: rarity weights, document frequencies, candidate order.

Every backend keeps the same document frequencies for the same writes, so the same
data gives the same keyword scores and the same keyword candidates everywhere.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from dream_memory_actor.models import utcnow
from dream_memory_actor.scoring import idf
from dream_memory_actor.storage.dedup import Cuts
from tests.conftest import Stores
from tests.contract.test_vector import vec

CORPUS = [
    "Caroline went to the support group",
    "Melanie went hiking with her kids",
    "Caroline painted a sunrise",
    "went shopping for shoes",
]


def axis(i: int) -> list[float]:
    """The i-th unit vector: no two are near-duplicates."""
    return vec(*([0.0] * i + [1.0]))


async def _df(stores: Stores, owners: list[str], terms: list[str]) -> tuple[int, dict[str, int]]:
    stats = await stores.vector._term_stats(owners, terms)
    return stats.docs, {t: stats.df.get(t, 0) for t in terms}


async def test_term_stats_follow_every_write(stores: Stores) -> None:
    v = stores.vector
    ids = [(await v.store("alice", text, embedding=axis(i))).memory.id
           for i, text in enumerate(CORPUS)]
    await v.store("bob", "Caroline went sailing", embedding=axis(0))
    terms = ["went", "caroline", "group", "meeting", "zzz"]
    assert await _df(stores, ["alice"], terms) == (
        4, {"went": 3, "caroline": 2, "group": 1, "meeting": 0, "zzz": 0})
    # summed over the searched owners
    assert await _df(stores, ["alice", "bob"], ["went", "caroline"]) == (
        5, {"went": 4, "caroline": 3})
    # a merge that changes the content moves the counts: "group" out, "meeting" in
    r = await v.store("alice", "A support meeting is where Caroline went", embedding=axis(0))
    assert r.merged and r.memory.id == ids[0]
    assert await _df(stores, ["alice"], terms) == (
        4, {"went": 3, "caroline": 2, "group": 0, "meeting": 1, "zzz": 0})
    # a merge of the same text changes nothing
    assert (await v.store("alice", "went  shopping for SHOES")).merged
    assert await _df(stores, ["alice"], ["went", "shoes"]) == (4, {"went": 3, "shoes": 1})
    # a term counts once per memory, however often it occurs; a query term counts the
    # memory terms that start with it, at most once per memory of the owner
    await v.store("alice", "went went went; wentworth", embedding=axis(5))
    assert await _df(stores, ["alice"], ["went", "wentworth", "wentw", "entworth"]) == (
        5, {"went": 5, "wentworth": 1, "wentw": 1, "entworth": 0})
    assert await v.delete("alice", ids[2])
    assert not await v.delete("alice", ids[2])
    assert await _df(stores, ["alice"], ["caroline", "sunrise", "went"]) == (
        4, {"caroline": 1, "sunrise": 0, "went": 4})
    # the sum of the counts of "went" and "wentworth" (2) is capped at bob's memories
    await v.store("bob", "wentworth", embedding=axis(1))
    assert await _df(stores, ["bob"], ["went"]) == (2, {"went": 2})
    await v.delete("alice", ids[0])
    await v.delete("alice", ids[1])
    await v.delete("alice", ids[3])
    assert await _df(stores, ["alice", "bob"], ["went"]) == (3, {"went": 1 + 2})
    assert await _df(stores, ["nobody"], ["went"]) == (0, {"went": 0})


async def test_same_weighted_keyword_scores_on_every_backend(keyword_stores: Stores) -> None:
    v = keyword_stores.vector
    now = utcnow()
    for i, text in enumerate(CORPUS):
        await v.store("alice", text, now=now - timedelta(days=i))
    hits = await v.search("alice", "when Caroline went", now=now)  # "when" is a stopword
    went, caroline = idf(3, 4), idf(2, 4)
    expected = {
        CORPUS[0]: 1.0,
        CORPUS[2]: caroline / (went + caroline),
        CORPUS[1]: went / (went + caroline),
        CORPUS[3]: went / (went + caroline),
    }
    assert [h.memory.content for h in hits] == [CORPUS[0], CORPUS[2], CORPUS[1], CORPUS[3]]
    for h in hits:
        assert h.keyword_score == pytest.approx(expected[h.memory.content], abs=1e-9)
        assert 0.0 <= h.keyword_score <= 1.0
    # the rare name outweighs the common verb: Caroline's painting before two "went"s
    assert hits[1].keyword_score > 0.5 > hits[2].keyword_score


PREFIX_CORPUS = [
    "We ate at the harbour",            # "ate" as a word
    "Create a deployment plan",         # "ate" only inside "create": no match
    "deployed the focus group survey",  # "deploy" starts "deployed"; "us" inside "focus"
    "Tell us about 系统部署完成",          # "us" as a word; the bigram inside a CJK run
    "用docker部署",                      # a Latin word right after Chinese starts there
]


async def test_terms_match_where_a_word_starts_and_cjk_anywhere(keyword_stores: Stores
                                                                ) -> None:
    v = keyword_stores.vector
    now = utcnow()
    for i, text in enumerate(PREFIX_CORPUS):
        await v.store("alice", text, now=now - timedelta(days=i))
    terms = ["ate", "deploy", "us", "部署", "docker", "reate"]
    # document frequencies follow the same rule: "deploy" counts "deployment" and
    # "deployed", "ate" does not count "create", "reate" is no word start
    assert await _df(keyword_stores, ["alice"], terms) == (
        5, {"ate": 1, "deploy": 2, "us": 1, "部署": 2, "docker": 1, "reate": 0})
    hits = await v.search("alice", "ate deploy us 部署 docker", now=now)
    w = {"ate": idf(1, 5), "deploy": idf(2, 5), "us": idf(1, 5), "部署": idf(2, 5),
         "docker": idf(1, 5)}
    total = sum(w.values())
    expected = {
        PREFIX_CORPUS[0]: w["ate"] / total,
        PREFIX_CORPUS[1]: w["deploy"] / total,
        PREFIX_CORPUS[2]: w["deploy"] / total,
        PREFIX_CORPUS[3]: (w["us"] + w["部署"]) / total,
        PREFIX_CORPUS[4]: (w["部署"] + w["docker"]) / total,
    }
    assert {h.memory.content: h.keyword_score for h in hits} == pytest.approx(
        expected, abs=1e-9)
    # a term found only inside a word finds nothing: no hit at all
    assert await v.search("alice", "reate ocus", now=now) == []
    # the same with a query vector absent and present alike: candidates by keyword
    hits = await v.search("alice", "create", now=now)
    assert [h.memory.content for h in hits] == [PREFIX_CORPUS[1]]


async def test_keyword_cut_keeps_the_smallest_ids_among_equals(stores: Stores) -> None:
    v = stores.vector
    now = utcnow()
    # (stored unjudged: a note that differs from another only in its number would
    # supersede it, and these are 55 notes of their own)
    ids = [(await v.store("alice", f"standup note number {i}", now=now,
                          threshold=Cuts.off())).memory.id
           for i in range(55)]
    # 55 memories of equal weight and time: the cut at 10 keeps the 10 smallest ids
    hits = await v.search("alice", "standup", now=now, limit=10, keyword_k=10)
    assert [h.memory.id for h in hits] == sorted(ids)[:10]
    # the rarer term decides first: the one memory with "7" in a term of its own ranks
    # with its weight, the others after it, still by id
    hits = await v.search("alice", "standup 54", now=now, limit=10, keyword_k=10)
    assert hits[0].memory.id == ids[54]
    assert [h.memory.id for h in hits[1:]] == sorted(i for i in ids if i != ids[54])[:9]


async def test_a_query_without_terms_scores_zero(stores: Stores) -> None:
    v = stores.vector
    await v.store("alice", "what is it", embedding=vec(1))
    assert await v.search("alice", "what is it") == []
    hits = await v.search("alice", "what is it", embedding=vec(1))
    assert [h.keyword_score for h in hits] == [0.0]


async def test_very_long_queries_are_answered(stores: Stores) -> None:
    v = stores.vector
    await v.store("alice", "w3x met Caroline at the lake")
    await v.store("alice", "系统部署完成")
    words = " ".join(f"w{i}x" for i in range(5000)).encode()[: 32 * 1024].decode()
    hits = await v.search("alice", words)
    assert hits and hits[0].memory.content == "w3x met Caroline at the lake"
    zh = "部署" + "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(6000))
    hits = await v.search("alice", zh)
    assert hits and hits[0].memory.content == "系统部署完成"


async def test_keyword_candidates_follow_the_writes_after_a_search(stores: Stores) -> None:
    """A search, then every kind of write, each followed by a search: the candidates
    are those of the owner's memories as they are now (a backend that keeps an index of
    its rows between searches keeps it in step)."""
    v = stores.vector
    now = utcnow()
    a = (await v.store("alice", "the argo rollout failed", now=now)).memory
    await v.store("bob", "argo at bob's", now=now)

    async def found(query: str) -> set[str]:
        return {h.memory.content for h in await v.search("alice", query, now=now)}

    assert await found("argo") == {"the argo rollout failed"}
    b = (await v.store("alice", "helm chart for argo", now=now)).memory
    assert await found("argo") == {"the argo rollout failed", "helm chart for argo"}
    await v.update("alice", a.id, "the flux rollout failed")
    assert await found("argo") == {"helm chart for argo"}
    assert await found("flux") == {"the flux rollout failed"}
    await v.supersede_memory("alice", b.id, "kustomize overlay for flux")
    assert await found("argo") == set()
    assert await found("kustomize") == {"kustomize overlay for flux"}
    await v.store_many("alice", ["argo again", "argonaut notes"], now=now)
    assert await found("argo") == {"argo again", "argonaut notes"}
    ids = {h.memory.content: h.memory.id for h in await v.search("alice", "argo", now=now)}
    assert await v.delete("alice", ids["argo again"])
    assert await found("argo") == {"argonaut notes"}
    await v.forget("alice")
    assert await found("argo") == set()
    assert {h.memory.content for h in await v.search("bob", "argo", now=now)} == {
        "argo at bob's"}
