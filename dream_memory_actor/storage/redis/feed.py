"""The change feed on Redis: ``SUBSCRIBE`` on the prefix's channel.

Every L1 write queues ``PUBLISH <prefix>:l1:changes <change>`` in its MULTI/EXEC,
so the announcement goes out with the write, and not without it. One channel per
key prefix, the change names the owner: a process needs one subscription
whatever the number of owners it holds (see ``postgres.feed`` for the same choice).

Pub/sub delivers at most once: a subscriber that was disconnected misses what was
published meanwhile. redis-py resubscribes by itself when it reconnects, which
the server confirms with a ``subscribe`` message: every confirmation after the
first is reported as ``None`` (announcements may have been missed). When the
reconnection itself fails, the feed starts a new subscription after a growing
pause (``RETRY_S`` doubling up to ``MAX_RETRY_S``), reported the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from ..changes import (
    MAX_RETRY_S,
    RETRY_S,
    BackgroundFeed,
    ChangeCallback,
)

log = logging.getLogger(__name__)

#: How long one wait for a message lasts (the loop then looks again).
POLL_S = 1.0


def channel_name(prefix: str) -> str:
    return f"{prefix}:l1:changes"


class RedisChangeFeed(BackgroundFeed):
    """One subscription that reports each announcement on the prefix's channel."""

    def __init__(self, client: Any, prefix: str, callback: ChangeCallback) -> None:
        self._client = client
        self._channel = channel_name(prefix)
        super().__init__(callback)  # ``connects`` counts the confirmed subscriptions

    async def _run(self) -> None:
        pause = RETRY_S
        while True:
            pubsub = self._client.pubsub()
            try:
                await pubsub.subscribe(self._channel)
                while True:
                    msg = await pubsub.get_message(timeout=POLL_S)
                    if msg is None:
                        continue
                    if msg["type"] == "subscribe":
                        pause = RETRY_S
                        self._connected()
                    elif msg["type"] == "message":
                        self._report(msg["data"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # down: subscribe again after a pause
                log.warning("the change feed on %r lost its subscription: %s",
                            self._channel, exc)
                self._ready.set()
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_RETRY_S)
