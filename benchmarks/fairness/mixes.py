"""Realistic mixes for the fairness benchmark: what fair sharing costs, measured per run attempt.

Each mix runs twice in one invocation, with ``fair`` and ``kube-default`` queue ordering (same
placement policy, the one ``fairgpu simulate`` uses by default; same seed). Per run:

- ``useful_allocation_pct``: GPU time of run attempts that completed or were still running at
  the end, as % of capacity x simulated time; ``lost_pct``: GPU time of attempts that were
  preempted, torn down with a gang sibling or timed out, same unit;
- per backlogged tenant, its useful allocation ÷ its pool-aware fair share, summed over the
  instants it was backlogged (:func:`fairgpu.sim.results.share_ratios`); min, max and Jain's
  index over those ratios;
- a *diagnostic* beside the ratios, not a target: ``division_ratio_min``/``max`` ("inuse
  min/max"), each backlogged tenant's useful allocation ÷ its pool-aware fair share of the
  GPUs actually *in use* at that instant (the same water-fill with each pool's capacity
  replaced by the GPUs run attempts held there; :func:`fairgpu.sim.results.division_ratios`),
  and ``idle_pct_while_backlogged`` ("idle bklg %"), the % of the capacity of the pools some
  waiting GPU pod may use that no run attempt held, averaged over the instants when any GPU
  pod waited (GPUs that gang members hold while waiting for their siblings count as held).
  Until this commit it counted every pool a backlogged tenant had used at any time, which
  overstated it (demo seeds 0/1/2, fair: 18.48/14.98/18.41% then, 8.96/9.41/8.60% now).
  The ratio mixes two things:
  how the GPUs in use were divided, and how many stood idle while work waited (reserved nodes
  draining for a gang, fragments no pending pod fits). An in-use ratio near 1.0 with a low
  ratio means the tenant got its part of what ran and lost the rest to idle GPUs; a low
  in-use ratio means the division itself was off. And ``deficit_locked_pct`` per tenant
  ("min locked %": the tenant with the lowest ratio), the % of its deficit that fell at
  instants when every job it had waiting was larger than the deficit
  (:func:`fairgpu.sim.results.locked_deficit`): the reclaim rule keeps a queue at or below
  its share after a move, so no reclaim could start such a job and no scheduler keeping that
  rule closes that part of the gap. The targets stay judged on the ratios;
- reversals within 10 minutes (:func:`fairgpu.sim.accounting.reversals`), the most starts of
  any gang, gang wait p50/p99 (first arrival to the last member's final start) over every gang
  that started, wall seconds;
- the same gang wait p50/p99 over the *qualified* gangs and their count ("gangs q/all"): a
  gang qualifies when, at its arrival, its tenant's allocation (every run attempt it held
  then, the gang's own members not counted) plus what the gang's user had queued ahead of it
  (waiting then, priority at least the gang's, arrived earlier, on pools the gang can use,
  and started before the gang: older work that never went first took nothing from it)
  plus the gang's GPUs is within the tenant's pool-aware fair share at that instant -- the
  share of the same computation as the ratios, evaluated at the arrival
  (:func:`fairgpu.sim.results.gang_qualification`). A gang larger than what its tenant lacks
  cannot start before the tenant's other work ends (taking it would put the tenant above its
  share), and what the tenant lacks goes first to the work its user queued before the gang,
  so its wait measures the tenant's own backlog, not the scheduler; the target says "where
  its share allows it". (Counting the user's queued work changed the qualified gangs of the
  fair runs on demo seed 1 from 11 to 10 and on seed 2 from 9 to 7 -- gangs that arrived
  behind 48-72 GPUs of their own user's older gangs, into a share with room for 16-17 --,
  and of the kube-default runs on demo seeds 0 and 2 and the flood mix from 8/7/3 to 6/6/1.)
  Gangs that never started have no wait in either set.

Gang members work only once minMember of their group run (:mod:`fairgpu.sim.rendezvous`):
under ``kube-default``, which places a gang's members one by one, a member that waits for its
siblings holds its GPUs without working (lost as ``gang-wait``) and gives up after 600 s,
queueing again (``gang-timeout``). Fair ordering places gangs all-or-nothing, so this changes
only the kube-default rows (measured before and after in one session: kube-default useful
allocation on pool-mix 55.41% -> 41.63%, demo seeds 0/1/2 59.62/67.43/62.57% ->
57.33/61.69/61.15%, flood-gangs-inference 92.31% -> 87.99%; every fair figure identical).

Targets (issue "fair sharing without waste"), judged on the fair run: useful allocation >= the
kube-default run's; lost <= 5% of capacity; every backlogged tenant's ratio in [0.9, 1.1];
0 reversals within 10 minutes; no gang started more than twice; gang wait p50 <= 15 minutes
over the qualified gangs (not judged when none qualifies; the all-gangs figures are printed
beside it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from builders import gpu_node, gpu_pod

from fairgpu.engine.engine import Engine
from fairgpu.engine.policies import DEFAULT_POLICY, policy
from fairgpu.model.gpu import GpuRequest
from fairgpu.model.node import NodeInfo
from fairgpu.model.node_pools import derive_placement
from fairgpu.model.pod import ANN_DURATION, LABEL_USER, LABEL_WORKLOAD, PodInfo
from fairgpu.model.selectors import Taint, Toleration
from fairgpu.sim.results import (
    accounting_summary,
    division_ratios,
    gang_qualification,
    locked_deficit,
    pool_layout,
    share_ratios,
    share_timeline,
)
from fairgpu.sim.simulator import Simulation, SimulationResult, percentile
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.sim.workloads.synthetic import A100, L4, PoolSpec, SyntheticSpec, generate
from fairgpu.tenancy import TenancyConfig, jain_index, parse_config

TARGETS = {
    "useful_allocation>=kube_default": "useful GPU allocation at least kube-default's",
    "lost<=5pct": "lost GPU time at most 5% of capacity",
    "ratios_in_0.9_1.1": "every backlogged tenant within 0.9-1.1x its pool-aware fair share",
    "no_reversal_10min": "0 reversals within 10 minutes",
    "gangs_started<=2": "no gang started more than twice",
    "gang_wait_p50<=15min": "gang wait p50 at most 15 minutes where its share allows it",
}


@dataclass
class Mix:
    """A workload and how it is measured.

    ``account_as`` maps a pod to the party its share is judged for (default: its queue);
    ``weights`` are those parties' weights for the pool-aware fair share.
    """

    name: str
    description: str
    workload: Workload
    until: float | None = None
    config: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    account_as: Callable[[PodInfo], str] | None = None


def demo(seed: int) -> Mix:
    """``fairgpu simulate``'s built-in workload, unchanged."""
    wl = generate(SyntheticSpec(), seed=seed)
    return Mix(f"demo-seed{seed}", wl.description, wl)


