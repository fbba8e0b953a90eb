"""A Redis Cluster for the tests: three masters and three replicas on loopback ports.

Six ``redis-server --cluster-enabled yes`` processes (each with its own free
client port and cluster-bus port), joined by ``redis-cli --cluster create ...
--cluster-replicas 1 --cluster-yes``; ready when every node reports
``cluster_state:ok`` and every replica is in sync. ``DREAM_MEMORY_TEST_REDIS_CLUSTER_URL``
(``redis+cluster://host:port,...``) names an existing cluster instead. A cluster
that cannot be started is an error with the reason, never a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.support.redis_servers import PLAIN_SERVER, RedisServer, RedisServerError
from tests.support.servers import free_ports

#: Short, so that a failover (detection + election) takes a few seconds.
NODE_TIMEOUT_MS = 1500


@dataclass
class RedisCluster:
    """Six cluster nodes this test session started (masters first, as created)."""

    binary: str = PLAIN_SERVER
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    nodes: list[RedisServer] = field(default_factory=list)

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:3])

    def start(self, timeout: float = 60.0) -> None:
        cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
        for _ in range(6):
            port, bus = free_ports(2)
            node = RedisServer(self.binary, [
                *self.extra_args, "--cluster-enabled", "yes", "--cluster-port", str(bus),
                "--cluster-config-file", f"nodes-{port}.conf",
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                "--cluster-replica-validity-factor", "0",  # any replica may be promoted
                # the other masters keep serving their slots while one is down
                "--cluster-require-full-coverage", "no",
            ], env=self.env)
            node.port = port
            node.start()
            self.nodes.append(node)
        addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
        done = subprocess.run([cli, "--cluster", "create", *addrs, "--cluster-replicas", "1",
                               "--cluster-yes"], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RedisServerError(f"redis-cli --cluster create failed:\n{done.stdout}\n"
                                   f"{done.stderr}")
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until every live node says ``cluster_state:ok`` and every replica is synced."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            last = self._not_ready()
            if not last:
                return
            time.sleep(0.2)
        raise RedisServerError(f"the Redis Cluster did not become ready: {last}")

    def _not_ready(self) -> str:
        import redis

        for n in self.live():
            c: Any = redis.Redis(port=n.port, socket_timeout=2)
            try:
                info = c.execute_command("CLUSTER INFO")
                if isinstance(info, dict):
                    state = str(info.get("cluster_state"))
                else:
                    text = info.decode() if isinstance(info, bytes) else str(info)
                    state = "ok" if "cluster_state:ok" in text else text
                if state != "ok":
                    return f"node {n.port}: not ok"
                repl = c.info("replication")
                if repl.get("role") == "slave" and repl.get("master_link_status") != "up":
                    return f"replica {n.port}: link {repl.get('master_link_status')}"
            except redis.exceptions.RedisError as exc:
                return f"node {n.port}: {exc}"
            finally:
                c.close()
        return ""

    def replica_of(self, master: RedisServer) -> RedisServer:
        import redis

        c: Any = redis.Redis(port=master.port, socket_timeout=2)
        try:
            port = int(c.info("replication")["slave0"]["port"])
        finally:
            c.close()
        return next(n for n in self.nodes if n.port == port)

    def live(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.proc is not None]

    def role(self, node: RedisServer) -> str:
        import redis

        c: Any = redis.Redis(port=node.port, socket_timeout=2)
        try:
            return str(c.info("replication")["role"])
        finally:
            c.close()

    def masters(self) -> list[RedisServer]:
        return [n for n in self.live() if self.role(n) == "master"]

    def master_of(self, key: str) -> RedisServer:
        """The node serving ``key``'s slot now (as a live node sees the map)."""
        import redis
        from redis.crc import key_slot

        slot = key_slot(key.encode())
        c: Any = redis.Redis(port=self.live()[0].port, socket_timeout=2)
        try:
            table = _raw_slots(c)
        finally:
            c.close()
        for start, end, (_, port) in table:
            if start <= slot <= end:
                return next(n for n in self.nodes if n.port == int(port))
        raise AssertionError(f"no master serves slot {slot}")

    def cleanup(self) -> None:
        for n in self.nodes:
            n.cleanup()


def _raw_slots(client: Any) -> list[Any]:
    reply = client.execute_command("CLUSTER SLOTS")
    if isinstance(reply, dict):  # parsed by redis-py: {(start, end): {"primary": (h, p)}}
        return [(s, e, (v["primary"][0], v["primary"][1])) for (s, e), v in reply.items()]
    return [(int(r[0]), int(r[1]), (r[2][0], r[2][1])) for r in reply]


@contextmanager
def redis_cluster(base: RedisServer | None = None) -> Iterator[RedisCluster]:
    """A started cluster of ``base``'s binary, arguments and environment (plain Redis)."""
    cluster = (RedisCluster() if base is None
               else RedisCluster(base.binary, list(base.extra_args), base.env))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.cleanup()


@contextmanager
def redis_cluster_url() -> Iterator[str]:
    """The URL of a Redis Cluster (``DREAM_MEMORY_TEST_REDIS_CLUSTER_URL`` or ours)."""
    url = os.environ.get("DREAM_MEMORY_TEST_REDIS_CLUSTER_URL")
    if url:
        yield url
        return
    with redis_cluster() as cluster:
        yield cluster.url


def drop_cluster_prefix(url: str, prefix: str) -> None:
    """Delete every key of ``prefix`` on every master of the cluster (test cleanup)."""
    import redis

    first = url.split("://", 1)[1].split(",")[0]
    host, _, port = first.rpartition(":")
    c: Any = redis.Redis(host=host, port=int(port))
    try:
        ports = {int(p[1]) for _, _, p in _raw_slots(c)}
    finally:
        c.close()
    for p in ports:
        node: Any = redis.Redis(host=host, port=p)
        try:
            batch = list(node.scan_iter(match=f"{prefix}:*", count=1000))
            for key in batch:  # one by one: keys of different owners live in other slots
                node.unlink(key)
        except redis.exceptions.RedisError:
            pass  # a node killed by the test
        finally:
            node.close()
