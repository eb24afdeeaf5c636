"""A synthetic but realistic cluster for benchmarks: node pools, GPU models, taints, pods.

Nodes and pods are built as v1 objects (dicts) and decoded through the production path
(``decode`` + ``node_from_k8s``/``pod_from_k8s``). Everything is seeded.
"""

from __future__ import annotations

import random
from typing import Any

from fairgpu.api.objects import Node, Pod, decode
from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import CycleState
from fairgpu.engine.plugins.gpu import DeviceBestFit
from fairgpu.model.node import NodeInfo, node_from_k8s
from fairgpu.model.pod import PodInfo, pod_from_k8s

DOMAIN = "example.com"
USAGE = f"{DOMAIN}/node.usage"
POOLS = ("training", "inference", "hybrid")
GPU_MODELS = {"A100-SXM4-80GB": 81920, "V100-SXM2-32GB": 32768, "T4": 15360}


def node_object(i: int, rng: random.Random) -> dict[str, Any]:
    """Node ``i``: a pool (label + taint), a zone and rack, and GPUs on 60% of nodes."""
    pool = POOLS[0] if i % 5 < 2 else POOLS[1] if i % 5 < 4 else POOLS[2]
    name = f"node-{i:05d}"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "topology.kubernetes.io/zone": f"zone-{i % 10}",
        "topology.kubernetes.io/rack": f"rack-{i // 40}",
        USAGE: pool,
        "node.kubernetes.io/instance-type": rng.choice(["m5.8xlarge", "p4d.24xlarge", "g4dn"]),
    }
    taints = [{"key": USAGE, "value": pool, "effect": "NoSchedule"}]
    allocatable: dict[str, Any] = {
        "cpu": rng.choice(["32", "64", "96"]),
        "memory": rng.choice(["128Gi", "256Gi", "512Gi"]),
        "pods": "110",
        "ephemeral-storage": "500Gi",
    }
    if rng.random() < 0.65:  # 65% GPU nodes in every pool
        model = rng.choice(list(GPU_MODELS))
        count = rng.choice([4, 8])
        labels |= {
            "nvidia.com/gpu.product": model,
            "nvidia.com/gpu.count": str(count),
            "nvidia.com/gpu.memory": str(GPU_MODELS[model]),
        }
        taints.append({"key": "nvidia.com/gpu.product", "value": model, "effect": "NoSchedule"})
        allocatable["nvidia.com/gpu"] = count
    if i % 97 == 0:
        taints.append({"key": "maintenance", "value": "", "effect": "PreferNoSchedule"})
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints, "unschedulable": i % 499 == 0},
        "status": {"allocatable": allocatable},
    }


def nodes(count: int, seed: int = 0) -> list[NodeInfo]:
    """``count`` decoded nodes."""
    rng = random.Random(seed)
    return [node_from_k8s(decode(node_object(i, rng), Node)) for i in range(count)]


def _pool_affinity(kind: str) -> dict[str, Any]:
    pools = [kind, "hybrid"]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": USAGE, "operator": "In", "values": pools}]}
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "preference": {
                        "matchExpressions": [{"key": USAGE, "operator": "In", "values": [kind]}]
                    },
                }
            ],
        }
    }


def _constraints(app: str) -> dict[str, Any]:
    """What every pod carries with ``--constraints``: its app spread over zones (hard) and
    hostnames (soft), no two replicas on one node, and a preference for its app's zones."""
    selector = {"matchLabels": {"app": app}}
    return {
        "topologySpreadConstraints": [
            {
                "maxSkew": 2,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": selector,
            },
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": selector,
            },
        ],
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": selector}
            ]
        },
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "podAffinityTerm": {
                        "topologyKey": "topology.kubernetes.io/zone",
                        "labelSelector": selector,
                    },
                }
            ]
        },
    }