EXAMPLE_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "tenancy.yaml"


def demo_departments(seed: int) -> Mix:
    """The built-in workload under ``examples/tenancy.yaml`` (``fairgpu simulate --config``):
    departments research (team-a weighing twice team-b) and product (team-c, team-d) of equal
    weight, nominal quotas, its own preemption, gang and starvation settings. Shares are
    judged as the config sets them: departments first, then their queues."""
    wl = generate(SyntheticSpec(), seed=seed)
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    return Mix("demo-departments", f"{wl.description}; examples/tenancy.yaml", wl, config=config)


# Full size: one tenant floods 2 000 one-GPU pods on 32 8-GPU nodes, others submit 4-member
# gangs and fractional inference (2 270 pods). ``scale`` shrinks nodes and pods alike.
FLOOD_NODES, FLOOD_PODS, FLOOD_GANGS, FLOOD_SERVE = 32, 2000, 20, 190


def _pod(name: str, tenant: str, created: float, gpu: GpuRequest, **kw: Any) -> PodInfo:
    pod = gpu_pod(name, tenant, created, **kw)
    pod.gpu = gpu
    return pod


def flood_gangs_inference(seed: int, scale: float = 0.25) -> Mix:
    """One tenant floods one-GPU pods at t=0; a training tenant submits 4 x 4-GPU gangs over
    the first hour; an inference tenant submits fractional replicas (0.25-0.5 GPU, 10 GiB)."""
    rng = np.random.default_rng(seed)
    nodes = [gpu_node(f"n{i:02d}") for i in range(max(2, round(FLOOD_NODES * scale)))]
    arrivals: list[PodArrival] = []
    for j in range(round(FLOOD_PODS * scale)):
        d = float(rng.lognormal(np.log(600), 0.5))
        pod = _pod(f"f-{j:04d}", "flood", j * 1e-3, GpuRequest(1))
        pod.annotations[ANN_DURATION] = f"{d:.1f}"
        arrivals.append(PodArrival(pod, 0.0, d))
    groups: dict[str, int] = {}
    for g in range(max(1, round(FLOOD_GANGS * scale))):
        at = float(rng.uniform(60, 3600))
        d = float(rng.lognormal(np.log(1800), 0.4))
        groups[f"train/g{g:02d}"] = 4
        for m in range(4):
            labels = {"fairgpu.io/pod-group": f"g{g:02d}"}
            ann = {"fairgpu.io/min-member": "4", ANN_DURATION: f"{d:.1f}"}
            pod = _pod(f"g{g:02d}-{m}", "train", at, GpuRequest(4), labels=labels, annotations=ann)
            arrivals.append(PodArrival(pod, at, d))
    for r in range(round(FLOOD_SERVE * scale)):
        at = float(rng.uniform(0, 3600))
        d = float(rng.lognormal(np.log(2400), 0.4))
        gpu = GpuRequest(1, int(rng.choice([250, 500])), 10240)
        pod = _pod(f"s-{r:03d}", "serve", at, gpu, annotations={ANN_DURATION: f"{d:.1f}"})
        arrivals.append(PodArrival(pod, at, d))
    gpus = 8 * len(nodes)
    return Mix(
        "flood-gangs-inference",
        f"{len(nodes)} nodes ({gpus} GPUs, scale {scale:g} of 32 nodes / 2 270 pods): tenant "
        f"flood submits {round(FLOOD_PODS * scale)} one-GPU pods at t=0 (median 600 s), train "
        f"{len(groups)} gangs of 4 x 4 GPUs over the first hour (median 1 800 s), serve "
        f"{round(FLOOD_SERVE * scale)} fractional replicas (0.25/0.5 GPU); until 2 h, while "
        "work is still queued",
        Workload("flood-gangs-inference", nodes, arrivals, pod_groups=groups),
        until=2 * 3600.0,
    )


