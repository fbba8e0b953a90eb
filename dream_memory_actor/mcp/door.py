"""What an MCP tool works with (:class:`Door`) and how the server lists it (:class:`ToolEntry`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..engine.auth import Grant
from ..engine.doors import MemoryBackend
from ..models import MemorySnapshot
from ..storage.ops import L1Op
from ..validation import l1 as check_l1
from .params import Param


@dataclass(frozen=True)
class Door:
    """What a tool works with: the backend, and who is calling (their grant)."""

    backend: MemoryBackend
    grant: Callable[[], Grant]

    def owner(self, owner: object) -> str:
        """``owner`` checked and granted to the caller."""
        return self.grant().owner(owner)

    def by(self) -> str:
        """The caller's name, recorded as the decider of confirmations and rejections."""
        return self.grant().name

    async def apply(self, owner: str, ops: list[L1Op]) -> MemorySnapshot:
        s = self.backend.settings
        return await self.backend.apply(owner, check_l1.ops(ops, s.max_content_bytes, s.limits))


Effect = Literal["read", "write", "destructive"]


@dataclass(frozen=True)
class ToolEntry:
    """One tool: its function, a title, what it does to the memory (``read``: nothing;
    ``write``: adds or updates; ``destructive``: removes or replaces), and whether a
    repeated call with the same arguments changes nothing more (``idempotent``)."""

    fn: Callable[..., Any]
    title: str
    effect: Effect
    idempotent: bool
    #: Descriptions for parameters outside the shared vocabulary (``params.PARAMS``).
    params: Mapping[str, Param] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.fn.__name__
