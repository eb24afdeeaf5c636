"""Large jobs: capacity reservations, drain estimates and backfill masks.

(The transaction that places a pod group all-or-nothing is :mod:`fairgpu.engine.statement`;
when reservations are made and dropped is :mod:`fairgpu.engine.actions.reserve`.)

:class:`Reservation` holds nodes for a large job (many whole GPUs, or a big gang) that has
waited too long at the head of fair order: while it exists, other pods may use those nodes only
if they cannot delay the job (backfill): pods without GPUs that leave the job's CPU and memory
free, or pods whose declared run time ends before the job is expected to start (when the last
of its nodes has room for the members it is to hold).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np

from fairgpu.cluster.state import (
    COL_CPU,
    COL_GPU_MILLI,
    COL_MEMORY,
    ClusterState,
)
from fairgpu.model.gpu import WHOLE
from fairgpu.model.pod import ANN_DURATION, CPU, MEMORY, PodInfo


def declared_runtime(pod: PodInfo) -> float | None:
    """The longest a pod runs by what it declares: its ``fairgpu.io/duration-seconds``, at
    most its ``spec.activeDeadlineSeconds`` (the kubelet fails it then); None when it
    declares neither. Parsed once per pod object (backfill, drain and victim costs ask it for
    every pod in every cycle)."""
    got = pod._declared
    if got is None:
        got = pod._declared = (shorter(annotated_runtime(pod), pod.active_deadline),)
    return got[0]


def annotated_runtime(pod: PodInfo) -> float | None:
    """The run time ``pod``'s ``fairgpu.io/duration-seconds`` declares, or None."""
    return _parse_runtime(pod.annotations.get(ANN_DURATION))


def shorter(a: float | None, b: float | None) -> float | None:
    """The smaller of two optional times (None: unknown, so the other one)."""
    if a is None:
        return b
    return a if b is None else min(a, b)