def pool_mix(seed: int) -> Mix:
    """Training, inference and hybrid pools where inference overflows into the hybrid (L4)
    pool: a training-only tenant, an inference-only tenant and a tenant with both."""
    pools = [
        PoolSpec(
            usage="training", nodes=4, gpus=8, gpu_model=A100[0], gpu_memory_mib=A100[1],
            cpu=128, memory_gib=1024,
        ),
        PoolSpec(
            usage="inference", nodes=4, gpus=4, gpu_model=L4[0], gpu_memory_mib=L4[1],
            cpu=64, memory_gib=256,
        ),
        PoolSpec(
            usage="hybrid", nodes=4, gpus=4, gpu_model=L4[0], gpu_memory_mib=L4[1],
            cpu=64, memory_gib=256,
        ),
    ]  # fmt: skip
    parts = {"trainers": 1.0, "servers": 0.0, "mixed": 0.5}
    arrivals: list[PodArrival] = []
    groups: dict[str, int] = {}
    nodes = None
    for k, (tenant, training) in enumerate(parts.items()):
        spec = SyntheticSpec(
            pools=pools, tenants={tenant: 1.0}, jobs=80, mean_interarrival_s=90.0,
            training_fraction=training, users_per_tenant=2,
        )  # fmt: skip
        wl = generate(spec, seed=seed * 10 + k)
        nodes = nodes or wl.nodes
        arrivals.extend(wl.arrivals)
        groups.update(wl.pod_groups)
    assert nodes is not None
    return Mix(
        "pool-mix",
        "training pool 4x8 A100, inference 4x4 L4, hybrid 4x4 L4 (inference overflows into "
        "it); tenants trainers (training only), servers (inference only), mixed; 80 jobs each, "
        "one every ~90 s per tenant",
        Workload("pool-mix", nodes, arrivals, pod_groups=groups),
    )


USAGE = "example.com/node.usage"


def _pool_node(name: str, usage: str) -> NodeInfo:
    """An 8-GPU node of pool ``usage``, labelled and tainted as node pools are."""
    node = gpu_node(name)
    node.labels = {**node.labels, USAGE: usage}
    node.taints = (Taint(USAGE, usage, "NoSchedule"),)
    return node


