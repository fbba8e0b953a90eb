"""Acknowledged writes: ``WAIT`` for replicas after each write transaction (optional).

Redis replicates asynchronously: EXEC answers once the master applied the write,
before any replica has it. A master that dies right after may take acknowledged
writes with it when a replica that had not received them is promoted.

With ``redis_wait_replicas = n`` every MULTI/EXEC of the stores is followed, on the
same connection, by ``WAIT n redis_wait_timeout_ms``: the call returns only when
``n`` replicas hold the write. When fewer acknowledge it in time, the call raises
:class:`ReplicationTimeout` (a ``BackendUnavailable``): the write *is* applied on
the master and may or may not survive a failover; a retry with the same ``op_id``
applies it at most once (and answers without waiting again).

``WAIT`` narrows the window; it does not make Redis strongly consistent: a replica
that acknowledged can still lose the election to one that did not (Redis Cluster
promotes the replica with the largest replication offset, which is the one that
acknowledged whenever only one did).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ...errors import BackendUnavailable


class ReplicationTimeout(BackendUnavailable):
    """A write was applied on the Redis master but too few replicas acknowledged it."""


@lru_cache(maxsize=1)
def waiting_client_class() -> type[Any]:
    """``redis.asyncio.Redis`` whose transaction pipelines ``WAIT`` after EXEC.

    The class reads ``wait_replicas`` / ``wait_timeout_ms`` from the instance
    (0 replicas: a plain client).
    """
    from redis.asyncio import Redis
    from redis.asyncio.client import Pipeline

    class WaitingPipeline(Pipeline):
        wait_replicas = 0
        wait_timeout_ms = 0

        async def _execute_transaction(self, connection: Any, commands: Any,
                                       raise_on_error: bool) -> Any:
            reply = await super()._execute_transaction(connection, commands, raise_on_error)
            if self.wait_replicas:
                await connection.send_command("WAIT", self.wait_replicas,
                                              self.wait_timeout_ms)
                acked = int(await connection.read_response())
                if acked < self.wait_replicas:
                    raise ReplicationTimeout(
                        f"the write is applied on the Redis master, but only {acked} of "
                        f"{self.wait_replicas} replicas acknowledged it within "
                        f"{self.wait_timeout_ms} ms: a failover now may lose it (retry "
                        "with the same op_id to apply it at most once)")
            return reply

    class WaitingRedis(Redis):
        wait_replicas = 0
        wait_timeout_ms = 0

        def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Any:
            pipe = WaitingPipeline(self.connection_pool, self.response_callbacks,
                                   transaction, shard_hint)
            pipe.wait_replicas = self.wait_replicas if transaction else 0
            pipe.wait_timeout_ms = self.wait_timeout_ms
            return pipe

    return WaitingRedis
