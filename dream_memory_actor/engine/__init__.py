"""The memory core in one process, no Ray: the engine (``memory_engine``), the
operations every layer serves, each described once (``operations``), what the doors
talk to (``doors``), and moving an owner in and out (``portability``, rebuilt
through ``replay``)."""

from .memory_engine import MemoryEngine

__all__ = ["MemoryEngine"]