def flexible_and_confined(seed: int) -> Mix:
    """Tenant ``batch`` submits 24 long one-GPU jobs that tolerate every taint, so they may
    run on any node, at t=0 -- the training nodes are empty then, and take them; ``train``
    submits 8-GPU jobs confined to the training pool from t=300 s, ``serve`` one-GPU
    replicas confined to the inference pool over the first hour. ``batch`` then holds about
    its fair share (it may use every pool) on the nodes ``train`` needs while inference GPUs
    stand idle: no reclaim rule lets ``train`` in, only a relocation
    (:mod:`fairgpu.engine.actions.relocate`)."""
    rng = np.random.default_rng(seed)
    nodes = [_pool_node(f"train-{i}", "training") for i in range(4)]
    nodes += [_pool_node(f"infer-{i}", "inference") for i in range(2)]
    anywhere = (Toleration("", "Exists", "", ""),)
    arrivals: list[PodArrival] = []
    for j in range(24):
        d = float(rng.lognormal(np.log(7200), 0.3))
        pod = gpu_pod(f"b-{j:02d}", "batch", j * 1e-3, annotations={ANN_DURATION: f"{d:.1f}"})
        pod.tolerations = anywhere
        arrivals.append(PodArrival(pod, 0.0, d))
    at = 300.0
    for j in range(12):
        d = float(rng.lognormal(np.log(2400), 0.4))
        pod = gpu_pod(f"t-{j:02d}", "train", at, gpus=8, annotations={ANN_DURATION: f"{d:.1f}"})
        pod.labels[LABEL_WORKLOAD] = "training"
        arrivals.append(PodArrival(derive_placement(pod), at, d))
        at += float(rng.exponential(600))
    for j in range(8):
        t = float(rng.uniform(0, 3600))
        d = float(rng.lognormal(np.log(3600), 0.4))
        pod = gpu_pod(f"s-{j:02d}", "serve", t, annotations={ANN_DURATION: f"{d:.1f}"})
        pod.labels[LABEL_WORKLOAD] = "inference"
        arrivals.append(PodArrival(derive_placement(pod), t, d))
    return Mix(
        "flexible-and-confined",
        "training pool 4x8 GPUs, inference pool 2x8 (both tainted); batch: 24 one-GPU jobs "
        "that tolerate every taint at t=0 (median 2 h); train: 12 eight-GPU jobs confined to "
        "the training pool from t=300 s, one every ~10 min (median 40 min); serve: 8 one-GPU "
        "replicas confined to the inference pool over the first hour (median 1 h); until 3 h",
        Workload("flexible-and-confined", nodes, arrivals),
        until=3 * 3600.0,
    )


def priority_abuse_in_tenant(seed: int) -> Mix:
    """Queue a has two users: a-steady fills a's share at t=0, a-vip arrives at 60 s with the
    highest priority; queue b is steady. Judged per user: each of a's users is owed half of a."""
    rng = np.random.default_rng(seed)
    nodes = [gpu_node(f"n{i}") for i in range(4)]
    arrivals = []
    for who, tenant, at, prio in (
        ("a-steady", "a", 0.0, 0),
        ("a-vip", "a", 60.0, 1_000_000_000),
        ("b-user", "b", 0.0, 0),
    ):
        for j in range(150):
            d = float(rng.lognormal(np.log(300), 0.4))
            pod = gpu_pod(f"{who}-{j}", tenant, at + j * 1e-3, priority=prio, user=who)
            arrivals.append(PodArrival(pod, at, d))
    return Mix(
        "priority-abuse-in-tenant",
        "32 GPUs; queues a and b equal; a's user a-vip raises priority to the maximum and "
        "arrives 60 s after a-steady; shares judged per user (a's users owed half of a each)",
        Workload("priority-abuse-in-tenant", nodes, arrivals),
        until=1800.0,
        weights={"a/a-steady": 0.5, "a/a-vip": 0.5, "b/b-user": 1.0},
        account_as=lambda p: f"{p.namespace}/{p.labels.get(LABEL_USER, '')}",
    )


@dataclass
class Replay:
    """One simulated run of a mix: its engine, simulation, result and wall seconds."""

    engine: Engine
    sim: Simulation
    result: SimulationResult
    wall: float

    def weights(self, mix: Mix) -> dict[str, float]:
        """The weights ``mix`` is judged by: its own, else its queues' (departments too)."""
        return mix.weights or {q.name: q.weight for q in self.engine.tenancy.queues}

    def parents(self, mix: Mix) -> dict[str, str]:
        """Each queue's department when ``mix`` is judged by queues (none by its own
        weights)."""
        queues = self.engine.tenancy.queues
        return {} if mix.weights else {q.name: q.parent for q in queues if q.parent}


