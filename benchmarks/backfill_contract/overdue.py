"""Pods that run long past the run time they declared: does a queue that declares short keep
GPUs beyond its share?

"Waiting is cheaper" (:mod:`fairgpu.engine.actions.room_wait`) refuses a preemption that
would lose more work than waiting for declared run times to free room. Taken at its word, a
pod that declared a minute and runs on frees room "now" for ever, so waiting always looked
cheaper and the queue kept its GPUs: the declaration bought immunity from reclaim. Now a pod
overdue by more than ``drainGraceSeconds`` no longer counts as ending
(:func:`fairgpu.engine.victim_cost.remaining`).

Cluster: 4 nodes x 8 GPUs. Queue ``hog`` starts 32 one-GPU pods at t=0 that declare 2
minutes and run 4 hours; queue ``late`` submits 16 one-GPU pods of an hour (declared) at 30
minutes. Until 4 h. Simulated twice in the same run: ``aware`` (as the scheduler is) and
``at_their_word`` (overdue pods still expected to end at their declaration, as before:
``drainGraceSeconds`` longer than the run).
Per run: ``late``'s wait p50/p90 and useful share, ``hog``'s useful share, GPU-hours lost,
preemptions.

Usage: ``python benchmarks/backfill_contract/overdue.py [--seed 0]``
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np
from run import gpu_node, pod, useful_hours

from fairgpu.engine.engine import Engine
from fairgpu.engine.policies import DEFAULT_POLICY, policy
from fairgpu.sim.results import accounting_summary
from fairgpu.sim.simulator import Simulation, percentile
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.tenancy import parse_config

UNTIL = 4 * 3600.0


def workload(seed: int) -> Workload:
    """``hog``'s long pods that declare 2 minutes, ``late``'s honest hour-long pods."""
    rng = np.random.default_rng(seed)
    arrivals = [PodArrival(pod(f"h{j:02d}", "hog", 0.0, 1, 120.0), 0.0, UNTIL) for j in range(32)]
    for j in range(16):
        run = float(rng.lognormal(np.log(3600), 0.3))
        arrivals.append(PodArrival(pod(f"l{j:02d}", "late", 1800.0, 1, run), 1800.0, run))
    return Workload("overdue", [gpu_node(f"n{i}") for i in range(4)], arrivals)


def measure(seed: int, grace: float | None = None) -> dict[str, Any]:
    """Simulate the workload once; ``grace``: ``drainGraceSeconds`` (None: the default). A
    grace longer than the run takes every declaration at its word, however overdue; here no
    job is large enough for a reservation, whose holds the grace also lengthens."""
    config = {} if grace is None else {"starvation": {"drainGraceSeconds": grace}}
    engine = Engine(policy(DEFAULT_POLICY), seed, tenancy=parse_config(config))
    result = Simulation(workload(seed), engine, seed=seed, until=UNTIL).run()
    useful, capacity_h = useful_hours(result)
    waits = [
        (r.start if r.start is not None else result.end_time) - r.arrival
        for r in result.records
        if r.tenant == "late"
    ]
    acc = accounting_summary(result)
    return {
        "late_wait_p50_s": round(percentile(waits, 50) or 0.0, 1),
        "late_wait_p90_s": round(percentile(waits, 90) or 0.0, 1),
        "useful_share_pct": {q: round(100 * useful[q] / capacity_h, 2) for q in ("hog", "late")},
        "lost_gpu_hours": acc["lost_gpu_hours"],
        "preemptions": result.preemptions,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    out: dict[str, Any] = {"scenario": "overdue", "seed": args.seed, "aware": measure(args.seed)}
    out["at_their_word"] = measure(args.seed, grace=1e9)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
