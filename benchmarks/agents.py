"""agents: many agents (Ray tasks) on shared owners; throughput, latency, writer wait.

``--agents`` agents run in ``--tasks`` Ray tasks (asyncio inside each, as in
``concurrency``), agent ``a`` working for owner ``user-(a mod --owners)`` and all of
them for one shared owner, ``team``. Each agent waits for its answer before its next
operation, drawn at random in the proportions ``--mix`` gives (default 50% snapshot
reads, 25% searches, 15% L2 stores, 10% L1 writes):

- snapshot read: its owner's snapshot, or the team's (``--team-share`` of them);
- search: its owner's memories and the team's, ``search(q, also=["team"])``;
- store: a text of its own, so the embedder runs for each (about a third Chinese,
  ``--chinese``), on its owner or the team; ``--restate`` of the stores put one of a few
  team announcements again, as several agents relaying the same news would;
- L1 write: a status entry (half of them), a fact or a rule (review_updates on, as
  ``add_fact`` / ``add_rule`` do: a new version of a current item waits as a pending
  correction), on its owner or the team.

Each owner first gets ``--seed-memories`` memories, so searches find something. Every
agent starts when all tasks are ready (a version gate on the team owner, as in
``concurrency``), and the wall time runs from that start to the last answer.

Writer wait: the runtime does not time how long a write waits for an owner's lock, so
what is reported is measured from the caller: the latency of each L1 write on the team
owner, split by whether a store on the team owner was in flight meanwhile (by the
callers' clocks: one machine, or clocks in sync). Its maximum bounds from above the
longest an L1 write waited behind the owner's writer.

Nothing lost, duplicated or applied twice, summed over owners: ``concurrency``'s replay
check of each owner's L1 writes (``verify_l1``: ``lost``, ``double_applied``,
``versions_contiguous``, ``replay_matches``), and a check of the stores, each
acknowledged by the memory it landed in: an acknowledged memory that is current (not
superseded by a later store) and missing is ``lost``; a memory no acknowledged store
landed in, or a second memory holding an announcement's text (the same text is always
merged), is a ``duplicate``; ``merges_once``: each memory's ``merge_count`` is the
number of stores merged into it.

``--model`` names a local embedding model (``multilingual-e5-small`` is the settings'
``local:multilingual-e5-small``), ``hashing`` the library's model-free test embedder,
``none`` keyword-only search.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import os
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dream_memory_actor.models import MemorySnapshot, VectorMemory
from dream_memory_actor.storage.ops import AddFact, AddRule, L1Op, SetStatus
from dream_memory_actor.text import content_hash

from .concurrency import Record, verify_l1
from .stats import command, machine, percentiles_ms

KINDS = ("snapshot", "search", "store", "l1_write")
DEFAULT_MIX = "50,25,15,10"
TEAM = "team"

# -- what the agents say ------------------------------------------------------------------

SERVICES = ("billing", "checkout", "search", "login", "notifications", "payments gateway",
            "reporting", "inventory")
SERVICES_ZH = ("计费服务", "结算服务", "搜索服务", "登录服务", "通知服务", "支付网关", "报表服务",
               "库存服务")
ENVS = ("staging", "production", "the EU cluster", "the canary pool")
ENVS_ZH = ("预发环境", "生产环境", "欧洲集群", "灰度环境")
PEOPLE = ("Alice", "Bob", "Dmitri", "Fatima", "María", "Tom", "Priya", "Kenji")
PEOPLE_ZH = ("王芳", "李娜", "陈伟", "张强", "刘洋", "赵敏", "周杰", "孙丽")
ISSUES = ("p99 latency above 800 ms", "a memory leak in the worker pool",
          "expired TLS certificates", "a migration that locked the orders table",
          "retry storms from the mobile client", "disk usage at 91%",
          "a flaky integration test", "a misconfigured feature flag")
ISSUES_ZH = ("p99 延迟超过 800 毫秒", "工作进程池内存泄漏", "TLS 证书过期",
             "数据库迁移锁住了订单表", "移动端重试风暴", "磁盘使用率达到 91%", "集成测试不稳定",
             "功能开关配置错误")
CAUSES = ("a missing index", "a connection pool of 5", "an unbounded cache",
          "a cron job running twice", "a DNS change", "a library upgrade")
CAUSES_ZH = ("缺少索引", "连接池只有 5 个连接", "缓存没有上限", "定时任务重复执行", "DNS 变更",
             "依赖库升级")
METRICS = ("error rate", "queue depth", "checkout conversion", "CPU throttling")
METRICS_ZH = ("错误率", "队列积压", "下单转化率", "CPU 限流")
TECH = ("Kubernetes 1.29", "PostgreSQL 16", "Redis 7", "Kafka 3.6", "two c6i.xlarge nodes")
DAYS = ("Monday", "Tuesday", "Thursday", "Friday")
DAYS_ZH = ("周一", "周二", "周四", "周五")
LANGS = ("English", "Chinese", "Spanish")
LANGS_ZH = ("中文", "英文")

STORES = (
    "{person} found that {service} on {env} had {issue}; fixed in PR #{n}.",
    "A customer reported that {service} timed out during checkout; ticket SUP-{n} is "
    "assigned to {person}.",
    "Release 4.{minor}.{n} of {service} went to {env} after the load test passed.",
    "Postmortem {n}: {issue} in {service} was caused by {cause}; {person} owns the "
    "follow-up.",
    "The {service} dashboard on {env} now alerts on {metric} (change CHG-{n}).",
    "{person} asked that every change to {service} gets two reviewers, decided in design "
    "review {n}.",
)
STORES_ZH = (
    "{person}发现{env}的{service}出现{issue}，已在 PR #{n} 中修复。",
    "有客户反馈{service}在下单时超时，工单 SUP-{n} 已分配给{person}。",
    "{service} 4.{minor}.{n} 版本在压测通过后发布到了{env}。",
    "复盘 {n}：{service}的{issue}是由{cause}引起的，后续改进由{person}负责。",
    "{env}的{service}监控面板新增了{metric}告警（变更单 CHG-{n}）。",
)
QUERIES = ("what went wrong with {service} on {env}?", "who handles the {service} tickets?",
           "which release of {service} is on {env}?", "postmortem about {issue}",
           "what does {person} want for {service} reviews?", "alerts on {metric}")
QUERIES_ZH = ("{env}的{service}出了什么问题？", "谁在处理{service}的工单？",
              "{service}最近发布了哪个版本？", "关于{issue}的复盘", "{metric}告警")
#: What several agents relay to the team as it was said: each must be one memory.
ANNOUNCEMENTS = (
    "Code freeze for the payments gateway starts Friday at 18:00 UTC.",
    "The on-call rotation moves to the new pager schedule next Monday.",
    "所有生产环境的变更都必须先在预发环境验证。",
    "Staging databases are reset every Sunday at 02:00 UTC.",
)
FACTS = ("{service} on {env} runs on {tech}.", "{person} is on call for {service} this week.",
         "The {service} team meets on {day} at {hour}:00.")
FACTS_ZH = ("{env}的{service}运行在{tech}上。", "本周{service}的值班人是{person}。",
            "{service}团队每{day}{hour}点开例会。")
RULES = ("Answer in {lang}.", "Run the smoke tests before deploying {service} to {env}.",
         "Never deploy {service} on a {day}.", "Page {person} for {service} incidents.",
         "Keep answers under {words} words.")
RULES_ZH = ("用{lang}回答。", "发布{service}到{env}之前先跑冒烟测试。", "{day}不要发布{service}。",
            "{service}出故障时呼叫{person}。")


def _slots(rng: random.Random, zh: bool, n: int) -> dict[str, Any]:
    pick = rng.choice
    return {
        "service": pick(SERVICES_ZH if zh else SERVICES), "env": pick(ENVS_ZH if zh else ENVS),
        "person": pick(PEOPLE_ZH if zh else PEOPLE), "issue": pick(ISSUES_ZH if zh else ISSUES),
        "cause": pick(CAUSES_ZH if zh else CAUSES), "metric": pick(METRICS_ZH if zh else METRICS),
        "day": pick(DAYS_ZH if zh else DAYS), "lang": pick(LANGS_ZH if zh else LANGS),
        "tech": pick(TECH), "hour": rng.choice((9, 10, 14, 16)),
        "words": rng.choice((100, 150, 200)), "minor": rng.randrange(1, 9), "n": n,
    }


def say(rng: random.Random, zh: bool, templates: Sequence[str], templates_zh: Sequence[str],
        n: int = 0) -> str:
    """One text of ``templates`` (``templates_zh`` when ``zh``), its slots drawn by ``rng``;
    ``n`` is the ticket or release number of a store, unique to it."""
    return rng.choice(templates_zh if zh else templates).format(**_slots(rng, zh, n))


# -- the workload -------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """What every agent does, in which proportions (``mix`` in ``KINDS`` order)."""

    mix: tuple[float, ...] = (50, 25, 15, 10)
    team_share: float = 0.25
    restate: float = 0.1
    chinese: float = 0.33
    seed: int = 0


@dataclass(frozen=True)
class Agent:
    """Agent ``index``: its owner's handle, the team's, how many operations it makes, and
    the first of the numbers its stores carry (each store a number of its own)."""

    index: int
    own: Any
    team: Any
    steps: int
    first_number: int


@dataclass
class Op:
    """One answered operation: what it was, on which owner, when it started (wall clock)
    and how long it took; for writes what was sent and what came back."""

    kind: str
    owner: str
    started: float
    seconds: float
    ops: list[L1Op] = field(default_factory=list)
    version: int = 0
    memory_id: str = ""
    merged: bool = False
    superseded: bool = False
    related: str | None = None
    hits: int = 0
    team_hits: int = 0
    error: str = ""


def l1_op(rng: random.Random, zh: bool, agent: int, on_team: bool, n: int) -> L1Op:
    """A status entry (half the time), a fact or a rule, as an agent would write them."""
    x = rng.random()
    if x < 0.5:
        s = _slots(rng, zh, n)
        if on_team:  # what is deployed where, one key per service
            key = SERVICES[rng.randrange(len(SERVICES))].replace(" ", "-")
            return SetStatus(f"deploy.{key}", f"4.{s['minor']}.{n} @ {s['env']}")
        return SetStatus(f"agent{agent}.task", f"PR #{n}: {s['service']}")
    if x < 0.8:
        return AddFact(say(rng, zh, FACTS, FACTS_ZH), source="agent", review_updates=True)
    return AddRule(say(rng, zh, RULES, RULES_ZH), source="agent", review_updates=True)


async def run_agent(agent: Agent, work: Workload, gate: int) -> list[Op]:
    """Wait for the gate version on the team owner, then ``agent.steps`` operations."""
    rng = random.Random(work.seed * 1_000_003 + agent.index)
    await agent.team.snapshot_async(min_version=gate, timeout_s=300)
    out: list[Op] = []
    for step in range(agent.steps):
        kind = rng.choices(KINDS, weights=work.mix)[0]
        on_team = rng.random() < work.team_share
        target = agent.team if on_team else agent.own
        zh = rng.random() < work.chinese
        n = agent.first_number + step
        op = Op(kind, target.owner, 0.0, 0.0)
        # What to send is made before the clock starts.
        if kind == "search":
            op.owner = agent.own.owner
            query = say(rng, zh, QUERIES, QUERIES_ZH)
        elif kind == "store":
            text = say(rng, zh, STORES, STORES_ZH, n)
            if rng.random() < work.restate:
                target, op.owner = agent.team, agent.team.owner
                text = restated(rng.randrange(len(ANNOUNCEMENTS)), agent.index, step)
        elif kind == "l1_write":
            op.ops = [l1_op(rng, zh, agent.index, on_team, n)]
        op.started, t0 = time.time(), time.perf_counter()
        try:
            if kind == "snapshot":
                await target.snapshot_async()
            elif kind == "search":
                hits = await agent.own.search_async(query, limit=5, also=[agent.team.owner])
                op.hits = len(hits)
                op.team_hits = sum(h.memory.owner == agent.team.owner for h in hits)
            elif kind == "store":
                r = await target.store_async(text, {"agent": agent.index, "step": step})
                op.memory_id, op.merged = r.memory.id, r.merged
                op.superseded, op.related = r.superseded, r.related
            else:
                op.version = (await target.apply_async(op.ops)).version
        except Exception as exc:  # counted and reported: the run goes on
            op.error = f"{type(exc).__name__}: {exc}"[:300]
        op.seconds = time.perf_counter() - t0
        out.append(op)
    return out


def restated(topic: int, agent: int, step: int) -> str:
    """Announcement ``topic`` as an agent relays it: the same text, spaced its own way."""
    text = ANNOUNCEMENTS[topic]
    return (text, f"  {text}", f"{text}\n", text.replace(" ", "  ", 1))[(agent + step) % 4]


async def run_task(task: int, agents: Sequence[Agent], work: Workload, gate: int
                   ) -> list[Op]:
    """One Ray task's agents: connect (a read and a search of each owner), say ready
    (one L1 write on the team owner), then run the agents concurrently."""
    team = agents[0].team
    for a in agents:
        await a.own.snapshot_async()
        await a.own.search_async("warm-up", limit=1, also=[team.owner])
    await team.snapshot_async()
    ready: list[L1Op] = [SetStatus(f"ready{task}", "1")]
    snap = await team.apply_async(ready)
    first = Op("l1_write", team.owner, time.time(), 0.0, ops=ready, version=snap.version)
    done = await asyncio.gather(*(run_agent(a, work, gate) for a in agents))
    return [first, *(op for ops in done for op in ops)]


def _run_task(task: int, agents: Sequence[Agent], work: Workload, gate: int) -> list[Op]:
    return asyncio.run(run_task(task, agents, work, gate))


def run_load(agents: Sequence[Agent], tasks: int, work: Workload) -> tuple[list[Op], float]:
    """Run ``agents`` in ``tasks`` Ray tasks, started together; every answered operation
    (the gate's writes with no duration) and the wall time from the start."""
    import ray

    team = agents[0].team
    remote = ray.remote(num_cpus=0, max_retries=0)(_run_task)
    groups = [list(agents[i::tasks]) for i in range(tasks) if agents[i::tasks]]
    base = team.snapshot().version
    gate = base + len(groups) + 1  # every task said ready, then the driver's "go"
    refs = [remote.remote(i, g, work, gate) for i, g in enumerate(groups)]
    team.snapshot(min_version=gate - 1, timeout_s=300)
    go: list[L1Op] = [SetStatus("go", "1")]
    t0 = time.perf_counter()
    snap = team.apply(go)
    ops = [op for got in ray.get(refs) for op in got]
    wall = time.perf_counter() - t0
    return [Op("l1_write", team.owner, time.time(), 0.0, ops=go, version=snap.version),
            *ops], wall


# -- what the run shows -------------------------------------------------------------------


def summary(seconds: Sequence[float]) -> dict[str, Any]:
    """``percentiles_ms`` and the maximum."""
    return {**percentiles_ms(seconds),
            "max_ms": round(max(seconds) * 1000.0, 3) if seconds else float("nan")}


def writer_wait(ops: Sequence[Op], owner: str) -> dict[str, Any]:
    """L1 write latencies on ``owner`` while a store on it was in flight, and otherwise."""
    stores = sorted((o.started, o.started + o.seconds) for o in ops
                    if o.kind == "store" and o.owner == owner and not o.error)
    starts = [s for s, _ in stores]
    latest_end: list[float] = []  # the latest end among the stores started so far
    for _, end in stores:
        latest_end.append(max(end, latest_end[-1]) if latest_end else end)
    during: list[float] = []
    otherwise: list[float] = []
    for o in ops:
        if o.kind != "l1_write" or o.owner != owner or o.seconds <= 0 or o.error:
            continue
        i = bisect.bisect_left(starts, o.started + o.seconds)  # stores started before its end
        (during if i and latest_end[i - 1] > o.started else otherwise).append(o.seconds)
    return {"owner": owner, "l1_write_while_storing": summary(during),
            "l1_write_otherwise": summary(otherwise)}


def verify_stores(ops: Sequence[Op], memories: Sequence[VectorMemory]) -> dict[str, Any]:
    """The stores' check (see the module doc), over every owner's stores and memories."""
    stores = [o for o in ops if o.kind == "store" and not o.error]
    acked = {o.memory_id for o in stores}
    retired = {o.related for o in stores if o.superseded and o.related}
    held = {m.id for m in memories}
    merged_into = Counter(o.memory_id for o in stores if o.merged)
    said = {content_hash(text): i for i, text in enumerate(ANNOUNCEMENTS)}
    holding = Counter(said[h] for m in memories if (h := content_hash(m.content)) in said)
    return {
        "lost": len(acked - retired - held),
        "duplicates": len(held - acked) + sum(n - 1 for n in holding.values()),
        "merges_once": all(int(m.metadata.get("merge_count", 0)) == merged_into[m.id]
                           for m in memories),
    }


def check(ops: Sequence[Op], finals: dict[str, MemorySnapshot],
          bases: dict[str, MemorySnapshot], memories: Sequence[VectorMemory]
          ) -> dict[str, Any]:
    """The L1 replay of each owner and the stores' check, summed."""
    l1 = {owner: verify_l1([Record("l1", o.seconds, ops=o.ops, version=o.version)
                            for o in ops if o.kind == "l1_write" and o.owner == owner
                            and not o.error], final, bases[owner])
          for owner, final in finals.items()}
    l2 = verify_stores(ops, memories)
    return {
        "lost": sum(c["lost"] for c in l1.values()) + l2["lost"],
        "duplicates": l2["duplicates"],
        "double_applied": sum(c["double_applied"] for c in l1.values()),
        "versions_contiguous": all(c["versions_contiguous"] for c in l1.values()),
        "replay_matches": all(c["replay_matches"] for c in l1.values()),
        "merges_once": l2["merges_once"],
        "lost_by_layer": {"l1": sum(c["lost"] for c in l1.values()), "l2": l2["lost"]},
    }


def all_memories(handle: Any) -> list[VectorMemory]:
    out: list[VectorMemory] = []
    while True:
        page = handle.list(limit=1000, offset=len(out))
        out += page
        if len(page) < 1000:
            return out


# -- options and run ----------------------------------------------------------------------


def parse_mix(text: str) -> tuple[float, ...]:
    """``"50,25,15,10"``: the weights of snapshot reads, searches, stores and L1 writes."""
    try:
        mix = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--mix takes four numbers, got {text!r}") from None
    if len(mix) != len(KINDS) or min(mix) < 0 or not sum(mix) > 0:
        raise argparse.ArgumentTypeError(
            f"--mix takes four weights >= 0, not all 0 ({', '.join(KINDS)}), got {text!r}")
    return mix


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .runtime_args import add_runtime_arguments

    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--owners", type=int, default=4,
                        help="owners the agents work for, besides the shared team owner")
    parser.add_argument("--tasks", type=int, default=4, help="Ray tasks the agents run in")
    parser.add_argument("--ops", type=int, default=4000, help="operations of all agents")
    parser.add_argument("--mix", type=parse_mix, default=parse_mix(DEFAULT_MIX),
                        help="weights of snapshot reads, searches, L2 stores and L1 writes "
                             f"(default {DEFAULT_MIX})")
    parser.add_argument("--team-share", type=float, default=0.25,
                        help="share of reads, stores and L1 writes on the team owner")
    parser.add_argument("--restate", type=float, default=0.1,
                        help="share of stores that relay a team announcement")
    parser.add_argument("--chinese", type=float, default=0.33, help="share of Chinese texts")
    parser.add_argument("--seed-memories", type=int, default=20,
                        help="memories each owner holds before the agents start")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="multilingual-e5-small",
                        help="a local embedding model (the settings' local:NAME), 'hashing' "
                             "(the model-free test embedder) or 'none' (keyword-only)")
    add_runtime_arguments(parser, backends=("memory", "postgres", "redis"), default="postgres")


