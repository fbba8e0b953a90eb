"""What the MCP server talks to: the memory interface of :mod:`dream_memory_actor.access`."""

from ..access import LocalBackend, MemoryBackend, RayBackend

__all__ = ["LocalBackend", "MemoryBackend", "RayBackend"]
