"""Run the demo: ``python -m agents_demo`` (or ``dream-memory demo``).

It opens the memory on the embedded default (PostgreSQL + pgvector started in
the per-user data directory; ``DREAM_MEMORY_*`` settings apply), then plays two
scripted agents sharing one user's memory:

* a code-review agent is told "from now on, look at security first"; in a later
  conversation its system prompt carries that rule;
* a deploy agent stored "went live on Kubernetes with helm"; a search for
  "K8s deployment" finds it.

The agents' replies are scripted (no LLM is called); the memory is real.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from dream_memory_actor import MemoryEngine, MemorySettings

USER = "demo-user"


def _say(who: str, text: str) -> None:
    print(f"  {who:>12} | {text}")


async def run(settings: MemorySettings) -> int:
    t0 = time.perf_counter()
    engine = await MemoryEngine.open(settings)
    where = ("embedded PostgreSQL in " + str(settings.data_dir / "pg")
             if settings.backend == "postgres" and settings.postgres_dsn is None
             else settings.backend)
    mode = (f"hybrid search with embeddings from {engine.embedder.model}" if engine.embedder
            else "keyword + time search (no embedding model configured)")
    print(f"memory: {where}; {mode}; opened in {time.perf_counter() - t0:.1f}s")
    run_id = f"{USER}-{os.getpid()}-{int(time.time())}"
    try:
        print("\nconversation 1 — code-review agent")
        _say("user", "From now on, look at security first in code review.")
        rule = await engine.structured.add_rule(run_id, "In code review, look at security first")
        await engine.structured.add_fact(run_id, "The user is a Java developer")
        await engine.structured.set_status(run_id, "current_project", "dream-saas")
        _say("review-agent", f"Noted (rule {rule.id[:8]} saved).")

        print("\nconversation 2 — deploy agent")
        _say("user", "We went live on Kubernetes with helm yesterday.")
        stored = await engine.store(
            run_id, "Went live on Kubernetes with helm; rollout took 20 min",
            metadata={"agent": "deploy"})
        await engine.store(run_id, "The team prefers green tea at standups",
                           metadata={"agent": "smalltalk"})
        _say("deploy-agent", f"Stored memory {stored.memory.id[:8]}.")

        print("\nconversation 3 — a later review, a new agent process")
        snap = await engine.snapshot(run_id)
        print("  system prompt injected from memory:")
        for line in snap.to_prompt().splitlines():
            print(f"    {line}")
        _say("review-agent", "Starting with the security review, as you asked.")

        query = "K8s deployment"
        print(f"\nsearch: {query!r}")
        for hit in await engine.search(run_id, query, limit=3):
            vec = "  n/a" if hit.vector_score is None else f"{hit.vector_score:.3f}"
            print(f"  {hit.score:.3f} (vector {vec}, keyword {hit.keyword_score:.2f}, "
                  f"time {hit.time_score:.2f})  {hit.memory.content}")
    finally:
        await engine.close()
    print(f"\ndone in {time.perf_counter() - t0:.1f}s; owner id of this run: {run_id}")
    return 0


def main() -> int:
    settings = MemorySettings()
    if settings.embedding_model is None and os.environ.get("DREAM_MEMORY_DEMO_LOCAL", "1") == "1":
        try:
            import sentence_transformers  # noqa: F401
            settings = settings.model_copy(update={"embedding_model": "local:all-MiniLM-L6-v2"})
        except ImportError:
            pass
    return asyncio.run(run(settings))


if __name__ == "__main__":
    sys.exit(main())
