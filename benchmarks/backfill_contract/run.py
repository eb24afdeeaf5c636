"""Declaring a short run time to backfill onto held nodes: what it buys a queue that lies,
with and without the backfill contract (:mod:`fairgpu.engine.actions.backfill_contract`).

Cluster: 6 nodes x 8 GPUs, one pool, three queues of equal weight. ``train`` submits a
gang of two 8-GPU members every ~40 minutes (run time ~1 h, declared), which waits for two
whole nodes and, below its share, gets them held for it. ``liar`` keeps 1-GPU pods coming
that declare 5 minutes but run ~1 h; ``honest`` the same pods declaring their real run time.
Until 8 h.

The workload is simulated four times in the same run: ``contract`` (the scheduler as it
is: a pod backfilled onto held nodes is evicted once it outlives its declaration by
``drainGraceSeconds``) and ``trusting`` (``starvation.evictBackfillOverruns: false``), each
with preemption off (as many clusters run: then reservations are the large jobs' only way
in) and on (reclaim takes back what a queue holds beyond its share, lies or not).
Per run: each queue's useful GPU-hours and useful share of the cluster, the train jobs'
wait (p50, p90) and how many started, GPU-hours lost (the liars' evicted runs), useful
allocation, and evictions by kind. Then the two side by side.

Usage: ``python benchmarks/backfill_contract/run.py [--seed 0] [--results FILE]``;
``results.json`` beside it holds seeds 0-2 (README.md: the table).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from fairgpu.engine.engine import Engine
from fairgpu.engine.policies import DEFAULT_POLICY, policy
from fairgpu.model.pod import ANN_DURATION, PodInfo
from fairgpu.sim.results import accounting_summary
from fairgpu.sim.simulator import Simulation, SimulationResult, percentile
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.tenancy import parse_config
from fairgpu.tenancy.resolve import LABEL_POD_GROUP

sys.path.insert(0, str(Path(__file__).parents[1] / "fairness"))
from builders import gpu_node, gpu_pod

NODES = 6
UNTIL = 8 * 3600.0
QUEUES = ("train", "liar", "honest")


def pod(name: str, queue: str, at: float, gpus: int, declared: float) -> PodInfo:
    """A pod of ``queue`` declaring ``declared`` seconds of run time."""
    return gpu_pod(name, queue, at, gpus, annotations={ANN_DURATION: f"{declared:.1f}"})


def workload(seed: int) -> Workload:
    """The train jobs and the two streams of small pods of the module docstring."""
    rng = np.random.default_rng(seed)
    arrivals: list[PodArrival] = []
    at = 0.0
    groups: dict[str, int] = {}
    for j in range(12):
        at += float(rng.exponential(2400))
        run = float(rng.lognormal(np.log(3600), 0.3))
        groups[f"train/t{j:02d}"] = 2
        for m in range(2):
            p = pod(f"t{j:02d}-{m}", "train", at, 8, run)
            p.labels[LABEL_POD_GROUP] = f"t{j:02d}"
            p.annotations["fairgpu.io/min-member"] = "2"
            arrivals.append(PodArrival(p, at, run))
    for queue in ("liar", "honest"):
        at = 0.0
        for j in range(400):
            at += float(rng.exponential(60))
            run = float(rng.lognormal(np.log(3600), 0.3))
            declared = 300.0 if queue == "liar" else run
            arrivals.append(PodArrival(pod(f"{queue[0]}{j:03d}", queue, at, 1, declared), at, run))
    nodes = [gpu_node(f"n{i}") for i in range(NODES)]
    return Workload("backfill-contract", nodes, arrivals, groups)


def measure(seed: int, contract: bool, preemption: bool) -> dict[str, Any]:
    """Simulate the workload once, the contract and preemption on or off."""
    config = parse_config(
        {
            "starvation": {"evictBackfillOverruns": contract},
            "preemption": {"enabled": preemption},
        }
    )
    engine = Engine(policy(DEFAULT_POLICY), seed, tenancy=config)
    wl = workload(seed)
    engine.register_pod_groups(wl.pod_groups)
    started = time.perf_counter()
    result = Simulation(wl, engine, seed=seed, until=UNTIL).run()
    return figures(result) | {"wall_s": round(time.perf_counter() - started, 2)}


def useful_hours(result: SimulationResult) -> tuple[dict[str, float], float]:
    """Per tenant the GPU-hours of work its useful run attempts did, and the cluster's
    GPU-hours over the run."""
    useful: dict[str, float] = defaultdict(float)
    for a in result.runs:
        if a.useful:
            useful[a.tenant] += a.worked_gpu_seconds() / 3600.0
    return useful, result.gpu_capacity_milli / 1000.0 * result.end_time / 3600.0


def figures(result: SimulationResult) -> dict[str, Any]:
    """Per queue useful GPU-hours and share; train waits; lost work; evictions by kind."""
    useful, capacity_h = useful_hours(result)
    waits = [
        r.start - r.arrival
        for r in result.records
        if r.tenant == "train" and r.start is not None and r.pod.name.endswith("-0")
    ]
    acc = accounting_summary(result)
    kinds = Counter(a.cause or a.outcome for a in result.runs if not a.useful)
    return {
        "useful_gpu_hours": {q: round(useful[q], 2) for q in QUEUES},
        "useful_share_pct": {q: round(100.0 * useful[q] / capacity_h, 2) for q in QUEUES},
        "train_started": len(waits),
        "train_wait_p50_s": _r(percentile(waits, 50)),
        "train_wait_p90_s": _r(percentile(waits, 90)),
        "lost_gpu_hours": acc["lost_gpu_hours"],
        "useful_allocation_pct": acc["useful_allocation_pct"],
        "ended_early_by_kind": dict(sorted(kinds.items())),
    }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--results", type=Path)
    args = ap.parse_args()
    out: dict[str, Any] = {"scenario": "backfill-contract", "seed": args.seed}
    for preemption in (False, True):
        runs: dict[str, Any] = {
            "contract": measure(args.seed, contract=True, preemption=preemption),
            "trusting": measure(args.seed, contract=False, preemption=preemption),
        }
        c, t = runs["contract"], runs["trusting"]
        runs["contract_vs_trusting"] = {
            f"{q}_useful_share_pct": [c["useful_share_pct"][q], t["useful_share_pct"][q]]
            for q in QUEUES
        } | {k: [c[k], t[k]] for k in ("train_wait_p50_s", "useful_allocation_pct")}
        out["preemption_on" if preemption else "preemption_off"] = runs
    text = json.dumps(out, indent=2)
    print(text)
    if args.results:
        args.results.write_text(text + "\n")


if __name__ == "__main__":
    main()
