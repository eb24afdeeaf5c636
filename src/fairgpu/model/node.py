"""NodeInfo: what the scheduler knows about one node, decoded once from a v1 Node."""

from __future__ import annotations

from dataclasses import dataclass, field

from fairgpu.api import objects as k8s
from fairgpu.api.errors import InvalidObjectError
from fairgpu.api.quantity import QuantityError
from fairgpu.model.gpu import DEFAULT_NAMES, GpuResourceNames
from fairgpu.model.pod import parse_resource
from fairgpu.model.selectors import Taint

TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})
DEFAULT_GPU_MEMORY_MIB = 16384


@dataclass(slots=True, eq=False)
class NodeInfo:
    """A node's static description: allocatable resources, labels, taints and GPU devices.

    ``allocatable`` excludes GPU resource names; GPUs are ``gpu_count`` devices of
    ``gpu_memory_mib`` each, product ``gpu_model``.
    """

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    allocatable: dict[str, int] = field(default_factory=dict)
    gpu_count: int = 0
    gpu_memory_mib: int = DEFAULT_GPU_MEMORY_MIB
    gpu_model: str = ""
    uid: str = ""


def node_from_k8s(
    node: k8s.Node,
    names: GpuResourceNames = DEFAULT_NAMES,
    default_gpu_memory_mib: int = DEFAULT_GPU_MEMORY_MIB,
) -> NodeInfo:
    """Decode a v1 Node; raises :class:`InvalidObjectError` naming the field at fault."""
    meta = node.metadata
    obj = f"Node {meta.name or '<unnamed>'}"
    if not meta.name:
        raise InvalidObjectError(obj, "metadata.name", "is required")
    source = node.status.allocatable or node.status.capacity
    section = "allocatable" if node.status.allocatable else "capacity"
    allocatable: dict[str, int] = {}
    for rname, value in source.items():
        try:
            allocatable[rname] = parse_resource(rname, value)
        except QuantityError as error:
            raise InvalidObjectError(obj, f"status.{section}.{rname}", str(error)) from None
    gpu_count = allocatable.pop(names.gpu, 0)
    for rname in names.all_request_names():
        allocatable.pop(rname, None)
    taints = []
    for i, t in enumerate(node.spec.taints):
        if t.effect not in TAINT_EFFECTS:
            raise InvalidObjectError(obj, f"spec.taints[{i}].effect", f"unknown {t.effect!r}")
        taints.append(Taint(t.key, t.value, t.effect))
    memory = default_gpu_memory_mib
    label = meta.labels.get(names.memory_label)
    if label:
        try:
            memory = int(label)
        except ValueError:
            raise InvalidObjectError(
                obj, f"metadata.labels[{names.memory_label}]", f"{label!r} is not MiB"
            ) from None
    return NodeInfo(
        name=meta.name,
        labels=dict(meta.labels),
        taints=tuple(taints),
        unschedulable=node.spec.unschedulable,
        allocatable=allocatable,
        gpu_count=gpu_count,
        gpu_memory_mib=memory,
        gpu_model=meta.labels.get(names.product_label, ""),
        uid=meta.uid,
    )
