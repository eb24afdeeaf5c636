"""DRA packing: openb GPU asks as ResourceClaims on NVIDIA-shaped slices, first fit vs ours.

Every GPU pod of an openb pod list (../shared/traces/openb) becomes a pod with one claim made
from a template: ``n`` whole GPUs (``gpu.nvidia.com``) for ``num_gpu >= 1`` at 1000 milli, or
one MIG partition (``mig.nvidia.com``) of the smallest A100 profile at least as big as the
fraction it asks (1g.10gb = 1/7 ... 7g.80gb). Nodes carry 8 partitionable A100-80GB each
(``fairgpu.sim.workloads.nvidia_dra``). Pods arrive in a seeded random order and are placed
one by one until the first claim fails; the run reports the share of GPU capacity allocated at
that point (memory slices of allocated devices over all memory slices: a whole GPU or a
7g/4g+3g carve counts 8/8, a 1g partition 1/8).

Three placements run on the same pods in the same order, through the same engine:

* ``kube-scheduler``: kube-scheduler 1.34 reproduced: its default scores (``spread`` profile:
  least allocated, balanced allocation, random tie-break; it has no device score) and its
  device choice, the first solution in (pool, slice, device) order (``first-fit``);
* ``kube-nodes+fairgpu-devices``: the same node choice, fairgpu's fragmentation-aware device
  choice (isolates the device choice);
* ``fairgpu``: fairgpu's device choice and its DRA packing score
  (``DynamicResourcesPacking``, fixed-rank tie-break).

Prints one JSON object; ``ratio`` = fairgpu / kube-scheduler, target >= 1.03.

Usage::

    python benchmarks/dra_packing/run.py [--list default] [--nodes 16] [--seeds 1-5]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from statistics import mean, median
from typing import Any

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.plugins.dra_packing import DynamicResourcesPacking
from fairgpu.engine.policies import spread
from fairgpu.engine.profile import Profile, ScoreRef
from fairgpu.engine.scheduler import Scheduler
from fairgpu.model.dra import decode_dra
from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import CPU, PODS, PodInfo
from fairgpu.sim.workloads.nvidia_dra import (
    A100_80GB,
    MEMORY_SLICES,
    PROFILES,
    claim_spec,
    nvidia_device_classes,
    nvidia_slice,
)
from fairgpu.sim.workloads.openb import load_openb_pods

ROOT = Path(__file__).resolve().parents[2]
# ../shared from the repository (or from a checkout one level deeper); --openb overrides.
OPENB_CANDIDATES = (ROOT.parent / "shared", ROOT.parent.parent / "shared")
# Smallest-first, with the share of one GPU each gives (compute slices of seven).
MIG_BY_SEVENTHS = ((1, "1g.10gb"), (2, "2g.20gb"), (3, "3g.40gb"), (4, "4g.40gb"), (7, "7g.80gb"))


def ask_of(num_gpu: int, gpu_milli: int) -> tuple[int, str]:
    """(whole GPUs, MIG profile) for an openb ask."""
    if num_gpu >= 1 and gpu_milli >= 1000:
        return min(num_gpu, 8), ""
    for sevenths, profile in MIG_BY_SEVENTHS:
        if gpu_milli * 7 <= sevenths * 1000:
            return 0, profile
    return 1, ""


def build_cluster(nodes: int) -> ClusterState:
    """``nodes`` CPU-roomy nodes, each with one NVIDIA-shaped slice of 8 A100s."""
    state = ClusterState(capacity=max(64, nodes))
    for i in range(nodes):
        name = f"node-{i:03d}"
        state.add_node(
            NodeInfo(
                name,
                labels={"kubernetes.io/hostname": name},
                allocatable={CPU: 1_000_000, PODS: 10_000},
            )
        )
        state.dra.add(decode_dra(nvidia_slice(name, gpus=8)))
    for doc in nvidia_device_classes():
        state.dra.add(decode_dra(doc))
    return state


def templates(state: ClusterState) -> None:
    """One ResourceClaimTemplate per ask shape."""
    shapes = [(n, "") for n in range(1, 9)] + [(0, p) for p in PROFILES]
    for gpus, profile in shapes:
        doc = {
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": template_name(gpus, profile), "namespace": "default"},
            "spec": {"spec": claim_spec(gpus, profile)},
        }
        state.dra.add(decode_dra(doc))


def template_name(gpus: int, profile: str) -> str:
    return f"mig-{profile.replace('.', '-')}" if profile else f"gpu-{gpus}"


def allocated_share(state: ClusterState, gpus: int) -> float:
    """Memory slices held by allocated devices over all memory slices."""
    used = 0
    for claim in state.dra.claims.values():
        for r in claim.allocation or ():
            device = state.dra.device(r.key)
            if device is not None:
                used += sum(
                    v
                    for set_ in device.consumes.values()
                    for k, v in set_.items()
                    if k.startswith("memory-slice-")
                )
    return used / (gpus * MEMORY_SLICES)


def profile_for(placement: str) -> Profile:
    """The engine profile of one placement (see the module doc)."""
    if placement == "fairgpu":
        return Profile(
            name=placement,
            scores=[ScoreRef(name=DynamicResourcesPacking.name, weight=1)],
            tie_break="fixed-rank",
        )
    policy = "first-fit" if placement == "kube-scheduler" else "fragmentation-aware"
    return spread().model_copy(
        update={"name": placement, "plugin_args": {"DynamicResources": {"policy": policy}}}
    )


PLACEMENTS = ("kube-scheduler", "kube-nodes+fairgpu-devices", "fairgpu")


def run_one(asks: list[tuple[int, str]], nodes: int, placement: str, seed: int) -> dict[str, Any]:
    """Place pods in a seeded order until the first claim fails."""
    state = build_cluster(nodes)
    templates(state)
    sched = Scheduler(profile_for(placement), seed=seed)
    order = np.random.default_rng(seed).permutation(len(asks))
    placed = 0
    start = time.perf_counter()
    reason = ""
    for k in order:
        gpus, profile_name = asks[int(k)]
        name = f"p{placed}"
        ref = (("gpu", "", template_name(gpus, profile_name)),)
        pod = PodInfo(name, uid=name, requests={CPU: 100, PODS: 1}, resource_claims=ref)
        state.dra.create_pod_claims(pod)
        result = sched.schedule(pod, state)
        if not result.ok or result.node is None:
            reason = result.reason()
            break
        state.assign(pod, result.node)
        state.dra.commit(pod, result.node)
        placed += 1
    return {
        "placement": placement,
        "seed": seed,
        "placed": placed,
        "allocated_share": round(allocated_share(state, nodes * 8), 4),
        "first_failure": reason,
        "seconds": round(time.perf_counter() - start, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", default="default", help="openb pod list suffix")
    parser.add_argument("--openb", type=Path, default=None, help="openb trace directory")
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--seeds", default="1-5", help="a range a-b")
    args = parser.parse_args(argv)
    dirs = [args.openb] if args.openb else [d / "traces" / "openb" for d in OPENB_CANDIDATES]
    found = [d for d in dirs if (d / f"openb_pod_list_{args.list}.csv").exists()]
    path = (found or dirs)[0] / f"openb_pod_list_{args.list}.csv"
    if not path.exists():
        print(f"skipped: openb trace {path} is absent", file=sys.stderr)
        print(json.dumps({"skipped": f"{path} absent"}))
        return 0
    asks = [ask_of(p.num_gpu, p.gpu_milli) for p in load_openb_pods(path) if p.num_gpu > 0]
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    runs = [run_one(asks, args.nodes, p, seed) for seed in seeds for p in PLACEMENTS]
    share = {p: mean(r["allocated_share"] for r in runs if r["placement"] == p) for p in PLACEMENTS}
    out = {
        "benchmark": "dra_packing",
        "trace": path.name,
        "gpu_model": A100_80GB.product,
        "nodes": args.nodes,
        "gpus": args.nodes * 8,
        "seeds": list(seeds),
        "share_at_first_failure": {p: round(v, 4) for p, v in share.items()},
        "median_share_at_first_failure": {
            p: round(median(r["allocated_share"] for r in runs if r["placement"] == p), 4)
            for p in PLACEMENTS
        },
        "kube_scheduler_share": round(share["kube-scheduler"], 4),
        "fairgpu_share": round(share["fairgpu"], 4),
        "ratio": round(share["fairgpu"] / share["kube-scheduler"], 4),
        "device_choice_only_ratio": round(
            share["kube-nodes+fairgpu-devices"] / share["kube-scheduler"], 4
        ),
        "target_ratio": 1.03,
        "runs": runs,
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