def replay(
    mix: Mix, ordering: str, seed: int, watch: Callable[[Engine], None] | None = None
) -> Replay:
    """Simulate ``mix`` with ``ordering``; ``watch`` sees the engine before the run (to
    follow its cycles)."""
    config: TenancyConfig | None = parse_config(mix.config) if mix.config else None
    engine = Engine(policy(DEFAULT_POLICY), seed, tenancy=config, ordering=ordering)  # type: ignore[arg-type]
    engine.register_pod_groups(mix.workload.pod_groups)
    if watch is not None:
        watch(engine)
    started = time.perf_counter()
    sim = Simulation(
        mix.workload,
        engine,
        seed=seed,
        until=mix.until,
        tenant_of=mix.account_as,
        track_fragmentation=False,
    )
    result = sim.run()
    return Replay(engine, sim, result, time.perf_counter() - started)


def useful_ratios(shares: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Each backlogged tenant's useful share ÷ pool-aware fair share (:func:`share_ratios`)."""
    return {
        t: r["useful_over_fair"] for t, r in shares.items() if r["useful_over_fair"] is not None
    }


def measure(
    mix: Mix, ordering: str, seed: int, watch: Callable[[Engine], None] | None = None
) -> dict[str, Any]:
    """Simulate ``mix`` with ``ordering`` and return its accounting figures (``watch`` as in
    :func:`replay`)."""
    run = replay(mix, ordering, seed, watch)
    engine, sim, result, wall = run.engine, run.sim, run.result, run.wall
    acc = accounting_summary(result)
    weights = run.weights(mix)
    pods = [r.pod for r in result.records]
    capacity, eligible, node_pool = pool_layout(sim.cluster, engine.scheduler, pods)
    parents = run.parents(mix)
    timeline = share_timeline(result, capacity, eligible, weights, parent=parents)
    shares = share_ratios(timeline, result.gpu_capacity_milli)
    division = division_ratios(result, timeline, eligible, weights, node_pool, parents)
    locked = locked_deficit(result, timeline, eligible)
    ratios = useful_ratios(shares)
    gangs = gang_qualification(result, capacity, eligible, weights, parents)
    qualified = [g["wait_s"] for g in gangs if g["qualified"]]
    return {
        "useful_allocation_pct": acc["useful_allocation_pct"],
        "lost_pct": acc["lost_pct_of_capacity"],
        "lost_gpu_hours_by_outcome": acc["lost_gpu_hours_by_outcome"],
        "ratio_min": min(ratios.values(), default=None),
        "ratio_max": max(ratios.values(), default=None),
        "jain_ratios": round(jain_index(list(ratios.values())), 4),
        "ratios": ratios,
        "division_ratio_min": division["min"],
        "division_ratio_max": division["max"],
        "division_ratios": division["ratios"],
        "idle_pct_while_backlogged": division["idle_pct_while_backlogged"],
        "deficit_locked_pct": locked,
        "lowest_ratio_locked_pct": locked.get(min(ratios, key=ratios.__getitem__), 0.0)
        if ratios
        else None,
        "fair_share_pct": {t: r["fair_share_pct"] for t, r in shares.items()},
        "reversals_10min": acc["reversals"]["10min"],
        "reversals": acc["reversals"],
        "gang_restarts": acc["gang_restarts"],
        "max_gang_starts": acc["max_gang_starts"],
        "gang_wait_p50_s": acc["gang_wait_p50_s"],
        "gang_wait_p99_s": acc["gang_wait_p99_s"],
        "gangs_qualified": len(qualified),
        "gangs_with_wait": len(gangs),
        "gang_wait_qualified_p50_s": _r(percentile(qualified, 50)),
        "gang_wait_qualified_p99_s": _r(percentile(qualified, 99)),
        "preemptions": result.preemptions,
        "simulated_s": round(result.end_time, 1),
        "wall_s": round(wall, 2),
        "pools_gpus": {p: c / 1000 for p, c in capacity.items()},
    }


def targets(fair: dict[str, Any], kube: dict[str, Any]) -> dict[str, bool | None]:
    """Pass/fail of each target for the fair run (None: nothing to judge, e.g. no gangs)."""
    lo, hi = fair["ratio_min"], fair["ratio_max"]
    p50 = fair["gang_wait_qualified_p50_s"]
    return {
        "useful_allocation>=kube_default": fair["useful_allocation_pct"]
        >= kube["useful_allocation_pct"],
        "lost<=5pct": fair["lost_pct"] <= 5.0,
        "ratios_in_0.9_1.1": None if lo is None else (lo >= 0.9 and hi <= 1.1),
        "no_reversal_10min": fair["reversals_10min"] == 0,
        "gangs_started<=2": None if not fair["max_gang_starts"] else fair["max_gang_starts"] <= 2,
        "gang_wait_p50<=15min": None if p50 is None else p50 <= 900.0,
    }


def run_mix(mix: Mix, seed: int) -> dict[str, Any]:
    """Both orderings of ``mix`` and the targets judged on the fair one."""
    fair = measure(mix, "fair", seed)
    kube = measure(mix, "kube-default", seed)
    return {
        "scenario": mix.name,
        "suite": "realistic",
        "description": mix.description,
        "placement_policy": DEFAULT_POLICY,
        "seed": seed,
        "fairgpu": fair,
        "kube-default": kube,
        "targets": targets(fair, kube),
    }


COLUMNS = (
    ("useful %", "useful_allocation_pct"),
    ("lost %", "lost_pct"),
    ("ratio min", "ratio_min"),
    ("ratio max", "ratio_max"),
    ("diag: inuse min", "division_ratio_min"),
    ("inuse max", "division_ratio_max"),
    ("idle bklg %", "idle_pct_while_backlogged"),
    ("min locked %", "lowest_ratio_locked_pct"),
    ("Jain", "jain_ratios"),
    ("rev 10m", "reversals_10min"),
    ("gang starts", "max_gang_starts"),
    ("gang p50 s", "gang_wait_p50_s"),
    ("gang p99 s", "gang_wait_p99_s"),
    ("gangs q/all", "gangs_q"),
    ("q gang p50", "gang_wait_qualified_p50_s"),
    ("q gang p99", "gang_wait_qualified_p99_s"),
    ("wall s", "wall_s"),
)


def table(rows: list[dict[str, Any]]) -> str:
    """A plain-text table: each mix's fair and kube-default rows, then its failed targets."""
    head = f"{'scenario':<26}{'ordering':<14}" + "".join(f"{c:>{_w(c)}}" for c, _ in COLUMNS)
    lines = [head, "-" * len(head)]
    for row in rows:
        for ordering in ("fairgpu", "kube-default"):
            m = row[ordering]
            m = {**m, "gangs_q": f"{m.get('gangs_qualified', 0)}/{m.get('gangs_with_wait', 0)}"}
            cells = "".join(f"{_cell(m.get(k)):>{_w(c)}}" for c, k in COLUMNS)
            lines.append(f"{row['scenario']:<26}{ordering:<14}{cells}")
        verdict = row["targets"]
        failed = [k for k, ok in verdict.items() if ok is False]
        passed = [k for k, ok in verdict.items() if ok]
        lines.append(f"{'':<26}targets  PASS: {', '.join(passed) or '-'}")
        lines.append(f"{'':<26}         FAIL: {', '.join(failed) or '-'}")
    return "\n".join(lines)


def _w(column: str) -> int:
    return max(12, len(column) + 1)


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) and abs(value) < 10 else str(value)


MIXES: dict[str, Callable[..., Mix]] = {
    "demo": demo,
    "demo-departments": demo_departments,
    "flood-gangs-inference": flood_gangs_inference,
    "pool-mix": pool_mix,
    "flexible-and-confined": flexible_and_confined,
    "priority-abuse-in-tenant": priority_abuse_in_tenant,
}


def select(
    names: Iterable[str], seed: int, demo_seeds: Iterable[int], flood_scale: float
) -> list[Mix]:
    """The mixes named (``MIXES``' keys), built as the benchmark scripts' options say: the
    demo once per seed of ``demo_seeds``, the flood mix at ``flood_scale``, the rest on
    ``seed``."""
    out: list[Mix] = []
    for name in names:
        if name == "demo":
            out.extend(demo(s) for s in demo_seeds)
        elif name == "flood-gangs-inference":
            out.append(flood_gangs_inference(seed, flood_scale))
        else:
            out.append(MIXES[name](seed))
    return out
