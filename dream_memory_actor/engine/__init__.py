"""The memory core in one process, no Ray: the engine, and moving an owner in and out
(``portability``, rebuilt through ``replay``)."""

from .memory_engine import MemoryEngine, judge_model, write_cuts

__all__ = ["MemoryEngine", "judge_model", "write_cuts"]
