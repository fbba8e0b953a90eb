"""Adapters of the memory to agent frameworks (each needs its extra: ``langgraph``)."""
