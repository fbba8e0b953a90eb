"""L3 on Redis: the chat window of each conversation, beside the L1 keys of its owner.

A chat window is a list: an append is RPUSH, LRANGE of what falls out, LTRIM and
LRANGE of what is kept in one MULTI/EXEC; ending a conversation is LRANGE and DEL
in one. Both WATCH the list first, only so that a connection lost during EXEC is
an error (``BackendUnavailable``) rather than a silent resend by redis-py's
retry, which would append the messages twice or return an empty window.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...errors import BackendError
from ...models import ChatMessage
from .common import MAX_TX_ATTEMPTS, OP_ID_RETENTION_S, Keys, OwnerLocks, committed, translate


class RedisChatWindows:
    """The chat-window half of ``RedisStructuredStore`` (its client, keys and locks)."""

    _r: Any
    _keys: Keys
    _window_locks: OwnerLocks

    async def _append_messages(self, owner: str, conversation: str,
                               messages: Sequence[ChatMessage], window: int,
                               op_id: str | None
                               ) -> tuple[list[ChatMessage], list[ChatMessage]]:
        bodies = [m.model_dump_json() for m in messages]

        def queue(pipe: Any, key: str) -> None:
            if bodies:
                pipe.rpush(key, *bodies)
            pipe.lrange(key, 0, -(window + 1))  # what falls out, oldest first
            pipe.ltrim(key, -window, -1)
            pipe.lrange(key, 0, -1)

        op_key = None if op_id is None else self._keys.l1_op(owner, op_id)
        reply = await self._window_tx(owner, conversation, "append_messages", queue, op_key)
        if reply is None:  # a retry of an applied append
            return await self._load_window(owner, conversation), []
        return _chat(reply[-1]), _chat(reply[-3])

    async def _load_window(self, owner: str, conversation: str) -> list[ChatMessage]:
        with translate("load_window"):
            raw = await self._r.lrange(self._keys.l3_window(owner, conversation), 0, -1)
        return _chat(raw)

    async def _end_conversation(self, owner: str, conversation: str) -> list[ChatMessage]:
        def queue(pipe: Any, key: str) -> None:
            pipe.lrange(key, 0, -1)
            pipe.delete(key)

        reply = await self._window_tx(owner, conversation, "end_conversation", queue)
        assert reply is not None  # None only answers an operation id
        return _chat(reply[0])

    async def _window_tx(self, owner: str, conversation: str, what: str,
                         queue: Callable[[Any, str], None], op_key: str | None = None
                         ) -> list[Any] | None:
        """Run the commands ``queue`` adds in one MULTI/EXEC on the conversation's window.

        The key is watched so that a lost connection is an error, not a resend.
        With ``op_key`` (an operation id's record): ``None`` if it exists, else it is
        written in the same transaction.
        """
        from redis.exceptions import WatchError

        key = self._keys.l3_window(owner, conversation)
        async with self._window_locks.hold(key):
            with translate(what):
                for _ in range(MAX_TX_ATTEMPTS):
                    async with self._r.pipeline(transaction=True) as pipe:
                        try:
                            await pipe.watch(key, *([] if op_key is None else [op_key]))
                            if op_key is not None and await pipe.exists(op_key):
                                return None
                        except WatchError:
                            continue  # the connection dropped before any write: again
                        pipe.multi()
                        if op_key is not None:  # first: the replies end with queue's
                            pipe.set(op_key, 1, ex=OP_ID_RETENTION_S)
                        queue(pipe, key)
                        replies = await committed(
                            pipe, unsure=f"the chat window may or may not have changed ({what})")
                        if replies is not None:
                            return replies
                        # another process wrote the window: again
        raise BackendError(f"owner {owner!r}: too many concurrent writers, {what} gave up")


def _chat(raw: Sequence[bytes]) -> list[ChatMessage]:
    return [ChatMessage.model_validate_json(r) for r in raw]
