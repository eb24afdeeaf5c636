"""Fragile Jobs: what costing a Job that one more eviction fails as a whole buys and costs.

A batch/v1 Job with ``backoffLimit: 0`` and no pod failure policy fails at its first evicted
pod, and the Job controller deletes its other pods: the scheduler that evicts "one pod" of it
throws away the whole Job (:mod:`fairgpu.engine.fragile_jobs`). One workload, simulated with
fair ordering twice in the same run -- the scheduler aware of which Jobs are fragile, and blind
to it -- and once with kube-default ordering (the baseline of every policy; blind too).

Cluster: 6 nodes x 8 GPUs, one pool. Queue ``train`` (weight 1) submits 16 Jobs, one every
~5 minutes from the start: 8 completions 4 at a time, 2 GPUs per pod, about an hour each;
half of them strict (``backoffLimit: 0``), half tolerant (the default 6). Queue ``serve``
(weight 1) sends three waves of one-GPU pods (24 at 30 min, 2 h and 4 h; 30-60 minutes
each), which take back their share from ``train`` by reclaim.

Prints one JSON object: per run the Jobs that failed and finished (strict and tolerant), the
completions never run (pods of failed Jobs), GPU-hours lost (by outcome), useful allocation,
``serve``'s wait (p50, p99), preemptions by kind, reversals within 10 minutes; then
``aware / blind`` ratios of lost GPU-hours and of ``serve``'s wait p99.

Usage: ``python benchmarks/fragile_jobs/run.py [--seed 0] [--results FILE]``
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fairgpu.engine.engine import Engine
from fairgpu.engine.policies import DEFAULT_POLICY, policy
from fairgpu.model.gpu import GpuRequest
from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import ANN_DURATION, CPU, MEMORY, PODS, PodInfo
from fairgpu.sim.results import accounting_summary
from fairgpu.sim.simulator import Simulation, SimulationResult, percentile
from fairgpu.sim.workload import BatchJob, PodArrival, Workload
from fairgpu.tenancy import parse_config

GI = 2**30
UNTIL = 6 * 3600.0
JOBS, COMPLETIONS, PARALLELISM, GPUS = 16, 8, 4, 2
WAVES, WAVE = (1800.0, 2 * 3600.0, 4 * 3600.0), 24


def node(i: int) -> NodeInfo:
    return NodeInfo(
        name=f"n{i}",
        allocatable={CPU: 128_000, MEMORY: 1024 * GI, PODS: 110},
        gpu_count=8,
        gpu_memory_mib=81920,
    )


def pod(name: str, queue: str, at: float, gpus: int, duration: float, owner: str = "") -> PodInfo:
    return PodInfo(
        name=name,
        namespace=queue,
        uid=f"{queue}/{name}",
        annotations={ANN_DURATION: f"{duration:.1f}"},
        requests={CPU: 4000, MEMORY: 16 * GI, PODS: 1},
        gpu=GpuRequest(gpus),
        created=at,
        scheduler_name="fairgpu",
        owner=owner,
        owner_kind="Job" if owner else "",
    )


def serve_waves(rng: np.random.Generator) -> list[PodArrival]:
    """Queue ``serve``'s three waves of one-GPU pods (30-60 minutes each)."""
    out = []
    for wave, start in enumerate(WAVES):
        for k in range(WAVE):
            d = float(rng.uniform(1800, 3600))
            t = start + k
            out.append(PodArrival(pod(f"serve-{wave}-{k:02d}", "serve", t, 1, d), t, d))
    return out


def workload(seed: int) -> Workload:
    """The nodes, Jobs and pods described in the module docstring."""
    rng = np.random.default_rng(seed)
    arrivals: list[PodArrival] = []
    jobs: list[BatchJob] = []
    at = 0.0
    for j in range(JOBS):
        strict = j % 2 == 0
        name = f"{'strict' if strict else 'tolerant'}-{j:02d}"
        uid = f"job/train/{name}"
        uids = []
        for i in range(COMPLETIONS):
            d = float(rng.lognormal(np.log(3600), 0.3))
            p = pod(f"{name}-{i}", "train", at, GPUS, d, owner=uid)
            arrivals.append(PodArrival(p, at, d))
            uids.append(p.uid)
        jobs.append(
            BatchJob(f"train/{name}", PARALLELISM, tuple(uids), 0 if strict else 6, uid=uid)
        )
        at += float(rng.exponential(300))
    arrivals.extend(serve_waves(rng))
    return Workload("fragile-jobs", [node(i) for i in range(6)], arrivals, jobs=jobs)