def _parse_runtime(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value >= 0 and math.isfinite(value) else None


@dataclass(slots=True)
class Reservation:
    """Nodes held for job ``key`` of ``queue`` since ``since``.

    ``cpu``/``memory`` are what the job needs per reserved node; backfill must leave them.
    ``drain``: the latest time its nodes were expected to drain, over its life so far.
    """

    key: str
    queue: str
    nodes: np.ndarray
    since: float
    cpu: float = 0.0
    memory: float = 0.0
    node_names: list[str] = field(default_factory=list)
    drain: float = 0.0
    # The job's member and how many members each of ``nodes`` is to hold: a node is then
    # waited for until it has room for those (:func:`~fairgpu.engine.victim_cost.room_times`),
    # not until its last pod ends. None: until it is empty.
    member: PodInfo | None = None
    slots: np.ndarray | None = None
    # When each node has that room, by what it was computed from (node and its version,
    # members, learned run times, the grace after which an overdue pod's declaration stops
    # counting, cluster), and until when that holds (the next pod there to pass that mark):
    # a cycle asks it three times, and most nodes do not change from one cycle to the next.
    room: dict[tuple[float, ...], tuple[float, float]] = field(
        default_factory=dict, repr=False, compare=False
    )
    # The pods on ``nodes`` when the hold began: there before it, whatever their start time
    # (a pod placed earlier in the cycle that made the reservation has its time stamp).
    present: frozenset[str] = field(default_factory=frozenset, repr=False, compare=False)


def members_per_node(pod: PodInfo, cluster: ClusterState, mask: np.ndarray) -> np.ndarray:
    """How many copies of ``pod`` each node could hold when empty (0 where masked out)."""
    n = cluster.size
    alloc = cluster.allocatable[:n]
    fits = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    gpu = pod.gpu
    if gpu.count:
        if gpu.is_whole:
            fits = np.minimum(fits, cluster.gpu_count[:n] // gpu.count)
        else:
            # A share of several devices takes its part of that many (an upper bound).
            fits = np.minimum(fits, alloc[:, COL_GPU_MILLI] // (max(1, gpu.milli) * gpu.count))
    for col, need in (
        (COL_CPU, pod.requests.get(CPU, 0)),
        (COL_MEMORY, pod.requests.get(MEMORY, 0)),
    ):
        if need > 0:
            fits = np.minimum(fits, alloc[:, col] // need)
    fits = np.where(mask, fits, 0)
    return np.minimum(fits, 1 << 20)


# A member's place: (when it has room, -idle GPUs, -free CPU, node rank, node, k-th place).
Place = tuple[float, int, float, int, int, int]


def reservation_places(
    pods: list[PodInfo],
    cluster: ClusterState,
    static_mask: Callable[[PodInfo], np.ndarray],
    taken: np.ndarray,
    rank: np.ndarray,
    room: Callable[[int, int], list[float]],
) -> list[Place] | None:
    """The places to hold for ``pods`` (members of one job, alike): the members' places that
    come free first, in that order (the last one's time is when the job can start); their
    nodes and how many members each holds: :func:`held_slots`. ``room(node, most)``: when
    the node has room for 1 .. ``most`` members
    (:func:`~fairgpu.engine.victim_cost.room_times`; inf where no known end makes room).
    Ties go to the node with the most idle GPUs and free CPU, and a node is filled before
    the next. None if they cannot fit even on an empty cluster outside ``taken``."""
    if not pods:
        return None
    head = pods[0]
    mask = static_mask(head) & ~taken
    per_node = members_per_node(head, cluster, mask)
    n = cluster.size
    free = cluster.free()
    idle = cluster.idle_devices[:n]
    places: list[Place] = []
    for idx in np.flatnonzero(per_node[:n] > 0).tolist():
        most = int(per_node[idx])
        times = room(idx, most)
        pref = (-int(idle[idx]), -float(free[idx, COL_CPU]), int(rank[idx]))
        places.extend((t, *pref, idx, k) for k, t in enumerate(times))
    if len(places) < len(pods):
        return None
    places.sort()
    return places[: len(pods)]


def held_slots(places: list[Place]) -> tuple[np.ndarray, np.ndarray]:
    """The nodes of ``places`` and how many of them each holds."""
    counts: dict[int, int] = {}
    for place in places:
        counts[place[4]] = counts.get(place[4], 0) + 1
    return np.array(list(counts), dtype=np.int64), np.array(list(counts.values()), dtype=np.int64)


def backfill_mask(
    pod: PodInfo,
    cluster: ClusterState,
    reservations: list[Reservation],
    drain: dict[int, float],
    now: float,
) -> np.ndarray:
    """Nodes ``pod`` may use given other jobs' reservations (True outside reserved nodes)."""
    n = cluster.size
    mask = np.ones(n, dtype=bool)
    runtime = declared_runtime(pod)
    cpu = pod.requests.get(CPU, 0)
    mem = pod.requests.get(MEMORY, 0)
    for res in reservations:
        nodes = res.nodes[res.nodes < n]
        if nodes.size == 0:
            continue
        # The held job starts once its last node drains (has room for its members): work
        # that ends by then, on any of its nodes, does not delay it (EASY backfilling).
        ends_first = runtime is not None and now + runtime <= max(
            map(drain.get, nodes.tolist(), repeat(math.inf))
        )
        if pod.gpu.count:
            mask[nodes] = ends_first  # the same for every node of the reservation
            continue
        # Without GPUs it may also use what the held job leaves of CPU and memory.
        alloc = cluster.allocatable[nodes]
        req = cluster.requested[nodes]
        mask[nodes] = ends_first | (
            (alloc[:, COL_CPU] - req[:, COL_CPU] - cpu >= res.cpu)
            & (alloc[:, COL_MEMORY] - req[:, COL_MEMORY] - mem >= res.memory)
        )
    return mask


def whole_gpus(pods: list[PodInfo]) -> int:
    """Whole GPU devices asked by ``pods`` together."""
    return sum(p.gpu.count for p in pods if p.gpu.count and p.gpu.is_whole) + sum(
        p.gpu.total_milli // WHOLE for p in pods if p.gpu.count and not p.gpu.is_whole
    )
