"""Fair-cycle speed benchmark: a large backlog through ``fair`` and ``kube-default`` ordering
in the same run.

32 nodes x 8 GPUs. Tenant ``a`` floods 2 000 one-GPU pods at t=0 (run times ~10 min);
tenants ``b`` and ``c`` submit gangs (pod groups with minMember 2-4, 8 GPUs per member) and
fractional-GPU inference pods over the first hour -- about 2 270 pods in all. Every
completion is a scheduling cycle over the whole remaining backlog, so the run measures what
one cycle costs when thousands of identical pods wait.

Prints one JSON object: per ordering the wall and CPU seconds, cycles, pods/s and ms per
cycle, and the decisions' fingerprints (time-averaged GPU allocation, preemptions, pods
started, a hash of every pod's start time and node) so a speed-up that changes outcomes
shows; then the fair/kube-default ratios of wall and of CPU time (CPU time is the steadier
one on a shared machine). Target: fair <= 5 s and ratio <= 1.5.

Usage: ``python benchmarks/fair_cycle_speed/run.py [--seed N] [--flood 2000] [--profile]
[--only fair|kube-default] [--results FILE]``; ``results.json`` beside it is one full run
(see README.md).
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import pstats
import sys
import time
from pathlib import Path

import numpy as np

from fairgpu.engine.engine import Engine
from fairgpu.engine.policies import DEFAULT_POLICY, policy
from fairgpu.model.gpu import GpuRequest
from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import ANN_DURATION, CPU, LABEL_USER, MEMORY, PODS, PodInfo
from fairgpu.sim.simulator import Simulation, SimulationResult, time_average
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.tenancy.resolve import LABEL_POD_GROUP

GI = 2**30
NODES = 32
GPUS = 8


def node(i: int) -> NodeInfo:
    """An 8-GPU node with room for many pods."""
    return NodeInfo(
        name=f"n{i:02d}",
        allocatable={CPU: 128_000, MEMORY: 1024 * GI, PODS: 110},
        gpu_count=GPUS,
        gpu_memory_mib=81920,
    )


def pod(
    name: str,
    tenant: str,
    created: float,
    gpu: GpuRequest,
    duration: float,
    user: str,
    group: str = "",
    cpu: int = 4000,
) -> PodInfo:
    """A pod of ``tenant`` (namespace = queue) declaring its run time."""
    labels = {LABEL_USER: user}
    if group:
        labels[LABEL_POD_GROUP] = group
    return PodInfo(
        name=name,
        namespace=tenant,
        uid=f"{tenant}/{name}",
        labels=labels,
        annotations={ANN_DURATION: f"{duration:.1f}"},
        requests={CPU: cpu, MEMORY: 16 * GI, PODS: 1},
        gpu=gpu,
        created=created,
        scheduler_name="fairgpu",
    )


def workload(seed: int, flood: int) -> Workload:
    """The scenario: a flood from ``a``, gangs and fractional inference from ``b`` and ``c``."""
    rng = np.random.default_rng(seed)
    arrivals: list[PodArrival] = []
    groups: dict[str, int] = {}
    for j, d in enumerate(np.round(rng.lognormal(np.log(600), 0.4, flood), 1)):
        p = pod(f"a-{j}", "a", j * 1e-3, GpuRequest(1), float(d), f"a-u{j % 2}")
        arrivals.append(PodArrival(p, 0.0, float(d)))
    for t in ("b", "c"):
        at = 0.5
        for g in range(20):  # gangs: 20 per tenant, 2-4 members of 8 GPUs
            at += float(rng.exponential(120))
            members = int(rng.integers(2, 5))
            name = f"{t}-gang-{g}"
            groups[f"{t}/{name}"] = members
            d = float(np.round(rng.lognormal(np.log(900), 0.4), 1))
            for m in range(members):
                p = pod(f"{name}-{m}", t, at + m * 1e-3, GpuRequest(8), d, f"{t}-train", name)
                arrivals.append(PodArrival(p, at, d))
        at = 0.5
        for k in range(75):  # fractional inference
            at += float(rng.exponential(40))
            milli = int(rng.choice([250, 300, 500]))
            mem = int(rng.choice([4096, 8192, 10240]))
            d = float(np.round(rng.lognormal(np.log(1200), 0.5), 1))
            gpu = GpuRequest(1, milli=milli, memory_mib=mem)
            p = pod(f"{t}-serve-{k}", t, at, gpu, d, f"{t}-serve", cpu=2000)
            arrivals.append(PodArrival(p, at, d))
    nodes = [node(i) for i in range(NODES)]
    return Workload("fair-cycle-speed", nodes, arrivals, pod_groups=groups)


def fingerprint(result: SimulationResult) -> dict[str, object]:
    """What the decisions were, compactly: allocation, preemptions, starts, and a hash."""
    tl = result.timeline
    cap = max(result.gpu_capacity_milli, 1)
    alloc = time_average(tl.time, tl.gpu_allocated_milli, result.end_time) / cap
    digest = hashlib.sha256()
    started = 0
    for rec in sorted(result.records, key=lambda r: r.pod.uid):
        started += rec.start is not None
        digest.update(f"{rec.pod.uid}|{rec.start}|{rec.node}|{rec.preempted};".encode())
    return {
        "gpu_allocation_pct": round(100 * alloc, 3),
        "preemptions": result.preemptions,
        "started": started,
        "end_time_s": round(result.end_time, 1),
        "outcome_sha256": digest.hexdigest()[:16],
    }


def run(ordering: str, seed: int, flood: int, profile: bool) -> dict[str, object]:
    """One simulation of the scenario under ``ordering``: wall time and fingerprint."""
    wl = workload(seed, flood)
    engine = Engine(policy(DEFAULT_POLICY), seed, ordering=ordering)  # type: ignore[arg-type]
    engine.register_pod_groups(wl.pod_groups)
    sim = Simulation(wl, engine, seed=seed, track_fragmentation=False)
    prof = cProfile.Profile() if profile else None
    started, cpu = time.perf_counter(), time.process_time()
    if prof is not None:
        prof.enable()
    result = sim.run()
    if prof is not None:
        prof.disable()
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu
    if prof is not None:
        print(f"--- profile: {ordering}", file=sys.stderr)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(35)
    pods = len(wl.arrivals)
    return {
        "pods": pods,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "cycles": result.cycles,
        "pods_per_s": round(pods / wall, 1),
        "ms_per_cycle": round(1000 * wall / max(result.cycles, 1), 3),
        **fingerprint(result),
    }


def main(argv: list[str] | None = None) -> int:
    """Run both orderings and print the JSON comparison."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--flood", type=int, default=2000, help="pods tenant a submits")
    ap.add_argument("--profile", action="store_true", help="cProfile each run (to stderr)")
    ap.add_argument("--only", choices=("fair", "kube-default"), help="run one ordering")
    ap.add_argument("--results", type=Path, help="also write the JSON to this file")
    args = ap.parse_args(argv)
    orderings = [args.only] if args.only else ["fair", "kube-default"]
    out: dict[str, object] = {"scenario": "fair-cycle-speed", "seed": args.seed}
    for ordering in orderings:
        out[ordering] = run(ordering, args.seed, args.flood, args.profile)
    if len(orderings) == 2:
        fair, kube = out["fair"], out["kube-default"]
        assert isinstance(fair, dict) and isinstance(kube, dict)
        out["ratio_fair_to_kube_default"] = round(fair["wall_s"] / kube["wall_s"], 3)
        out["cpu_ratio_fair_to_kube_default"] = round(fair["cpu_s"] / kube["cpu_s"], 3)
        out["targets"] = {"fair_wall_s_max": 5.0, "ratio_max": 1.5}
    text = json.dumps(out, indent=2)
    print(text)
    if args.results is not None:
        args.results.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
