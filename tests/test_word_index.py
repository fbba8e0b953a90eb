"""The word index of the in-memory and Redis backends: the keyword candidates of
``text.occurs``, in keyword order, kept in step as rows are added and removed."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from dream_memory_actor.storage.word_index import WordIndex, keyword_order
from dream_memory_actor.text import fold, occurs, word_starts

NOW = datetime(2026, 1, 31, tzinfo=timezone.utc)

Item = tuple[str, str, datetime]  # id, folded text, updated at


def index(rows: list[Item]) -> WordIndex[Item]:
    return WordIndex(rows, search_text=lambda r: word_starts(r[1]), updated_at=lambda r: r[2],
                     ident=lambda r: r[0])


def wanted(rows: list[Item], terms: list[str], weights: list[float], limit: int) -> list[str]:
    """The order by its definition: sum of the weights of the terms ``occurs`` finds,
    then newest, then smallest id."""
    found = [(sum(w for t, w in zip(terms, weights, strict=True) if occurs(t, r[1])), r)
             for r in rows]
    best = sorted([f for f in found if f[0] > 0],
                  key=lambda f: (-f[0], -f[1][2].timestamp(), f[1][0]))
    return [r[0] for _, r in best[:limit]]


def test_keyword_order_finds_a_term_where_occurs_does() -> None:
    """A term is found where a word starts (a CJK term anywhere), as ``text.occurs``
    finds it."""
    texts = ["We don't create; deployment first", "the deploy went fine", "ate an apple",
             "系统部署完成", "re-deploy and Fine-tune", "tea", "x" * 80 + "deployz",
             "l'état du déploiement", "ok: deploy!deploy", "部署v2 和 k8s"]
    rows = [(f"m{i}", fold(t), NOW - timedelta(days=i)) for i, t in enumerate(texts)]
    for query in (["deploy"], ["t", "ate"], ["部署", "fine"], ["tune", "état"],
                  ["déploiement", "x" * 64], ["deployz", "ok"], ["署", "v2"], ["统部"]):
        weights = [1.0 + i for i in range(len(query))]
        got = index(rows).order(query, weights, 10)
        assert [r[0] for r in got] == wanted(rows, query, weights, 10), query


def test_keyword_order_by_matched_weight_then_newest_then_smallest_id() -> None:
    t0 = NOW - timedelta(days=1)
    rows = [("m5", "helm", t0), ("m1", "helm argo", t0), ("m3", "argo", NOW),
            ("m2", "argo", t0), ("m4", "tea", NOW), ("m0", "argo", t0)]

    def order(limit: int, weights: list[float]) -> list[str]:
        return [r[0] for r in index(rows).order(["helm", "argo"], weights, limit)]

    # argo rarer than helm: the argo memories before "helm"; at equal weight newest,
    # then smallest id; "tea" matches nothing and is never a candidate
    assert order(10, [1.0, 2.0]) == ["m1", "m3", "m0", "m2", "m5"]
    assert order(10, [2.0, 1.0]) == ["m1", "m5", "m3", "m0", "m2"]
    assert order(2, [1.0, 2.0]) == ["m1", "m3"]
    assert order(3, [1.0, 2.0]) == ["m1", "m3", "m0"]  # the cut falls inside a tie
    assert index(rows).order([], [], 10) == []
    assert index([]).order(["argo"], [1.0], 10) == []


def test_rows_added_replaced_and_removed_are_found_as_a_new_index_finds_them() -> None:
    """Random edits, checked after each against the definition: an added row is found,
    a replaced row by its new text and time only, a removed row no more (past the
    point where the index is made again from its live rows)."""
    rng = random.Random(7)
    words = ["deploy", "deployment", "argo", "helm", "tea", "team", "部署", "系统", "k8s",
             "caroline", "car", "don't"]
    live: dict[str, Item] = {}
    ix = index([])
    for step in range(600):
        mid = f"m{rng.randrange(150)}"
        if mid in live and rng.random() < 0.4:
            ix.remove(mid)
            del live[mid]
        else:
            text = " ".join(rng.choice(words) for _ in range(rng.randrange(1, 5)))
            row = (mid, fold(text), NOW - timedelta(hours=rng.randrange(5)))
            ix.add(row)
            live[mid] = row
        if step % 25 == 0:
            terms = rng.sample(["dep", "argo", "te", "部署", "署", "car", "don", "k8"], 3)
            weights = [rng.choice([0.5, 1.0, 2.0]) for _ in terms]
            limit = rng.choice([1, 5, 40])
            assert len(ix) == len(live)
            assert [r[0] for r in ix.order(terms, weights, limit)] == \
                wanted(list(live.values()), terms, weights, limit), step
            sums = ix.sums(terms, weights)
            for mid, row in live.items():  # each row's sum, as rank would add it
                assert ix.found(sums, mid) == sum(
                    [w for t, w in zip(terms, weights, strict=True) if occurs(t, row[1])]), mid


def test_only_and_several_owners_give_the_order_of_those_rows_together() -> None:
    rng = random.Random(3)
    words = ["deploy", "argo", "helm", "tea", "部署"]

    def rows(prefix: str) -> list[Item]:
        return [(f"{prefix}{i}", fold(" ".join(rng.sample(words, 2))),
                 NOW - timedelta(hours=rng.randrange(3))) for i in range(30)]

    a, b = rows("a"), rows("b")
    terms, weights = ["deploy", "部署", "argo"], [1.0, 2.0, 0.5]
    for limit in (1, 7, 100):
        ixs = [index(a), index(b)]
        sums = [ix.sums(terms, weights) for ix in ixs]
        got = keyword_order(ixs, sums, limit)
        assert [r[0] for r in got] == wanted(a + b, terms, weights, limit)
        only = {r[0] for r in a + b if rng.random() < 0.5}
        got = keyword_order(ixs, sums, limit, only)
        assert [r[0] for r in got] == wanted([r for r in a + b if r[0] in only], terms,
                                             weights, limit)