def embedding(model: str) -> dict[str, Any]:
    """The ``system_from_args`` keywords that give the system ``model``."""
    if model == "none":
        return {}
    if model == "hashing":
        from dream_memory_actor.embedding.hashing import HashingEmbedder

        return {"system_options": {"embedder_factory": HashingEmbedder}}
    return {"embedding_model": model if ":" in model else f"local:{model}"}


def seed(handle: Any, rng: random.Random, count: int, first_number: int) -> list[Op]:
    """``count`` memories and a rule and a fact on ``handle``'s owner, before the run."""
    handle.apply([AddRule("Keep answers under 150 words.", source="seed"),
                  AddFact(say(rng, False, FACTS, FACTS_ZH), source="seed")])
    if count <= 0:
        return []
    texts = [say(rng, rng.random() < 0.33, STORES, STORES_ZH, first_number + i)
             for i in range(count)]
    return [Op("store", handle.owner, time.time(), 0.0, memory_id=r.memory.id,
               merged=r.merged, superseded=r.superseded, related=r.related)
            for r in handle.store_many(texts)]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from .runtime_args import system_from_args

    if args.agents < 1 or args.owners < 1 or args.tasks < 1 or args.ops < 0:
        raise SystemExit("--agents, --owners and --tasks must be >= 1, --ops >= 0")
    work = Workload(tuple(args.mix), args.team_share, args.restate, args.chinese, args.seed)
    load_before = [round(x, 2) for x in os.getloadavg()]
    with system_from_args(args, "bench-agents", **embedding(args.model)) as system:
        team = system.owner(TEAM)
        owners = [system.owner(f"user-{i}") for i in range(args.owners)]
        rng = random.Random(args.seed)
        per, extra = divmod(args.ops, args.agents)
        steps = [per + (a < extra) for a in range(args.agents)]
        numbers = 1000 + args.seed_memories * (args.owners + 1)  # the seeds' come first
        seeded = [op for i, h in enumerate([team, *owners])
                  for op in seed(h, rng, args.seed_memories, 1000 + i * args.seed_memories)]
        bases = {h.owner: h.snapshot() for h in (team, *owners)}
        agents = [Agent(a, owners[a % args.owners], team, steps[a],
                        numbers + sum(steps[:a])) for a in range(args.agents)]
        ops, wall = run_load(agents, min(args.tasks, args.agents), work)
        finals = {h.owner: h.snapshot() for h in (team, *owners)}
        memories = [m for h in (team, *owners) for m in all_memories(h)]
        checks = check([*seeded, *ops], finals, bases, memories)
    timed = [o for o in ops if o.seconds > 0 and not o.error]
    stores = [o for o in timed if o.kind == "store"]
    searches = [o for o in timed if o.kind == "search"]
    errors = [o for o in ops if o.error]
    return {
        "benchmark": "agents",
        "backend": args.backend,
        "placement": args.placement,
        "shards": args.shards,
        "embedding_model": embedding(args.model).get("embedding_model", args.model),
        "agents": args.agents,
        "owners": args.owners,
        "team_owner": TEAM,
        "tasks": min(args.tasks, args.agents),
        "mix": dict(zip(KINDS, (round(w / sum(work.mix), 4) for w in work.mix), strict=True)),
        "team_share": work.team_share,
        "restate": work.restate,
        "chinese": work.chinese,
        "seed_memories": args.seed_memories,
        "ops": len(timed),
        "wall_s": round(wall, 3),
        "ops_per_s": round(len(timed) / wall, 1) if wall else None,
        "ops_by_kind": {k: sum(o.kind == k for o in timed) for k in KINDS},
        "latency_by_kind": {k: summary([o.seconds for o in timed if o.kind == k])
                            for k in KINDS},
        "writer_wait": writer_wait(ops, TEAM),
        "longest_l1_write": _longest(timed),
        "stores": {"new": sum(not o.merged and not o.superseded for o in stores),
                   "merged": sum(o.merged for o in stores),
                   "superseded": sum(o.superseded for o in stores),
                   "memories_after": len(memories)},
        "searches": {"mean_hits": round(sum(o.hits for o in searches) / len(searches), 2)
                     if searches else None,
                     "with_team_hits": sum(o.team_hits > 0 for o in searches)},
        "pending_corrections": sum(len(s.pending) for s in finals.values()),
        "errors": dict(Counter(o.kind for o in errors)),
        "first_error": errors[0].error if errors else None,
        **checks,
        "machine": {**machine(), "load_average": {
            "before": load_before, "after": [round(x, 2) for x in os.getloadavg()]}},
        "command": command(),
    }


def _longest(ops: Sequence[Op]) -> dict[str, Any] | None:
    l1 = [o for o in ops if o.kind == "l1_write"]
    if not l1:
        return None
    o = max(l1, key=lambda o: o.seconds)
    return {"ms": round(o.seconds * 1000.0, 3), "owner": o.owner}
