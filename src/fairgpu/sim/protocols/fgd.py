"""The FGD paper's openb experiment (USENIX ATC'23), replayed through our engine.

Exactly as ../shared/reference/README.md describes it:

1. The cluster is the openb node list; every GPU is 1000 milli.
2. Pods are the openb pod list (``gpu_milli`` capped at 1000; see
   :mod:`fairgpu.sim.workloads.openb`).
3. Order, then inflation: sort the pods by name, shuffle them with the seeded RNG, then append
   copies drawn uniformly at random (with replacement) from the original list until the next
   draw would push the running GPU request above 130% of the cluster's GPU milli (the stop test
   adds the drawn pod's per-GPU ``gpu_milli``, the total adds ``num_gpu * gpu_milli``). A list
   already above 130% instead loses pods at random until it is at or below 130%.
4. One pod at a time through the engine (:meth:`Scheduler.schedule` then
   :meth:`ClusterState.assign`); nothing ever finishes; a pod that fits nowhere is dropped but
   its GPU request still counts as arrived.
5. After every arrival, allocated and arrived GPU milli as a percentage of capacity. The figure
   at A% is the mean allocation over the arrivals whose arrived percentage rounds to A (A±1
   when there is none).

The placement policy is any named preset (``fairgpu.engine.policies``); fragmentation policies
get the typical pod shapes of the original list (95% coverage), as the published FGD does.
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.plugins.fgd_measure import cluster_fragmentation
from fairgpu.engine.plugins.shape_learning import TypicalPods
from fairgpu.engine.policies import policy, with_typical_pods
from fairgpu.engine.profile import Profile
from fairgpu.engine.scheduler import Scheduler
from fairgpu.sim.workloads.openb import OpenbPod, load_openb_nodes, load_openb_pods, openb_pod_info

INFLATION = 1.30
SEEDS = tuple(range(42, 52))
REPORTED_PERCENTS = (100, 110, 120, 130)
# ../shared/reference relative to the repository root.
DEFAULT_REFERENCE = Path(__file__).resolve().parents[4].parent / "shared" / "reference"
REFERENCE_FILE = "fgd_gpu_allocation.csv"
# Our policy names -> the published policy names in the reference CSV.
PUBLISHED_NAMES = {
    "random": "Random",
    "dot-product": "DotProd",
    "gpu-clustering": "GpuClustering",
    "gpu-packing": "GpuPacking",
    "best-fit": "BestFit",
    "fgd": "FGD",
}


@dataclass(slots=True)
class FgdResult:
    """One protocol run.

    ``gpu_allocation_at``: arrival percent (0..130) -> allocated percent of cluster GPU milli.
    ``arrived_pct``/``allocated_pct``: the curve after every arrival. ``fragmentation_pct``:
    (arrival index, expected fragmentation as % of capacity, idle GPU milli as % of capacity)
    samples. ``tie_break`` is the profile's rule, part of the policy.
    """

    workload: str
    policy: str
    tie_break: str
    seed: int
    nodes: int
    gpus: int
    capacity_milli: int
    arrivals: int
    original_pods: int
    placed: int
    failed: int
    gpu_allocation_at: dict[int, float]
    arrived_pct: np.ndarray
    allocated_pct: np.ndarray
    fragmentation_pct: list[tuple[int, float, float]] = field(default_factory=list)
    seconds: float = 0.0
    typical_shapes: int = 0

    def summary(self) -> dict[str, Any]:
        """JSON-friendly summary (no per-arrival curve)."""
        return {
            "workload": self.workload,
            "policy": self.policy,
            "tie_break": self.tie_break,
            "seed": self.seed,
            "nodes": self.nodes,
            "gpus": self.gpus,
            "arrivals": self.arrivals,
            "original_pods": self.original_pods,
            "placed": self.placed,
            "failed": self.failed,
            "typical_shapes": self.typical_shapes,
            "seconds": round(self.seconds, 3),
            "gpu_allocation_at": {str(k): round(v, 4) for k, v in self.gpu_allocation_at.items()},
        }

    def curve(self, step: int = 1) -> list[dict[str, float]]:
        """The allocation curve, every ``step``-th arrival (for plots)."""
        return [
            {"arrival": i + 1, "arrived_pct": float(a), "allocated_pct": float(b)}
            for i, (a, b) in enumerate(zip(self.arrived_pct, self.allocated_pct, strict=True))
            if i % step == 0 or i == len(self.arrived_pct) - 1
        ]


def arrival_order(
    pods: Sequence[OpenbPod], capacity_milli: int, seed: int, inflation: float = INFLATION
) -> list[OpenbPod]:
    """Steps 3 of the protocol: name order, seeded shuffle, then inflation (or deflation)."""
    rng = np.random.default_rng(seed)
    original = sorted(pods, key=lambda p: p.pod.name)
    order = [original[i] for i in rng.permutation(len(original))]
    total = sum(p.gpu_request_milli for p in order)
    target = inflation * capacity_milli
    if total > target:
        while total > target and order:
            victim = order.pop(int(rng.integers(len(order))))
            total -= victim.gpu_request_milli
        return order
    copies = 0
    while original:
        drawn = original[int(rng.integers(len(original)))]
        if total + drawn.gpu_milli > target:
            break
        copies += 1
        pod = openb_pod_info(
            drawn.pod.name,
            drawn.cpu_milli,
            drawn.memory_mib,
            drawn.num_gpu,
            drawn.gpu_milli,
            drawn.gpu_spec,
            drawn.qos,
            uid=f"{drawn.pod.uid}#{copies}",
        )
        order.append(
            OpenbPod(
                pod,
                drawn.cpu_milli,
                drawn.memory_mib,
                drawn.num_gpu,
                drawn.gpu_milli,
                drawn.gpu_spec,
                drawn.qos,
                drawn.arrival,
                drawn.duration,
            )
        )
        total += drawn.gpu_request_milli
    return order


def allocation_at(
    arrived_pct: np.ndarray, allocated_pct: np.ndarray, percents: Sequence[int] = range(131)
) -> dict[int, float]:
    """Step 5: mean allocation over arrivals whose arrived % rounds to A (A±1 if none)."""
    rounded = np.floor(arrived_pct + 0.5).astype(np.int64)
    out: dict[int, float] = {}
    for a in percents:
        hit = rounded == a
        if not hit.any():
            hit = (rounded == a - 1) | (rounded == a + 1)
        if hit.any():
            out[int(a)] = float(allocated_pct[hit].mean())
    return out


def protocol_profile(name: str, typical: TypicalPods) -> Profile:
    """The named preset, with the original list's typical shapes for fragmentation plugins."""
    return with_typical_pods(policy(name), typical.to_args())


