"""The built-in cluster and synthetic multi-tenant workload ``fairgpu simulate`` runs by default.

The cluster has the node pools described in the project docs: a training pool of 8×A100-80GB
nodes, an inference pool of 4×L4 nodes and a hybrid pool of 8×A100 nodes, each labelled and
tainted with ``<domain>/node.usage`` and the GPU product. The workload mixes training jobs
(1/2/4/8-GPU pods and multi-node gangs) and inference Deployments (whole and fractional GPUs)
from several tenants, one of which submits far more than the others — so the run shows fair
sharing at work. Everything is generated from the seed, so runs are reproducible.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fairgpu.api import objects as k8s
from fairgpu.model.node import NodeInfo, node_from_k8s
from fairgpu.model.node_pools import LABEL_GPU_MODEL, NodePoolConfig, derive_placement
from fairgpu.model.pod import ANN_DURATION, DOMAIN, LABEL_USER, LABEL_WORKLOAD, pod_from_k8s
from fairgpu.sim.workload import PodArrival, Workload

A100 = ("NVIDIA-A100-SXM4-80GB", 81920)
L4 = ("NVIDIA-L4", 23034)
POD_GROUP = f"{DOMAIN}/pod-group"
MIN_MEMBER = f"{DOMAIN}/min-member"


class PoolSpec(BaseModel):
    """One node pool of identical nodes."""

    model_config = ConfigDict(extra="forbid")
    usage: str
    nodes: int = Field(ge=0)
    gpus: int = Field(ge=0, le=16)
    gpu_model: str
    gpu_memory_mib: int = Field(gt=0)
    cpu: int = Field(gt=0)
    memory_gib: int = Field(gt=0)


class SyntheticSpec(BaseModel):
    """Knobs of the synthetic workload (all have sensible defaults)."""

    model_config = ConfigDict(extra="forbid")
    pools: list[PoolSpec] = Field(
        default_factory=lambda: [
            PoolSpec(
                usage="training",
                nodes=6,
                gpus=8,
                gpu_model=A100[0],
                gpu_memory_mib=A100[1],
                cpu=128,
                memory_gib=1024,
            ),
            PoolSpec(
                usage="inference",
                nodes=6,
                gpus=4,
                gpu_model=L4[0],
                gpu_memory_mib=L4[1],
                cpu=64,
                memory_gib=256,
            ),
            PoolSpec(
                usage="hybrid",
                nodes=4,
                gpus=8,
                gpu_model=A100[0],
                gpu_memory_mib=A100[1],
                cpu=128,
                memory_gib=1024,
            ),
        ]
    )
    tenants: dict[str, float] = Field(
        default_factory=lambda: {"team-a": 0.4, "team-b": 0.2, "team-c": 0.2, "team-d": 0.2}
    )
    users_per_tenant: int = Field(3, ge=1)
    jobs: int = Field(500, ge=1)
    mean_interarrival_s: float = Field(75.0, gt=0)
    training_fraction: float = Field(0.6, ge=0, le=1)
    gang_fraction: float = Field(0.15, ge=0, le=1)
    training_gpus: dict[int, float] = Field(
        default_factory=lambda: {1: 0.35, 2: 0.25, 4: 0.2, 8: 0.2}
    )
    training_median_s: float = Field(1200.0, gt=0)
    inference_median_s: float = Field(1800.0, gt=0)
    usage_key: str = "example.com/node.usage"


def build_nodes(spec: SyntheticSpec) -> list[NodeInfo]:
    """Node objects for every pool, labelled and tainted as GPU feature discovery and the
    pool convention do, decoded through the same path as live Nodes."""
    nodes = []
    for pool in spec.pools:
        for i in range(pool.nodes):
            labels = {
                spec.usage_key: pool.usage,
                "kubernetes.io/hostname": f"{pool.usage}-{i:02d}",
                "topology.kubernetes.io/zone": f"zone-{i % 2}",
            }
            taints = [{"key": spec.usage_key, "value": pool.usage, "effect": "NoSchedule"}]
            allocatable: dict[str, Any] = {
                "cpu": str(pool.cpu),
                "memory": f"{pool.memory_gib}Gi",
                "pods": "110",
                "ephemeral-storage": "1Ti",
            }
            if pool.gpus:
                labels.update(
                    {
                        "nvidia.com/gpu.product": pool.gpu_model,
                        "nvidia.com/gpu.count": str(pool.gpus),
                        "nvidia.com/gpu.memory": str(pool.gpu_memory_mib),
                    }
                )
                taints.append(
                    {
                        "key": "nvidia.com/gpu.product",
                        "value": pool.gpu_model,
                        "effect": "NoSchedule",
                    }
                )
                allocatable["nvidia.com/gpu"] = str(pool.gpus)
            raw = {
                "metadata": {"name": f"{pool.usage}-{i:02d}", "labels": labels},
                "spec": {"taints": taints},
                "status": {"allocatable": allocatable, "capacity": allocatable},
            }
            nodes.append(node_from_k8s(k8s.decode(raw, k8s.Node)))
    return nodes


def _pod(
    name: str,
    namespace: str,
    user: str,
    kind: str,
    model: str,
    resources: dict[str, str],
    priority: int,
    extra_labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    labels = {LABEL_WORKLOAD: kind, LABEL_GPU_MODEL: model, LABEL_USER: user}
    labels.update(extra_labels or {})
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"{namespace}/{name}",
            "labels": labels,
            "annotations": annotations or {},
        },
        "spec": {
            "schedulerName": "fairgpu",
            "priority": priority,
            "containers": [
                {"name": "main", "resources": {"requests": resources, "limits": dict(resources)}}
            ],
        },
    }


def generate(spec: SyntheticSpec | None = None, seed: int = 0) -> Workload:
    """The default workload: the built-in cluster and ``spec.jobs`` jobs from several tenants."""
    spec = spec or SyntheticSpec()
    rng = np.random.default_rng(seed)
    pools = NodePoolConfig(usage_key=spec.usage_key)
    nodes = build_nodes(spec)
    tenants = list(spec.tenants)
    weights = np.array([spec.tenants[t] for t in tenants], dtype=float)
    weights /= weights.sum()
    sizes = list(spec.training_gpus)
    size_p = np.array([spec.training_gpus[s] for s in sizes], dtype=float)
    size_p /= size_p.sum()
    arrivals: list[PodArrival] = []
    pod_groups: dict[str, int] = {}
    t = 0.0
    for job in range(spec.jobs):
        t += float(rng.exponential(spec.mean_interarrival_s))
        tenant = tenants[int(rng.choice(len(tenants), p=weights))]
        user = f"{tenant}-user{int(rng.integers(spec.users_per_tenant))}"
        priority = int(rng.choice([0, 100, 1000]))
        raw_pods: list[tuple[dict[str, Any], float]] = []
        if rng.random() < spec.training_fraction:
            duration = float(rng.lognormal(np.log(spec.training_median_s), 0.6))
            if rng.random() < spec.gang_fraction:
                members = int(rng.choice([2, 3, 4]))
                group = f"train-{job:04d}"
                pod_groups[f"{tenant}/{group}"] = members
                for m in range(members):
                    raw_pods.append(
                        (
                            _pod(
                                f"{group}-{m}",
                                tenant,
                                user,
                                "training",
                                A100[0],
                                {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"},
                                priority,
                                extra_labels={POD_GROUP: group},
                                annotations={MIN_MEMBER: str(members)},
                            ),
                            duration,
                        )
                    )
            else:
                gpus = int(sizes[int(rng.choice(len(sizes), p=size_p))])
                raw_pods.append(
                    (
                        _pod(
                            f"train-{job:04d}",
                            tenant,
                            user,
                            "training",
                            A100[0],
                            {
                                "cpu": str(4 * gpus),
                                "memory": f"{32 * gpus}Gi",
                                "nvidia.com/gpu": str(gpus),
                            },
                            priority,
                        ),
                        duration,
                    )
                )
        else:
            replicas = int(rng.integers(1, 4))
            duration = float(rng.lognormal(np.log(spec.inference_median_s), 0.5))
            fractional = rng.random() < 0.6
            for r in range(replicas):
                if fractional:
                    cores = int(rng.choice([25, 30, 50]))
                    mem = int(rng.choice([4096, 6144, 8192, 10240]))
                    res = {
                        "cpu": "2",
                        "memory": "8Gi",
                        "nvidia.com/gpu": "1",
                        "nvidia.com/gpucores": str(cores),
                        "nvidia.com/gpumem": str(mem),
                    }
                else:
                    res = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}
                raw_pods.append(
                    (
                        _pod(
                            f"serve-{job:04d}-{r}",
                            tenant,
                            user,
                            "inference",
                            L4[0],
                            res,
                            priority,
                        ),
                        duration,
                    )
                )
        for raw, duration in raw_pods:
            # Declared run time, as batch users give a time limit: lets the engine backfill
            # short work onto capacity reserved for a waiting large job.
            raw["metadata"]["annotations"][ANN_DURATION] = f"{duration:.3f}"
            pod = derive_placement(pod_from_k8s(k8s.decode(raw, k8s.Pod)), pools)
            arrivals.append(PodArrival(pod, round(t, 3), round(duration, 3)))
    gpus = sum(n.gpu_count for n in nodes)
    return Workload(
        name="synthetic",
        nodes=nodes,
        arrivals=arrivals,
        pod_groups=pod_groups,
        description=(
            f"built-in cluster: {len(nodes)} nodes, {gpus} GPUs in training/inference/hybrid "
            f"pools; {spec.jobs} jobs ({len(arrivals)} pods) from {len(tenants)} tenants"
        ),
    )
