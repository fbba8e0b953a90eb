"""Hybrid search candidates of the Redis L2 store: term statistics, the nearest
memories (the search module's HNSW index, or exact cosine over the cached rows)
and the keyword candidates (``scoring.keyword_order`` over the same rows)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import BackendError
from ...scoring import Candidate, TermStats, cosine, keyword_order
from ..terms import prefix_df, summed
from ..vector import VectorStore
from ..versions import matches
from . import df
from . import search_module as fts
from .common import Keys, translate
from .rows import NO_TOKEN, OwnerRows, Row, RowCache, vec_bytes


class RedisSearch(VectorStore, ABC):
    """The read side of ``RedisVectorStore`` a search uses (see ``vector``)."""

    dim: int | None
    _r: Any
    _keys: Keys
    _ef: int
    _cache: RowCache
    _fetch: Any  #: the registered FETCH_ROWS script
    _read_df: Any  #: the registered ``df.READ`` script

    @abstractmethod
    async def _ensure_setup(self, *, force: bool = False) -> bool:
        """Whether the search module serves KNN (the index created when it does)."""

    @abstractmethod
    def _fetch_args(self, owner: str, token: str) -> tuple[list[str], list[str]]:
        """Keys and arguments of FETCH_ROWS for one owner."""

    @abstractmethod
    async def _owner_rows(self, client: Any, owner: str) -> OwnerRows:
        """The owner's rows, cache-checked."""

    async def _term_stats(self, owners: Sequence[str], terms: Sequence[str]) -> TermStats:
        k = self._keys
        per_owner: list[list[int]] = []
        docs = 0
        with translate("search"):
            if len(owners) == 1:  # one EVALSHA (a pipeline would first send SCRIPT EXISTS)
                replies = [await self._read_df(keys=[k.l2_df(owners[0]),
                                                     k.l2_terms(owners[0])], args=terms)]
            else:
                async with self._r.pipeline(transaction=False) as pipe:
                    for o in owners:
                        pipe.eval(df.READ, 2, k.l2_df(o), k.l2_terms(o), *terms)
                    replies = await pipe.execute()
            for o, reply in zip(owners, replies, strict=True):
                got = df.parse_read(reply)
                if got is None:  # never counted: count the rows this process reads
                    rows = await self._owner_rows(self._r, o)
                    n = len(rows.rows)
                    got = (n, prefix_df(rows.document_frequencies(), n, terms))
                docs += got[0]
                per_owner.append(got[1])
        return TermStats(docs, dict(zip(terms, summed(per_owner, len(terms)), strict=True)))

    async def _candidates(self, owners: Sequence[str], terms: Sequence[str],
                          embedding: list[float] | None, *, vector_k: int,
                          keyword_k: int, weights: Sequence[float],
                          stats: TermStats, where: Mapping[str, Any] | None = None
                          ) -> list[Candidate]:
        with translate("search"):
            module = await self._ensure_setup()
            # The index holds no metadata: a filtered search ranks the matching rows
            # (read for the keyword candidates anyway) by exact cosine.
            knn = module and embedding is not None and self.dim is not None and not where
            by_owner, hits = await self._fetch_for_search(owners, embedding, vector_k, knn)
        if where:
            by_owner = {o: OwnerRows(rows.token, [r for r in rows.rows.values()
                                                 if matches(r.memory.metadata, where)])
                        for o, rows in by_owner.items()}
        query = None if embedding is None else np.asarray(embedding, dtype=np.float64)

        def candidate(row: Row) -> Candidate:
            m = row.memory
            sim = None if query is None or row.vec is None else cosine(query, row.vec)
            return Candidate(m.id, m.content, m.updated_at, sim, m, row.folded)

        out: dict[str, Candidate] = {}
        if query is not None:
            if not knn:
                hits = self._exact_nearest(by_owner, query, vector_k)
            for owner, mid in hits[:vector_k]:
                row = by_owner[owner].rows.get(mid)
                if row is not None and row.vec is not None:
                    out.setdefault(mid, candidate(row))
        every = (r for rows in by_owner.values() for r in rows.rows.values())
        for row in keyword_order(every, terms, weights, keyword_k, folded=lambda r: r.folded,
                                 updated_at=lambda r: r.memory.updated_at,
                                 ident=lambda r: r.memory.id):
            out.setdefault(row.memory.id, candidate(row))
        return list(out.values())

    async def _fetch_for_search(self, owners: Sequence[str], embedding: list[float] | None,
                                vector_k: int, knn: bool
                                ) -> tuple[dict[str, OwnerRows], list[tuple[str, str]]]:
        """Every owner's rows (cache-checked) and, with KNN, the nearest ids: one round trip."""
        from redis.exceptions import ResponseError

        if len(owners) == 1 and not knn:
            # One EVALSHA. The pipeline below would first send SCRIPT EXISTS (redis-py
            # does for every pipeline that runs a Script), a second round trip.
            return {owners[0]: await self._owner_rows(self._r, owners[0])}, []
        stale: set[str] = set()
        for attempt in range(4):
            async with self._r.pipeline(transaction=False) as pipe:
                for o in owners:
                    keys, args = self._fetch_args(
                        o, NO_TOKEN if o in stale else self._cache.token(o))
                    await self._fetch(keys, args, client=pipe)  # queued; loaded on execute
                if knn:
                    assert embedding is not None
                    pipe.execute_command(*fts.knn_command(
                        self._keys, self.dim, owners, vec_bytes(embedding), vector_k, self._ef))
                try:
                    replies = await pipe.execute()
                except ResponseError as exc:
                    if attempt < 3 and fts.is_missing_index(exc):  # the server restarted empty
                        await fts.create_index(self._r, self._keys, self.dim)
                        continue
                    raise
            by_owner: dict[str, OwnerRows] = {}
            for o, reply in zip(owners, replies[:len(owners)], strict=True):
                rows = self._cache.resolve(o, reply)
                if rows is None:
                    stale.add(o)
                else:
                    by_owner[o] = rows
            if len(by_owner) == len(owners):
                hits = fts.knn_ids(self._keys, owners, replies[-1]) if knn else []
                return by_owner, hits
        raise BackendError("could not read the owners' memories consistently")

    @staticmethod
    def _exact_nearest(by_owner: dict[str, OwnerRows], query: np.ndarray,
                       k: int) -> list[tuple[str, str]]:
        # Pairs are made for the k chosen only: a list of one tuple per row, alive
        # through the search, made the garbage collector run full passes over the
        # row cache every few searches (p95 ~110 ms at 10k rows).
        owners: list[str] = []
        id_lists: list[list[str]] = []
        sims: list[np.ndarray] = []
        for owner, rows in by_owner.items():
            ids, s = rows.similarities(query)
            if ids:
                owners.append(owner)
                id_lists.append(ids)
                sims.append(s)
        if not sims:
            return []
        starts = np.cumsum([0, *(len(ids) for ids in id_lists)])
        order = np.argsort(-np.concatenate(sims), kind="stable")[:k]
        out = []
        for i in order:
            j = int(np.searchsorted(starts, i, side="right")) - 1
            out.append((owners[j], id_lists[j][int(i - starts[j])]))
        return out
