"""Lingering victims: what an evicted pod still holds while it terminates.

In the simulator an evicted pod is gone at once. On a real node it is not: its Eviction starts
a graceful deletion, and until the kubelet reports it gone it keeps its CPU, memory and GPU
devices (kube-scheduler counts a terminating pod in full). The engine releases a victim so that
its preemptor fits, and the preemptor is assumed there at once, holding the room it takes
until its victims are gone. Whatever the victims hold *beyond* what their preemptor takes --
a 2-GPU victim for a 1-GPU preemptor, a gang member on another node, more CPU than the
preemptor asks -- would look free to every pod placed afterwards, in the same cycle or the
next, and a pod bound there would share a device with a pod still running on it.

So, where victims linger (the live adapter sets ``Engine.victims_linger``), each victim is put
back at once as its *remainder*: the same uid, bound and terminating (never a victim again),
holding what the pods placed in its room do not take. Those are every pod the preemption's
statement placed on the victim's node -- the preemptor, and a pod group's other members, which
may land on GPUs a torn-down group's member still holds -- and each of them waits for the
statement's victims before its bind is posted
(:meth:`~fairgpu.engine.statement.Statement.commit`). For node resources the remainder is,
victim by victim in eviction order, what the victims ask beyond what those pods ask; for each
GPU device, the compute and memory the victims hold there beyond those pods' share of it. A
new pod then fits only where it fits beside the victims now *and* beside those pods later.
(One victim's devices all get its largest remainder: exact for whole GPUs, on the safe side
otherwise.) The adapter forgets the remainder when the victim is gone, and puts the whole
victim back when its preemptor gives up. The queue book counts a remainder as it counts every
terminating pod, from the moment it is put back: a queue's quota or limit, or its department's,
is not free for another pod while the victim still holds it in the API. Devices a victim
holds through DRA claims stay held too, whole: a claim is free only once every pod it is
reserved for has left the cluster state, and the remainder keeps the victim's uid there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from fairgpu.cluster.state import ClusterState, Placement
from fairgpu.model.gpu import NO_GPU, WHOLE, GpuRequest
from fairgpu.model.pod import PodInfo

__all__ = ["hold_remainders", "put_back"]


def _remainder_pod(
    victim: PodInfo, requests: dict[str, int], devices: int, milli: int, memory_mib: int
) -> PodInfo:
    """``victim`` as the part of it that lingers: ``requests`` of node resources and
    ``devices`` GPUs of ``milli`` compute and ``memory_mib`` memory each (0: the whole
    device's memory, for a whole GPU)."""
    if devices and milli >= WHOLE and memory_mib == 0:
        gpu = GpuRequest(devices)
    elif devices:
        gpu = GpuRequest(devices, milli, memory_mib)
    else:
        gpu = NO_GPU
    return replace(
        victim,
        requests=requests,
        scoring_requests=(requests.get("cpu", 0), requests.get("memory", 0)),
        nonzero_requests=None,
        gpu=gpu,
        resource_claims=(),
        _static_key=None,
    )


def hold_remainders(
    cluster: ClusterState,
    victims: Sequence[tuple[PodInfo, Placement]],
    taken: Sequence[tuple[PodInfo, Placement]],
) -> list[PodInfo]:
    """Put back, as terminating remainders, what ``victims`` (each with the placement it had)
    hold beyond what the pods of ``taken`` -- placed where their placements say, waiting for
    the victims on their nodes -- take there (see the module docstring); returns the
    remainders put back. Victims already placed are left alone."""
    take: dict[int, dict[str, int]] = {}
    milli: dict[int, dict[int, int]] = {}
    memory: dict[int, dict[int, int]] = {}
    for pod, placed in taken:
        asks = take.setdefault(placed.node, {})
        for name, amount in pod.requests.items():
            asks[name] = asks.get(name, 0) + amount
        on_milli = milli.setdefault(placed.node, {})
        on_memory = memory.setdefault(placed.node, {})
        for d in placed.devices:
            on_milli[d] = on_milli.get(d, 0) + placed.device_milli
            on_memory[d] = on_memory.get(d, 0) + placed.device_memory
    back: list[PodInfo] = []
    for victim, where in victims:
        if victim.uid in cluster.placements or not cluster.active[where.node]:
            continue
        asks = take.setdefault(where.node, {})
        rest = {}
        for name, amount in victim.requests.items():
            covered = min(amount, asks.get(name, 0))
            asks[name] = asks.get(name, 0) - covered
            rest[name] = amount - covered
        devices, rest_milli, rest_memory = _device_remainder(
            where, milli.setdefault(where.node, {}), memory.setdefault(where.node, {})
        )
        whole = rest_milli >= WHOLE and rest_memory >= _device_memory(cluster, where)
        pod = _remainder_pod(victim, rest, len(devices), rest_milli, 0 if whole else rest_memory)
        put_back(cluster, pod, replace(where, devices=devices))
        back.append(pod)
    return back


def put_back(cluster: ClusterState, remainder: PodInfo, where: Placement) -> None:
    """Place ``remainder`` (what a victim holds beyond its preemptor's room) at ``where``'s
    node and devices, from its start, as a terminating remainder."""
    held = cluster.assign(remainder, where.node, where.devices, started=where.started)
    held.remainder = True
    cluster.mark_terminating(remainder.uid, True)


def _device_memory(cluster: ClusterState, where: Placement) -> int:
    """The memory (MiB) of the victim's first device (0 without devices)."""
    if not where.devices:
        return 0
    return int(cluster.device_memory_total[where.node, where.devices[0]])


def _device_remainder(
    where: Placement, milli: dict[int, int], memory: dict[int, int]
) -> tuple[tuple[int, ...], int, int]:
    """The victim's devices the preemptor does not wholly cover, with the largest compute
    and memory left on any of them; ``milli``/``memory`` (the preemptor's per device) are
    reduced by what this victim covered."""
    left: list[int] = []
    most_milli = most_memory = 0
    for d in sorted(where.devices):
        m = max(0, where.device_milli - milli.get(d, 0))
        mem = max(0, where.device_memory - memory.get(d, 0))
        milli[d] = max(0, milli.get(d, 0) - where.device_milli)
        memory[d] = max(0, memory.get(d, 0) - where.device_memory)
        if m or mem:
            left.append(d)
            most_milli, most_memory = max(most_milli, m), max(most_memory, mem)
    return tuple(left), most_milli, most_memory