def run_fgd_protocol(
    pod_csv: str | Path,
    node_csv: str | Path,
    policy_name: str,
    seed: int,
    *,
    profile: Profile | None = None,
    fragmentation_every: int = 0,
    inflation: float = INFLATION,
) -> FgdResult:
    """Run the published openb experiment once (one policy, one seed) through the engine.

    ``profile`` overrides the preset named ``policy_name`` (the name is still reported).
    ``fragmentation_every`` > 0 samples the cluster's expected fragmentation every that many
    arrivals (and at the end) into ``FgdResult.fragmentation_pct``.
    """
    started = time.perf_counter()
    nodes = load_openb_nodes(node_csv)
    pods = load_openb_pods(pod_csv)
    cluster = ClusterState(max_devices=max([8, *(n.gpu_count for n in nodes)]), capacity=len(nodes))
    for node in nodes:
        cluster.add_node(node)
    capacity = cluster.gpu_capacity_milli()
    if capacity <= 0:
        raise ValueError(f"{node_csv}: the node list has no GPUs")
    typical = TypicalPods.from_pods(p.pod for p in pods)
    prof = profile if profile is not None else protocol_profile(policy_name, typical)
    scheduler = Scheduler(prof, seed)
    order = arrival_order(pods, capacity, seed, inflation)
    arrived = np.empty(len(order), dtype=np.float64)
    allocated = np.empty(len(order), dtype=np.float64)
    frag_samples: list[tuple[int, float, float]] = []
    asked = 0
    placed = 0
    for i, item in enumerate(order):
        pod = item.pod
        result = scheduler.schedule(pod, cluster)
        if result.node is not None:
            cluster.assign(pod, result.node, result.devices)
            placed += 1
        asked += item.gpu_request_milli
        arrived[i] = asked
        allocated[i] = cluster.gpu_allocated_milli()
        if fragmentation_every and (i % fragmentation_every == 0 or i == len(order) - 1):
            frag_samples.append(_fragmentation_sample(i + 1, cluster, typical, capacity))
    arrived_pct = arrived * 100.0 / capacity
    allocated_pct = allocated * 100.0 / capacity
    return FgdResult(
        workload=Path(pod_csv).stem,
        policy=policy_name,
        tie_break=prof.tie_break,
        seed=seed,
        nodes=len(nodes),
        gpus=capacity // 1000,
        capacity_milli=capacity,
        arrivals=len(order),
        original_pods=len(pods),
        placed=placed,
        failed=len(order) - placed,
        gpu_allocation_at=allocation_at(arrived_pct, allocated_pct),
        arrived_pct=arrived_pct,
        allocated_pct=allocated_pct,
        fragmentation_pct=frag_samples,
        seconds=time.perf_counter() - started,
        typical_shapes=typical.size,
    )


