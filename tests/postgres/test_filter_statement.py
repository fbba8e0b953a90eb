"""The metadata filter in the candidate statement: one bound jsonb condition per branch,
and the statement without a filter as it was."""

from __future__ import annotations

import json

import pytest

from dream_memory_actor.storage.postgres import PostgresVectorStore
from dream_memory_actor.storage.postgres.plan import SearchPlan
from dream_memory_actor.storage.postgres.statements import candidate_statement
from tests.contract.test_vector import vec

PLANS = [
    SearchPlan(10, 10, "exact", "scan"),
    SearchPlan(10**6, 10**6, "hnsw", "trigram"),
    SearchPlan(10**5, 10**5, "hnsw", "trigram", recent_window=True),
    SearchPlan(10, 10, None, "scan"),
    SearchPlan(10, 10, "exact", None),
]


@pytest.mark.parametrize("plan", PLANS)
def test_filter_is_a_bound_parameter(plan: SearchPlan) -> None:
    hostile = {"agent": "x') OR true --", "n": 1}

    def build(where: dict[str, object] | None) -> tuple[str, list[object]]:
        return candidate_statement(
            "s",
            4,
            ["alice"],
            ["deploy", "helm"],
            [1.0, 0, 0, 0],
            plan,
            vector_k=10,
            keyword_k=10,
            weights=[1.0, 1.0],
            where=where,
        )

    plain_sql, plain_args = build(None)
    assert "@>" not in plain_sql
    assert build({}) == (plain_sql, plain_args)  # an empty filter filters nothing
    sql, args = build(hostile)
    assert "OR true" not in sql
    encoded = json.dumps(hostile)
    branches = (plan.vector is not None) + (plan.keyword is not None)
    assert args.count(encoded) == branches  # one parameter per branch that reads rows
    assert sql.count("@>") >= branches  # a branch may test it in each of its subqueries
    for i, value in enumerate(args, start=1):  # every parameter is used
        if value == encoded:
            assert f"${i}::jsonb" in sql


@pytest.mark.parametrize("plan", PLANS)
async def test_every_plan_runs_filtered(
    pg: tuple[object, PostgresVectorStore], plan: SearchPlan
) -> None:
    """Each path of the statement (exact, HNSW, owner rows, trigram, recent window)
    returns only the memories the filter keeps."""
    _, vector = pg
    keep = await vector.store(
        "alice", "deploy with helm", embedding=vec(1, 0.2), metadata={"agent": "deploy"}
    )
    await vector.store(
        "alice", "deploy helm on friday", embedding=vec(0, 1), metadata={"agent": "ops"}
    )
    emb = vec(1)
    for where, want in (({"agent": "deploy"}, {keep.memory.id}), ({"agent": "none"}, set())):
        rows = await vector._fetch(
            vector.statement(
                ["alice"],
                ["deploy", "helm"],
                emb,
                plan,
                vector_k=10,
                keyword_k=10,
                weights=[1.0, 1.0],
                where=where,
            )
        )
        assert {str(r["id"]) for r in rows} == want
