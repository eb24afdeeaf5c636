"""GPU requests: whole devices, a fraction of one device, or MIG slices.

Resource names are configurable (:class:`GpuResourceNames`) and default to the names NVIDIA's
device plugin and HAMi use. A GPU ask is normalised to ``count`` devices each needing
``milli`` thousandths of compute (1000 = a whole device) and ``memory_mib`` of device memory
(0 = no memory constraint; a whole device always takes all of its memory). Accepted forms:

* ``nvidia.com/gpu: N`` -- N whole devices;
* ``nvidia.com/gpucores: P`` (percent, 1% granularity) and/or ``nvidia.com/gpumem: MiB`` /
  ``nvidia.com/gpumem-percentage: P`` -- a share of one device (``nvidia.com/gpu`` absent or
  1), or of each of ``nvidia.com/gpu: N`` distinct devices (HAMi's N virtual GPUs, each on
  its own physical GPU); ``fairgpu.io/gpu-milli`` (the openb trace's ``gpu_milli``) is the
  same in milli-GPU.

MIG
---
*Mixed strategy*: the device plugin advertises one resource per profile,
``nvidia.com/mig-<profile>`` (e.g. ``nvidia.com/mig-1g.5gb: 7``). These are *not* GPU names of
this module: they stay plain extended resources, counted per node by the generic resource
columns of the cluster state and checked by ``NodeResourcesFit`` like any other resource
(:func:`mig_profile` recognises them). *Single strategy*: every GPU of the node is cut into
identical slices and ``nvidia.com/gpu`` counts *slices*; the node's ``nvidia.com/gpu.product``
label ends in ``-MIG-<profile>`` (GPU feature discovery) and ``nvidia.com/mig.strategy`` is
``single``. Such a node is modelled as ``gpu_count`` = number of slices, each slice one device
(so the cluster's ``max_devices`` must cover the slice count); a pod asking ``nvidia.com/gpu: N``
gets N whole slices. Slices cannot be time-shared: the ``GpuFit`` filter never places a share
on a MIG single-strategy node, :func:`check_gpu_request` (run by the ``GpuRequestCheck``
pre-filter) reports a share that only such nodes could serve and mixed-strategy asks no node
can meet as unresolvable, and :func:`gpu_request_from` refuses a share asked together with
``nvidia.com/mig-*`` slices.

Device assignment annotation
----------------------------
The devices chosen for a pod are written to the pod annotation ``fairgpu.io/gpu-devices``
(:data:`ANN_GPU_DEVICES`) for the node agent. Format: comma-separated entries, one per device,
in ascending device index order::

    "0,1"              whole devices 0 and 1 (all compute and memory of each)
    "2:300m"           30% of device 2's compute, no memory limit
    "2:300m/4096Mi"    30% of device 2's compute and 4096 MiB of its memory

The index is the device's position in the node's device list (the order of the device
plugin's ``nvidia.com/gpu`` devices, i.e. ``nvidia-smi`` index). :func:`encode_gpu_devices`
writes it and :func:`decode_gpu_devices` reads it back (raising ``ValueError`` naming the bad
entry).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the cluster and pod modules import this one
    from fairgpu.cluster.state import ClusterState
    from fairgpu.model.node import NodeInfo
    from fairgpu.model.pod import PodInfo

WHOLE = 1000
ANN_GPU_DEVICES = "fairgpu.io/gpu-devices"
MIG_PREFIX = "nvidia.com/mig-"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"


@dataclass(frozen=True, slots=True)
class GpuResourceNames:
    """The resource names through which pods ask for GPUs and nodes advertise them."""

    gpu: str = "nvidia.com/gpu"
    cores_percent: str = "nvidia.com/gpucores"
    memory_mib: str = "nvidia.com/gpumem"
    memory_percent: str = "nvidia.com/gpumem-percentage"
    milli: str = "fairgpu.io/gpu-milli"
    product_label: str = "nvidia.com/gpu.product"
    memory_label: str = "nvidia.com/gpu.memory"
    count_label: str = "nvidia.com/gpu.count"

    def all_request_names(self) -> frozenset[str]:
        """Names consumed by the GPU model rather than treated as plain extended resources."""
        return frozenset(
            {self.gpu, self.cores_percent, self.memory_mib, self.memory_percent, self.milli}
        )


DEFAULT_NAMES = GpuResourceNames()


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """``count`` devices, each with ``milli`` compute and ``memory_mib`` (or ``memory_percent``)."""

    count: int = 0
    milli: int = WHOLE
    memory_mib: int = 0
    memory_percent: int = 0
    models: frozenset[str] | None = None

    @property
    def is_whole(self) -> bool:
        """True for whole-device asks (no compute or memory fraction)."""
        return self.milli >= WHOLE and self.memory_mib == 0 and self.memory_percent in (0, 100)

    @property
    def is_shared(self) -> bool:
        """True for an ask for part of a device (of each of ``count`` distinct devices)."""
        return self.count > 0 and not self.is_whole

    @property
    def total_milli(self) -> int:
        """Compute asked across devices, in milli-GPU."""
        return self.count * self.milli


NO_GPU = GpuRequest()


def gpu_request_from(
    requests: dict[str, int], names: GpuResourceNames, models: frozenset[str] | None
) -> GpuRequest:
    """Build a :class:`GpuRequest` from a pod's effective requests.

    Raises ``ValueError`` for asks no device can meet: cores above 100%, negative values, a
    fraction together with MIG slices (mixed strategy ``nvidia.com/mig-*``: a share would be a
    share of a slice).
    """
    count = requests.get(names.gpu, 0)
    cores = requests.get(names.cores_percent)
    mem = requests.get(names.memory_mib, 0)
    mem_pct = requests.get(names.memory_percent, 0)
    milli = requests.get(names.milli)
    for label, value in (
        (names.gpu, count),
        (names.cores_percent, cores or 0),
        (names.memory_mib, mem),
        (names.memory_percent, mem_pct),
        (names.milli, milli or 0),
    ):
        if value < 0:
            raise ValueError(f"{label}: must not be negative (got {value})")
    if cores is not None and cores > 100:
        raise ValueError(f"{names.cores_percent}: {cores}% is more than one whole GPU (max 100)")
    if mem_pct > 100:
        raise ValueError(f"{names.memory_percent}: {mem_pct}% is more than one GPU (max 100)")
    if milli is not None and milli > WHOLE:
        raise ValueError(f"{names.milli}: {milli} is more than one whole GPU (max {WHOLE})")
    fraction_asked = (
        (cores is not None and cores < 100)
        or mem > 0
        or 0 < mem_pct < 100
        or (milli is not None and milli < WHOLE)
    )
    if fraction_asked or cores or milli:
        _refuse_shared_mig(requests, names, cores, mem, mem_pct)
    if count == 0 and (fraction_asked or cores or milli):
        count = 1  # a compute or memory share implies one device, as in HAMi
    if count == 0:
        return NO_GPU if models is None else GpuRequest(models=models)
    if milli is None:
        milli = WHOLE if cores is None else cores * 10
    return GpuRequest(count, milli, mem, mem_pct if mem_pct < 100 else 0, models)


def _refuse_shared_mig(
    requests: dict[str, int], names: GpuResourceNames, cores: int | None, mem: int, mem_pct: int
) -> None:
    # A share together with a MIG slice would be a share *of the slice*, and slices cannot be
    # time-shared (the device plugin hands out whole slices only).
    slices = sorted(r for r, v in requests.items() if v > 0 and mig_profile(r) is not None)
    if not slices:
        return
    share = (
        names.cores_percent
        if cores is not None
        else names.memory_mib
        if mem
        else names.memory_percent
        if mem_pct
        else names.milli
    )
    raise ValueError(
        f"{share}: a share of a GPU cannot be combined with MIG slices ({', '.join(slices)}); "
        "MIG slices cannot be shared: ask whole slices only"
    )


# ---- MIG ----------------------------------------------------------------------------------
def mig_profile(resource: str) -> str | None:
    """The MIG profile of a mixed-strategy resource name (``nvidia.com/mig-1g.5gb`` -> ``1g.5gb``).

    None for any other name. Mixed-strategy MIG resources are plain extended resources.
    """
    if resource.startswith(MIG_PREFIX) and len(resource) > len(MIG_PREFIX):
        return resource[len(MIG_PREFIX) :]
    return None


def is_mig_single(labels: dict[str, str], names: GpuResourceNames = DEFAULT_NAMES) -> bool:
    """True for a node whose ``nvidia.com/gpu`` devices are MIG slices (single strategy)."""
    if labels.get(MIG_STRATEGY_LABEL) == "single":
        return True
    return "-MIG-" in labels.get(names.product_label, "")


# ---- device assignment annotation ---------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DeviceShare:
    """What a pod holds on one device: ``milli`` compute (1000 = whole) and ``memory_mib``.

    ``whole`` entries hold the entire device (compute and memory).
    """

    index: int
    milli: int = WHOLE
    memory_mib: int = 0
    whole: bool = True


def encode_gpu_devices(devices: Iterable[int], milli: int = WHOLE, memory_mib: int = 0) -> str:
    """The ``fairgpu.io/gpu-devices`` value for a placement (see the module docstring).

    ``milli >= 1000`` with no ``memory_mib`` writes whole devices (``"0,1"``); otherwise each
    device gets ``"<index>:<milli>m[/<memory>Mi]"``.
    """
    idx = sorted(int(d) for d in devices)
    if any(d < 0 for d in idx):
        raise ValueError(f"{ANN_GPU_DEVICES}: negative device index in {idx}")
    if milli >= WHOLE and memory_mib <= 0:
        return ",".join(str(d) for d in idx)
    if milli <= 0 or milli > WHOLE:
        raise ValueError(f"{ANN_GPU_DEVICES}: share {milli}m is outside 1..{WHOLE}")
    suffix = f"/{memory_mib}Mi" if memory_mib > 0 else ""
    return ",".join(f"{d}:{milli}m{suffix}" for d in idx)


def decode_gpu_devices(text: str) -> list[DeviceShare]:
    """Parse a ``fairgpu.io/gpu-devices`` value; ``ValueError`` names the malformed entry."""
    out: list[DeviceShare] = []
    if not text.strip():
        return out
    for raw in text.split(","):
        entry = raw.strip()
        index_text, sep, share = entry.partition(":")
        try:
            index = int(index_text, 10)
        except ValueError:
            raise ValueError(f"{ANN_GPU_DEVICES}: bad device index in entry {entry!r}") from None
        if index < 0:
            raise ValueError(f"{ANN_GPU_DEVICES}: negative device index in entry {entry!r}")
        if not sep:
            out.append(DeviceShare(index))
            continue
        compute, slash, memory = share.partition("/")
        try:
            if not compute.endswith("m"):
                raise ValueError
            milli = int(compute[:-1], 10)
            mem = 0
            if slash:
                if not memory.endswith("Mi"):
                    raise ValueError
                mem = int(memory[:-2], 10)
        except ValueError:
            raise ValueError(
                f"{ANN_GPU_DEVICES}: entry {entry!r} is not <index>:<milli>m[/<MiB>Mi]"
            ) from None
        if not 0 < milli <= WHOLE or mem < 0:
            raise ValueError(f"{ANN_GPU_DEVICES}: entry {entry!r} asks an impossible share")
        out.append(DeviceShare(index, milli, mem, whole=False))
    seen = [d.index for d in out]
    if len(set(seen)) != len(seen):
        raise ValueError(f"{ANN_GPU_DEVICES}: device listed twice in {text!r}")
    return out


# ---- validation (shared with the admission webhook) ---------------------------------------
def _nodes_of(cluster_or_nodes: ClusterState | Iterable[NodeInfo]) -> list[NodeInfo]:
    active = getattr(cluster_or_nodes, "active_nodes", None)
    if active is not None:
        return [node for _, node in active()]
    return list(cluster_or_nodes)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class GpuLimits:
    """The most a set of nodes can offer any GPU ask (what :func:`check_gpu_request` reads).

    ``by_model``: GPU product -> (most devices on one node, largest device memory in MiB,
    True if every node of that product is MIG single-strategy); ``mig``: mixed-strategy MIG
    resource -> most instances one node advertises; ``nodes``: how many nodes were summed.
    Built once per change of the node set (:func:`gpu_limits`), so checking a pod never
    loops over nodes.
    """

    by_model: dict[str, tuple[int, int, bool]]
    mig: dict[str, int]
    nodes: int
    names: GpuResourceNames = DEFAULT_NAMES


def gpu_limits(
    cluster_or_nodes: ClusterState | Iterable[NodeInfo], names: GpuResourceNames = DEFAULT_NAMES
) -> GpuLimits:
    """Summarise nodes (or a cluster's active nodes) for :func:`check_gpu_request`."""
    by_model: dict[str, tuple[int, int, bool]] = {}
    mig: dict[str, int] = {}
    nodes = _nodes_of(cluster_or_nodes)
    for node in nodes:
        for rname, amount in node.allocatable.items():
            if amount > 0 and mig_profile(rname) is not None:
                mig[rname] = max(mig.get(rname, 0), amount)
        if node.gpu_count <= 0:
            continue
        single = is_mig_single(node.labels, names)
        most, memory, all_single = by_model.get(node.gpu_model, (0, 0, True))
        by_model[node.gpu_model] = (
            max(most, node.gpu_count),
            max(memory, node.gpu_memory_mib),
            all_single and single,
        )
    return GpuLimits(by_model, mig, len(nodes), names)


def _mig_problems(pod: PodInfo, limits: GpuLimits) -> list[str]:
    """Mixed-strategy MIG asks no node can ever meet: an unknown profile, too many slices."""
    problems = []
    for rname, amount in sorted(pod.requests.items()):
        profile = mig_profile(rname)
        if profile is None or amount <= 0:
            continue
        most = limits.mig.get(rname, 0)
        if most == 0:
            offered = ", ".join(sorted(m[len(MIG_PREFIX) :] for m in limits.mig)) or "none"
            problems.append(
                f"{rname}: no node offers MIG profile {profile} (profiles offered: {offered})"
            )
        elif amount > most:
            problems.append(
                f"{rname}: {amount} MIG {profile} instance(s) asked, no node has more than {most}"
            )
    return problems


def _ask_problems(gpu: GpuRequest, names: GpuResourceNames) -> list[str]:
    """Asks no device can meet whatever the cluster (normally refused when decoding)."""
    problems = []
    if gpu.milli <= 0 or gpu.milli > WHOLE:
        problems.append(f"{names.cores_percent}: {gpu.milli / 10:g}% is outside 1..100 (one GPU)")
    if gpu.count < 0:
        problems.append(f"{names.gpu}: must not be negative (got {gpu.count})")
    if gpu.memory_percent < 0 or gpu.memory_percent > 100:
        problems.append(f"{names.memory_percent}: {gpu.memory_percent}% is outside 0..100")
    return problems


def check_gpu_request(pod: PodInfo, limits: GpuLimits) -> list[str]:
    """Problems that make the pod's GPU ask impossible on the nodes ``limits`` sums up.

    Checks: the ask itself (compute above one GPU, negative values), an unknown GPU model,
    more devices than any allowed node has (a share of several devices included), memory
    above every allowed device, a share that only MIG single-strategy nodes could serve
    (slices cannot be time-shared), and mixed-strategy MIG profiles no node advertises or not
    in the number asked. Each message starts with the resource (or field) at fault. Empty if
    none; also empty for an empty cluster (nothing is known yet).
    """
    if pod.error:
        return [pod.error]
    gpu = pod.gpu
    names = limits.names
    problems = _ask_problems(gpu, names)
    if limits.nodes == 0:
        return problems
    problems += _mig_problems(pod, limits)
    if gpu.count <= 0:
        return problems
    present = limits.by_model
    if gpu.models is not None:
        allowed = [v for m, v in present.items() if m in gpu.models]
        where = f"with GPU model {'|'.join(sorted(gpu.models))}"
        if not allowed:
            wanted = "|".join(sorted(gpu.models))
            have = "|".join(sorted(m for m in present if m)) or "none"
            problems.append(f"GPU model {wanted} is not in the cluster (have {have})")
            return problems
    else:
        allowed = list(present.values())
        where = ""
    if not allowed:
        problems.append(f"{names.gpu}: no node in the cluster has GPUs")
        return problems
    most = max(v[0] for v in allowed)
    if gpu.count > most:
        node = f"no node {where}" if where else "no node"
        problems.append(f"{gpu.count} GPUs asked ({names.gpu}), but {node} has more than {most}")
    biggest = max(v[1] for v in allowed)
    if gpu.memory_mib > biggest:
        problems.append(
            f"{names.memory_mib}: {gpu.memory_mib} MiB of GPU memory asked, "
            f"largest GPU has {biggest}"
        )
    if gpu.is_shared and all(v[2] for v in allowed):
        problems.append(
            f"{share_field(gpu, names)}: a share of a GPU, but every GPU node"
            f"{' ' + where if where else ''} has only MIG slices (single strategy), "
            "which cannot be shared; ask whole GPUs"
        )
    return problems


def share_field(gpu: GpuRequest, names: GpuResourceNames = DEFAULT_NAMES) -> str:
    """The resource name through which ``gpu`` asks for a share (for messages)."""
    if gpu.memory_mib:
        return names.memory_mib
    if gpu.memory_percent:
        return names.memory_percent
    return names.cores_percent


def validate_gpu_request(
    pod: PodInfo, cluster_or_nodes: ClusterState | Iterable[NodeInfo]
) -> list[str]:
    """Problems that make the pod's GPU ask impossible in this cluster; empty if none.

    :func:`check_gpu_request` over :func:`gpu_limits` of the nodes: reusable by an admission
    webhook, since it reads only the pod and the node descriptions. The scheduler's
    ``GpuRequestCheck`` pre-filter runs the same check with the limits cached per node change.
    """
    return check_gpu_request(pod, gpu_limits(cluster_or_nodes))


REPLICAS_LABEL = "nvidia.com/gpu.replicas"


def device_sharing_problem(node: NodeInfo, names: GpuResourceNames = DEFAULT_NAMES) -> str | None:
    """Why GPU shares on ``node`` would not work as booked, from what the node says; or None.

    fairgpu counts a node's devices from its allocatable ``nvidia.com/gpu`` and books shares
    on them, while the kubelet admits a pod only if the ``nvidia.com/gpu`` units requested on
    the node fit allocatable. The physical count is known only from GPU feature discovery's
    ``nvidia.com/gpu.count`` label (and ``nvidia.com/gpu.replicas``, set by time-slicing);
    without that label nothing can be said honestly and None is returned. Meant to be
    reported once per node when a share is first placed there: a cluster that never shares
    GPUs has nothing to fix.

    * allocatable equals the physical count: the device plugin advertises no virtual devices,
      so once the pods requesting ``nvidia.com/gpu`` there outnumber the GPUs (shares asked
      as ``nvidia.com/gpu: 1`` plus ``gpucores``), the kubelet rejects the next one;
    * allocatable is larger (HAMi ``deviceSplitCount``, NVIDIA time-slicing ``replicas``):
      fairgpu would count the virtual devices as GPUs and hand them out as whole devices.
    """
    if node.gpu_count <= 0:
        return None
    label = node.labels.get(names.count_label, "")
    try:
        physical = int(label, 10)
    except ValueError:
        return None
    if physical <= 0:
        return None
    if node.gpu_count == physical:
        return (
            f"Node {node.name}: allocatable {names.gpu} ({node.gpu_count}) equals its physical "
            f"GPU count (label {names.count_label}): the kubelet admits at most "
            f"{node.gpu_count} pods requesting {names.gpu} there, so GPU shares that request "
            f"{names.gpu}: 1 beyond that are rejected; enable virtual devices in the device "
            "plugin (see docs/running-on-a-cluster.md) or do not share GPUs on this node"
        )
    if node.gpu_count > physical:
        replicas = node.labels.get(REPLICAS_LABEL)
        how = f" (label {REPLICAS_LABEL}: {replicas})" if replicas else ""
        return (
            f"Node {node.name}: allocatable {names.gpu} ({node.gpu_count}) is more than its "
            f"physical GPU count ({physical}, label {names.count_label}){how}: fairgpu counts "
            f"{node.gpu_count} devices there and books whole GPUs and shares on virtual ones"
        )
    return None


def describe_request(gpu: GpuRequest) -> dict[str, Any]:
    """A JSON-friendly summary of a GPU ask (for reports and webhook messages)."""
    return {
        "count": gpu.count,
        "milli": gpu.milli,
        "memory_mib": gpu.memory_mib,
        "memory_percent": gpu.memory_percent,
        "models": sorted(gpu.models) if gpu.models else None,
    }
