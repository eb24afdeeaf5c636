"""Gangs confined to one rack: what placing them one rack at a time buys and costs.

Cluster: 14 nodes x 8 GPUs in four racks of 2, 3, 4 and 5 nodes (node label
``example.com/rack``), one pool. Queue ``train`` submits 12, 20 or 36 gangs (three loads,
each its own workload) of 2-4 members x 8 GPUs over six hours (declared run times around an
hour), each member with a required pod-affinity term selecting its own group per rack --
the Kubernetes way of asking that a job's workers share a rack. Queue ``batch`` submits 1-2
GPU pods (around 20 minutes) that fill what is left. Until 8 h.

One workload, simulated three times in the same run:

- ``domains``: the scheduler as it is (:mod:`fairgpu.engine.actions.gang_domains`: the gang
  is tried one rack at a time, tightest first);
- ``first_member``: the allocator without gang domains (as before it): the first member goes
  where the scores put it, the term confines the others to its rack;
- ``rack_blind``: the same gangs without the affinity term: they fit anywhere, which shows
  what the rack constraint itself costs (and how often a rack-blind scheduler splits a gang).

Per run: gangs started (of all), gangs started within one rack, gang wait p50/p90 (arrival to
the last member's start, over started gangs), gangs never started, useful allocation, lost
GPU-hours, batch pods' wait p50. Then, per load, ``domains`` against ``first_member`` side
by side.

Usage: ``python benchmarks/gang_topology/run.py [--seed 0] [--loads 12 20 36]
[--results FILE]``; ``results.json`` beside it holds seeds 0-2 (README.md: the table).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from fairgpu.engine.actions import allocate
from fairgpu.engine.engine import Engine
from fairgpu.engine.policies import DEFAULT_POLICY, policy
from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import ANN_DURATION, PodInfo
from fairgpu.model.selectors import LabelSelector, PodAffinityTerm
from fairgpu.sim.results import accounting_summary
from fairgpu.sim.simulator import Simulation, SimulationResult, percentile
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.tenancy.resolve import LABEL_POD_GROUP

sys.path.insert(0, str(Path(__file__).parents[1] / "fairness"))
from builders import gpu_node, gpu_pod

RACK = "example.com/rack"
RACKS = (2, 3, 4, 5)
UNTIL = 8 * 3600.0
LOADS = (12, 20, 36)  # gangs submitted over the six hours: light, busy, overloaded
BATCH = 300


def nodes() -> list[NodeInfo]:
    """Four racks of 8-GPU nodes."""
    out = []
    for r, size in enumerate(RACKS):
        for i in range(size):
            n = gpu_node(f"r{r}-n{i}")
            n.labels = {RACK: f"rack-{r}", "kubernetes.io/hostname": n.name}
            out.append(n)
    return out


def _pod(name: str, queue: str, created: float, gpus: int, duration: float) -> PodInfo:
    return gpu_pod(name, queue, created, gpus, annotations={ANN_DURATION: f"{duration:.1f}"})


def workload(seed: int, gangs: int, confined: bool) -> Workload:
    """The gangs and batch pods of the module docstring (``confined``: with the term)."""
    rng = np.random.default_rng(seed)
    arrivals: list[PodArrival] = []
    groups: dict[str, int] = {}
    for g in range(gangs):
        at = float(rng.uniform(0, 6 * 3600))
        size = int(rng.choice([2, 3, 4]))
        duration = float(rng.lognormal(np.log(3600), 0.4))
        group = f"g{g:02d}"
        groups[f"train/{group}"] = size
        term = PodAffinityTerm(
            LabelSelector(((LABEL_POD_GROUP, group),)), RACK, frozenset({"train"}), False
        )
        for m in range(size):
            p = _pod(f"{group}-{m}", "train", at, 8, duration)
            p.labels[LABEL_POD_GROUP] = group
            p.annotations["fairgpu.io/min-member"] = str(size)
            if confined:
                p.affinity_terms = (term,)
            arrivals.append(PodArrival(p, at, duration))
    for b in range(BATCH):
        at = float(rng.uniform(0, 6 * 3600))
        duration = float(rng.lognormal(np.log(1200), 0.5))
        p = _pod(f"b{b:03d}", "batch", at, int(rng.choice([1, 2])), duration)
        arrivals.append(PodArrival(p, at, duration))
    return Workload("gang-topology", nodes(), arrivals, pod_groups=groups)


@contextmanager
def without_gang_domains() -> Iterator[None]:
    """The allocator as before gang domains: no gang is confined per domain."""
    kept = allocate.confinement
    allocate.confinement = lambda session, job: None  # type: ignore[assignment]
    try:
        yield
    finally:
        allocate.confinement = kept  # type: ignore[assignment]


def measure(seed: int, gangs: int, confined: bool) -> dict[str, Any]:
    """Simulate the workload once and return its figures."""
    engine = Engine(policy(DEFAULT_POLICY), seed)
    wl = workload(seed, gangs, confined)
    engine.register_pod_groups(wl.pod_groups)
    started = time.perf_counter()
    result = Simulation(wl, engine, seed=seed, until=UNTIL, track_fragmentation=False).run()
    wall = time.perf_counter() - started
    return figures(result, wl) | {"wall_s": round(wall, 2)}


def figures(result: SimulationResult, wl: Workload) -> dict[str, Any]:
    """Gang starts, racks and waits; useful and lost GPU time; batch waits."""
    arrival = {r.pod.uid: r.arrival for r in result.records}
    rack = {n.name: n.labels[RACK] for n in wl.nodes}
    last: dict[str, dict[str, tuple[float, str]]] = defaultdict(dict)
    for a in result.runs:
        if a.group and a.work_start is not None:
            last[a.group][a.uid] = (a.start, a.node)  # the member's latest working start
    waits, one_rack = [], 0
    for group, members in last.items():
        if len(members) < wl.pod_groups[group]:
            continue
        first_arrival = min(arrival[uid] for uid in members)
        waits.append(max(start for start, _ in members.values()) - first_arrival)
        one_rack += len({rack[node] for _, node in members.values()}) == 1
    batch = [
        r.start - r.arrival for r in result.records if r.tenant == "batch" and r.start is not None
    ]
    acc = accounting_summary(result)
    return {
        "gangs": len(wl.pod_groups),
        "gangs_started": len(waits),
        "gangs_in_one_rack": one_rack,
        "gangs_never_started": len(wl.pod_groups) - len(waits),
        "gang_wait_p50_s": _r(percentile(waits, 50)),
        "gang_wait_p90_s": _r(percentile(waits, 90)),
        "useful_allocation_pct": acc["useful_allocation_pct"],
        "lost_gpu_hours": acc["lost_gpu_hours"],
        "batch_wait_p50_s": _r(percentile(batch, 50)),
        "batch_started": len(batch),
    }


COMPARED = (
    "gangs_started",
    "gang_wait_p50_s",
    "gang_wait_p90_s",
    "useful_allocation_pct",
    "batch_wait_p50_s",
)


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--loads", type=int, nargs="+", default=list(LOADS), help="gangs per run")
    ap.add_argument("--results", type=Path)
    args = ap.parse_args()
    out: dict[str, Any] = {"scenario": "gang-topology", "seed": args.seed, "loads": {}}
    for gangs in args.loads:
        runs: dict[str, Any] = {"domains": measure(args.seed, gangs, confined=True)}
        with without_gang_domains():
            runs["first_member"] = measure(args.seed, gangs, confined=True)
        runs["rack_blind"] = measure(args.seed, gangs, confined=False)
        d, f = runs["domains"], runs["first_member"]
        runs["domains_vs_first_member"] = {k: [d[k], f[k]] for k in COMPARED}
        out["loads"][f"{gangs}_gangs"] = runs
    text = json.dumps(out, indent=2)
    print(text)
    if args.results:
        args.results.write_text(text + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
