"""NodeInfo: what the scheduler knows about one node, decoded once from a v1 Node.

A field read only for GPU detail (the ``nvidia.com/gpu.memory`` label, the amounts of GPU
resource names) never costs the node: a value that cannot be read falls back (the configured
default memory, no GPUs of that kind), the problem is recorded in :attr:`NodeInfo.problems`
for the caller to report once, and labels stay plain labels for affinity. Fields every pod
depends on (name, cpu/memory/pods amounts, taint effects) still make the node invalid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    ``gpu_memory_mib`` each, product ``gpu_model``. ``problems`` lists GPU-detail and image
    fields that could not be read and were replaced by a fallback, each naming the node and
    the field.
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
    problems: tuple[NodeProblem, ...] = ()
    # status.images: each image's names and size in bytes (image locality scores them).
    images: tuple[NodeImage, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeImage:
    """One entry of a Node's ``status.images``: the names it is known by, its size."""

    names: tuple[str, ...]
    size_bytes: int


@dataclass(frozen=True, slots=True)
class NodeProblem:
    """A field of a Node read only for GPU detail or a score (its images) that could not be
    read; ``message`` says what was used instead."""

    field: str
    message: str

    def __str__(self) -> str:
        return self.message


def node_from_k8s(
    node: k8s.Node,
    names: GpuResourceNames = DEFAULT_NAMES,
    default_gpu_memory_mib: int = DEFAULT_GPU_MEMORY_MIB,
) -> NodeInfo:
    """Decode a v1 Node; raises :class:`InvalidObjectError` naming the field at fault.

    A field read only for GPU detail never raises: it falls back and is listed in
    ``NodeInfo.problems`` (``default_gpu_memory_mib`` is the per-GPU memory used then, and for
    nodes without the memory label).
    """
    meta = node.metadata
    obj = f"Node {meta.name or '<unnamed>'}"
    if not meta.name:
        raise InvalidObjectError(obj, "metadata.name", "is required")
    problems: list[NodeProblem] = []
    allocatable = _allocatable(node, names, obj, problems)
    gpu_count = allocatable.pop(names.gpu, 0)
    taints = []
    for i, t in enumerate(node.spec.taints):
        if t.effect not in TAINT_EFFECTS:
            raise InvalidObjectError(obj, f"spec.taints[{i}].effect", f"unknown {t.effect!r}")
        taints.append(Taint(t.key, t.value, t.effect))
    memory = _gpu_memory(meta.labels, names, default_gpu_memory_mib, obj, problems)
    images = _images(node.status.images, obj, problems)
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
        problems=tuple(problems),
        images=images,
    )


def _images(entries: list[Any], obj: str, problems: list[NodeProblem]) -> tuple[NodeImage, ...]:
    """``status.images``, read only to score image locality: an entry without a list of
    name strings and a whole, non-negative ``sizeBytes`` is left out and recorded in
    ``problems`` (the node itself is kept)."""
    out: list[NodeImage] = []
    for i, entry in enumerate(entries):
        names = entry.get("names") if isinstance(entry, dict) else None
        size = entry.get("sizeBytes", 0) if isinstance(entry, dict) else None
        if (
            isinstance(names, list)
            and all(isinstance(n, str) for n in names)
            and isinstance(size, int)
            and not isinstance(size, bool)
            and size >= 0
        ):
            out.append(NodeImage(tuple(names), size))
            continue
        where = f"status.images[{i}]"
        problems.append(
            NodeProblem(where, f"{obj}: {where}: not a list of names and a sizeBytes; ignored")
        )
    return tuple(out)


def _allocatable(
    node: k8s.Node, names: GpuResourceNames, obj: str, problems: list[NodeProblem]
) -> dict[str, int]:
    """The node's allocatable amounts (capacity if none), GPU request names left out except
    ``names.gpu``; an unreadable GPU amount counts as none and is recorded in ``problems``."""
    source = node.status.allocatable or node.status.capacity
    section = "allocatable" if node.status.allocatable else "capacity"
    gpu_names = names.all_request_names()
    allocatable: dict[str, int] = {}
    for rname, value in source.items():
        if rname in gpu_names and rname != names.gpu:
            continue  # request names of the GPU model: never node resources
        try:
            allocatable[rname] = parse_resource(rname, value)
        except QuantityError as error:
            where = f"status.{section}.{rname}"
            if rname != names.gpu:
                raise InvalidObjectError(obj, where, str(error)) from None
            problems.append(NodeProblem(where, f"{obj}: {where}: {error}; counted as no GPUs"))
    return allocatable


def _gpu_memory(
    labels: dict[str, str],
    names: GpuResourceNames,
    default_mib: int,
    obj: str,
    problems: list[NodeProblem],
) -> int:
    """Per-GPU memory (MiB) from the GPU feature discovery label, else ``default_mib``.

    The label is whole MiB (``"81920"``); anything else (``"16Gi"``, ``"x1"``, ``"0"``) falls
    back to the default and is recorded in ``problems``.
    """
    label = labels.get(names.memory_label)
    if not label:
        return default_mib
    memory = int(label) if label.isascii() and label.isdigit() else 0
    if memory > 0:
        return memory
    where = f"metadata.labels[{names.memory_label}]"
    problems.append(
        NodeProblem(
            where,
            f"{obj}: {where}: {label!r} is not a positive whole number of MiB; "
            f"using the default {default_mib} MiB per GPU",
        )
    )
    return default_mib
