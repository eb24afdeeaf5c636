"""Which GPUs a bound pod holds, as the live cache accounts them.

The pod's ``fairgpu.io/gpu-devices`` annotation is the record (written with the binding); it is
validated against the node when the node shows GPUs, and kept as it is while the node shows
none. A pod without a usable annotation (bound by another scheduler) is accounted on the
node's least-used devices, so the totals stay right either way.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.model.gpu import WHOLE
from fairgpu.model.pod import PodInfo

__all__ = ["annotation_fits", "least_used", "reapply_devices"]


def annotation_fits(devices: tuple[int, ...], node_gpus: int) -> bool:
    """Can a node showing ``node_gpus`` GPUs hold the annotated ``devices``? Always, while it
    shows none (the devices are kept until they appear); otherwise each must be one of its
    devices, named once."""
    if any(d < 0 for d in devices) or len(set(devices)) != len(devices):
        return False
    return node_gpus == 0 or all(d < node_gpus for d in devices)


def least_used(cluster: ClusterState, pod: PodInfo, idx: int, exclude: str = "") -> tuple[int, ...]:
    """``pod.gpu.count`` devices of node ``idx`` with the most free compute, those that fit
    the pod first, not counting what pod ``exclude`` holds (its own devices win ties)."""
    count = int(cluster.gpu_count[idx])
    free = cluster.device_milli_free[idx, :count].astype(np.int64)
    held = cluster.placements.get(exclude)
    mine: set[int] = set()
    if held is not None and held.node == idx:
        mine = set(held.devices)
        for d in held.devices:
            if 0 <= d < count:
                free[d] += held.device_milli
    gpu = pod.gpu
    need = WHOLE if gpu.is_whole else gpu.milli
    order = sorted(
        range(count), key=lambda d: (-(int(free[d]) >= need), -int(free[d]), d not in mine, d)
    )
    return tuple(sorted(order[: gpu.count]))


def reapply_devices(
    cluster: ClusterState,
    bound: Mapping[str, tuple[str, tuple[int, ...] | None]],
    name: str,
) -> int:
    """Re-read the devices of the pods bound to node ``name`` (``bound``: uid -> (node,
    annotated devices)) after its GPUs changed; returns how many pods moved.

    Annotated pods go first, so the least-used choice for the others avoids the devices the
    annotations name. A victim's remainder keeps its devices: they are the part of its
    annotation its waiting preemptor does not take (:mod:`~fairgpu.engine.lingering`), and
    read again from the annotation they would cover the preemptor's devices twice.
    """
    idx = cluster.node_index.get(name)
    if idx is None:
        return 0
    count = int(cluster.gpu_count[idx])
    moved = 0
    rest = []
    for uid, pod in list(cluster.node_pods[idx].items()):
        where = bound.get(uid)
        if where is None or pod.gpu.count == 0 or cluster.placements[uid].remainder:
            continue
        want = where[1]
        if want is None or not annotation_fits(want, count):
            rest.append(pod)
        elif tuple(sorted(cluster.placements[uid].devices)) != tuple(sorted(want)):
            cluster.set_devices(uid, sorted(want))
            moved += 1
    for pod in rest:
        devs = least_used(cluster, pod, idx, exclude=pod.uid) if count else ()
        if tuple(sorted(cluster.placements[pod.uid].devices)) != devs:
            cluster.set_devices(pod.uid, devs)
            moved += 1
    return moved