def _fragmentation_sample(
    index: int, cluster: ClusterState, typical: TypicalPods, capacity: int
) -> tuple[int, float, float]:
    frag = cluster_fragmentation(cluster, typical)
    idle = capacity - cluster.gpu_allocated_milli()
    return (index, frag * 100.0 / capacity, idle * 100.0 / capacity)


def reference_figures(
    workload: str, reference: str | Path | None = None
) -> dict[str, dict[int, tuple[float, float]]] | None:
    """Published figures for one pod list: policy -> {arrival %: (mean, std)}.

    ``workload`` is the pod list's stem (``openb_pod_list_default``) or a path to it.
    ``reference`` is the CSV (or its directory); default ../shared/reference. None when the
    file is absent or has no row for the list. Policy keys are the published names (BestFit,
    FGD, ...); :data:`PUBLISHED_NAMES` maps our preset names to them.
    """
    path = Path(reference) if reference is not None else DEFAULT_REFERENCE
    if path.is_dir():
        path = path / REFERENCE_FILE
    if not path.is_file():
        return None
    name = Path(str(workload)).stem
    out: dict[str, dict[int, tuple[float, float]]] = {}
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row.get("workload") != name:
                continue
            figures: dict[int, tuple[float, float]] = {}
            for key, value in row.items():
                if key.startswith("alloc_at_") and key.endswith("pct_mean"):
                    pct = int(key[len("alloc_at_") : -len("pct_mean")])
                    std = row.get(key.replace("_mean", "_std")) or "nan"
                    figures[pct] = (float(value), float(std))
            out[row["policy"]] = figures
    return out or None


def reference_for_policy(
    workload: str, policy_name: str, reference: str | Path | None = None
) -> dict[int, float] | None:
    """Published mean figures of our preset ``policy_name`` (None if not published)."""
    figures = reference_figures(workload, reference)
    published = PUBLISHED_NAMES.get(policy_name)
    if figures is None or published is None or published not in figures:
        return None
    return {pct: mean for pct, (mean, _) in figures[published].items()}


def format_table(result: FgdResult, reference: str | Path | None = None) -> str:
    """A small text table: ours at 100/110/120/130% beside the published figures."""
    figures = reference_figures(result.workload, reference) or {}
    names = ["ours", *sorted(figures)]
    lines = [
        f"{result.workload}  policy={result.policy} tie-break={result.tie_break} "
        f"seed={result.seed}  ({result.arrivals} arrivals, {result.failed} dropped)",
        "arrival%  " + "  ".join(f"{n:>13}" for n in names),
    ]
    for pct in REPORTED_PERCENTS:
        ours = result.gpu_allocation_at.get(pct, math.nan)
        cells = [f"{ours:13.2f}"]
        for n in names[1:]:
            mean = figures[n].get(pct, (math.nan, math.nan))[0]
            cells.append(f"{mean:13.2f}")
        lines.append(f"{pct:>7}%  " + "  ".join(cells))
    return "\n".join(lines)


__all__ = [
    "PUBLISHED_NAMES",
    "SEEDS",
    "FgdResult",
    "allocation_at",
    "arrival_order",
    "format_table",
    "protocol_profile",
    "reference_figures",
    "reference_for_policy",
    "run_fgd_protocol",
]
