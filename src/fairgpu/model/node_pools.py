"""Node pools and derived placement: affinity and tolerations from a workload type and GPU model.

Clusters we serve label and taint every worker with ``<domain>/node.usage`` = ``training``,
``inference`` or ``hybrid`` and taint GPU nodes with ``nvidia.com/gpu.product=<model>``. Writing
the matching affinity and tolerations by hand on every workload is error-prone, so a pod that
carries ``fairgpu.io/workload-type`` (and names a GPU model) gets them derived:

* requires ``node.usage In (<type>, hybrid)`` and prefers ``<type>`` (weight 100);
* tolerates ``node.usage=<type>``, ``node.usage=hybrid`` and ``nvidia.com/gpu.product=<model>``.

So each kind stays in its own pool and overflows into the hybrid pool when its pool is full.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fairgpu.model.pod import DOMAIN, LABEL_WORKLOAD, PodInfo
from fairgpu.model.selectors import NodeSelectorTerm, Requirement, Toleration

WORKLOAD_TYPES = ("training", "inference")
HYBRID = "hybrid"
LABEL_GPU_MODEL = f"{DOMAIN}/gpu-model"


def workload_type(pod: PodInfo) -> str:
    """The pod's ``fairgpu.io/workload-type`` ("" without one)."""
    return pod.labels.get(LABEL_WORKLOAD, "")


@dataclass(frozen=True, slots=True)
class NodePoolConfig:
    """Where the pool label lives and which GPU product label/taint key is used."""

    usage_key: str = "example.com/node.usage"
    product_key: str = "nvidia.com/gpu.product"
    preferred_weight: int = 100


def derive_placement(pod: PodInfo, pools: NodePoolConfig = NodePoolConfig()) -> PodInfo:
    """Return ``pod`` with node-pool affinity and tolerations derived from its workload type.

    Pods without a known ``fairgpu.io/workload-type`` label, and pods that already carry
    required node affinity, are returned unchanged (explicit user intent wins).
    """
    kind = pod.labels.get(LABEL_WORKLOAD, "")
    if kind not in WORKLOAD_TYPES or pod.required_terms is not None:
        return pod
    model = pod.labels.get(LABEL_GPU_MODEL) or pod.annotations.get(LABEL_GPU_MODEL, "")
    if not model and pod.gpu.models is not None and len(pod.gpu.models) == 1:
        model = next(iter(pod.gpu.models))
    required = (NodeSelectorTerm((Requirement(pools.usage_key, "In", (kind, HYBRID)),)),)
    preferred = (
        *pod.preferred_terms,
        (pools.preferred_weight, NodeSelectorTerm((Requirement(pools.usage_key, "In", (kind,)),))),
    )
    tolerations = [
        *pod.tolerations,
        Toleration(pools.usage_key, "Equal", kind, "NoSchedule"),
        Toleration(pools.usage_key, "Equal", HYBRID, "NoSchedule"),
    ]
    if model:
        tolerations.append(Toleration(pools.product_key, "Equal", model, "NoSchedule"))
    gpu = pod.gpu
    if model and gpu.count and gpu.models is None:
        gpu = replace(gpu, models=frozenset({model}))
    return replace(
        pod,
        required_terms=required,
        preferred_terms=preferred,
        tolerations=tuple(tolerations),
        gpu=gpu,
        _static_key=None,
    )