def measure(seed: int, aware: bool, ordering: str = "fair") -> dict[str, Any]:
    """One simulation; ``aware`` False: the engine is never told which Jobs are fragile."""
    tenancy = parse_config({"queues": [{"name": "train"}, {"name": "serve"}]})
    engine = Engine(policy(DEFAULT_POLICY), seed, tenancy=tenancy, ordering=ordering)  # type: ignore[arg-type]
    wl = workload(seed)
    sim = Simulation(wl, engine, seed=seed, until=UNTIL)
    if not aware:
        sim.jobs.fragile = lambda: frozenset()  # type: ignore[method-assign]
    result = sim.run()
    ended = {r.pod.uid for r in result.records if r.end is not None}
    failed = set(result.failed_jobs)

    def count(prefix: str, done: bool) -> int:
        return sum(
            1
            for j in wl.jobs
            if j.key.split("/")[1].startswith(prefix)
            and (all(u in ended for u in j.pods) if done else j.key in failed)
        )

    return {
        "jobs_failed": {"strict": count("strict", False), "tolerant": count("tolerant", False)},
        "jobs_finished": {"strict": count("strict", True), "tolerant": count("tolerant", True)},
        "completions_never_run": sum(
            sum(1 for u in j.pods if u not in ended) for j in wl.jobs if j.key in failed
        ),
        **costs(result),
    }


def costs(result: SimulationResult) -> dict[str, Any]:
    """What a run lost and what the serving queue waited: lost GPU-hours (by outcome),
    useful allocation, ``serve``'s wait p50/p99 and pods never started, preemptions by kind,
    reversals within 10 minutes."""
    acc = accounting_summary(result)
    serve = [r for r in result.records if r.pod.namespace == "serve"]
    waits = [r.start - r.arrival for r in serve if r.start is not None]
    kinds: dict[str, int] = {}
    for a in result.runs:
        if a.outcome == "preempted":
            kinds[a.cause] = kinds.get(a.cause, 0) + 1
    return {
        "lost_gpu_hours": acc["lost_gpu_hours"],
        "lost_gpu_hours_by_outcome": acc["lost_gpu_hours_by_outcome"],
        "useful_allocation_pct": acc["useful_allocation_pct"],
        "serve_wait_p50_s": round(percentile(waits, 50) or 0.0, 1),
        "serve_wait_p99_s": round(percentile(waits, 99) or 0.0, 1),
        "serve_never_started": len(serve) - len(waits),
        "preemptions_by_kind": kinds,
        "reversals_10min": acc["reversals"]["10min"],
    }


def main(argv: list[str] | None = None) -> int:
    return compare("fragile-jobs", argv, __doc__, measure, "blind", kube_aware=False)


def compare(
    scenario: str,
    argv: list[str] | None,
    doc: str | None,
    measure: Callable[..., dict[str, Any]],
    base: str,
    kube_aware: bool = True,
) -> int:
    """Run ``measure(seed, aware, ordering)`` aware and not (``base``) with fair ordering,
    and with kube-default ordering (aware as ``kube_aware``), in the same run, and
    :func:`report` them."""
    args = arguments(argv, doc)
    runs = {
        "aware": measure(args.seed, True, "fair"),
        base: measure(args.seed, False, "fair"),
        "kube_default": measure(args.seed, kube_aware, "kube-default"),
    }
    return report(scenario, args, runs, base)


def arguments(argv: list[str] | None, doc: str | None) -> argparse.Namespace:
    """``--seed`` and ``--results``, the options of both scripts here."""
    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--results", type=Path, help="also write the JSON here")
    return ap.parse_args(argv)


def report(
    scenario: str, args: argparse.Namespace, runs: dict[str, dict[str, Any]], base: str
) -> int:
    """Print (and with ``--results`` write) the runs as one JSON object, with the ratios
    ``aware / base`` of lost GPU-hours, the serving queue's wait p99 and useful allocation."""
    aware, baseline = runs["aware"], runs[base]

    def ratio(key: str) -> float | None:
        return None if not baseline[key] else round(aware[key] / baseline[key], 3)

    out = {
        "scenario": scenario,
        "seed": args.seed,
        **runs,
        f"ratio_aware_over_{base}": {
            "lost_gpu_hours": ratio("lost_gpu_hours"),
            "serve_wait_p99": ratio("serve_wait_p99_s"),
            "useful_allocation": ratio("useful_allocation_pct"),
        },
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.results:
        args.results.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