def pod_object(
    i: int, rng: random.Random, anti_affinity_share: float = 0.0, constraints: bool = False
) -> dict[str, Any]:
    """Pod ``i``: training (whole GPUs), inference (whole or shared GPU) or CPU work.

    ``constraints``: every pod gets the spread and pod (anti-)affinity of :func:`_constraints`.
    """
    roll = rng.random()
    kind = "training" if roll < 0.3 else "inference" if roll < 0.6 else "cpu"
    app = f"{kind}-app-{rng.randrange(200)}"
    requests: dict[str, Any] = {
        "cpu": rng.choice(["250m", "500m", "1", "2", "4"]),
        "memory": rng.choice(["512Mi", "1Gi", "4Gi", "8Gi"]),
    }
    limits: dict[str, Any] = {}
    tolerations: list[dict[str, Any]] = []
    spec: dict[str, Any] = {}
    if kind == "cpu":
        pool = rng.choice(POOLS)
        tolerations.append({"key": USAGE, "operator": "Equal", "value": pool})
        spec["nodeSelector"] = {USAGE: pool}
    else:
        model = rng.choice(list(GPU_MODELS))
        tolerations += [
            {"key": USAGE, "operator": "Equal", "value": kind, "effect": "NoSchedule"},
            {"key": USAGE, "operator": "Equal", "value": "hybrid", "effect": "NoSchedule"},
            {"key": "nvidia.com/gpu.product", "operator": "Equal", "value": model},
        ]
        spec["affinity"] = _pool_affinity(kind)
        spec["nodeSelector"] = {"nvidia.com/gpu.product": model}
        if kind == "training":
            limits["nvidia.com/gpu"] = rng.choice([1, 1, 1, 2, 4, 8])
        elif rng.random() < 0.5:
            limits["nvidia.com/gpu"] = 1
        else:
            limits["nvidia.com/gpucores"] = rng.choice([10, 25, 50])
            limits["nvidia.com/gpumem"] = rng.choice([2048, 4096, 8192])
    if rng.random() < anti_affinity_share:
        spec.setdefault("affinity", {})["podAntiAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": app}},
                    },
                }
            ]
        }
    if constraints:
        extra = _constraints(app)
        spec["topologySpreadConstraints"] = extra.pop("topologySpreadConstraints")
        spec.setdefault("affinity", {}).update(extra)
    return {
        "metadata": {
            "name": f"pod-{i:06d}",
            "namespace": f"team-{i % 20}",
            "uid": f"uid-{i:06d}",
            "labels": {"app": app, "fairgpu.io/queue": f"q{i % 7}"},
        },
        "spec": {
            "containers": [{"name": "main", "resources": {"requests": requests, "limits": limits}}],
            "tolerations": tolerations,
            **spec,
        },
    }


def pods(
    count: int,
    seed: int = 1,
    start: int = 0,
    anti_affinity_share: float = 0.0,
    constraints: bool = False,
) -> list[PodInfo]:
    """``count`` decoded pods numbered from ``start``."""
    rng = random.Random(seed)
    return [
        pod_from_k8s(decode(pod_object(start + i, rng, anti_affinity_share, constraints), Pod))
        for i in range(count)
    ]


def fill(
    state: ClusterState,
    target: int,
    seed: int = 2,
    anti_affinity_share: float = 0.0,
    constraints: bool = False,
) -> int:
    """Place ``target`` generated pods (random feasible node, no scoring, real filters).

    Pods that fit nowhere are skipped and more are generated, up to ``3 * target`` attempts.
    ``PodInfo.source`` is dropped, as the live cache does. Returns how many were placed.
    """
    from fairgpu.engine.policies import policy
    from fairgpu.engine.scheduler import Scheduler

    sched = Scheduler(policy("binpack"), seed=seed)
    devices = DeviceBestFit()
    rng = random.Random(seed)
    gen = random.Random(seed + 1)
    placed = 0
    for i in range(3 * target):
        if placed >= target:
            break
        p = pod_from_k8s(decode(pod_object(i, gen, anti_affinity_share, constraints), Pod))
        p.source = None
        mask, _ = sched.filter(p, state)
        candidates = mask.nonzero()[0]
        if candidates.size == 0:
            continue
        slot = int(candidates[rng.randrange(candidates.size)])
        devs = devices.choose(CycleState(), p, state, slot)
        if devs is None:
            continue
        state.assign(p, slot, devs)
        placed += 1
    return placed


def build(
    node_count: int, pod_count: int, seed: int = 0, constraints: bool = False
) -> tuple[ClusterState, int]:
    """A cluster of ``node_count`` nodes holding ``pod_count`` placed pods (if they fit)."""
    state = ClusterState(max_devices=8, capacity=node_count)
    for n in nodes(node_count, seed):
        state.add_node(n)
    return state, fill(state, pod_count, seed + 2, constraints=constraints)
