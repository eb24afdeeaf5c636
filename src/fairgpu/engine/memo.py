"""Memo tables of one cycle: failures that need not be tried again.

Within a cycle, and until something is evicted, placements only take capacity and a queue's
usage only grows, so an ask that failed fails again. These keys say when two asks are "the
same" (or one needs at least as much as another); each is one small function so that what
they compare can change in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from fairgpu.engine.gang import declared_runtime
from fairgpu.model.pod import CPU, MEMORY, PodInfo

if TYPE_CHECKING:
    from fairgpu.engine.jobs import Job

# At most this many failed request vectors are kept per ask group.
MAX_FRONT = 256


def shape(pod: PodInfo) -> tuple[object, ...] | None:
    """Everything placement reads about ``pod`` (None for pods whose fit depends on other
    pods: inter-pod affinity, or a decode error)."""
    if pod.has_pod_affinity or pod.error:
        return None
    return (pod.static_key(), tuple(sorted(pod.requests.items())), pod.gpu, pod.namespace)


def memo_key(pod: PodInfo, reservations: bool) -> tuple[object, ...] | None:
    """:func:`shape`, plus the declared run time while reservations exist (backfill reads
    it)."""
    key = shape(pod)
    if key is None:
        return None
    if reservations:
        return (*key, declared_runtime(pod))
    return key


def outcome_key(job: Job, reservations: bool) -> tuple[object, ...] | None:
    """The fast-path key of a job of one pod: the same ask from the same queue at the same
    priority gets the same answer (None for gangs and pods :func:`shape` cannot judge)."""
    if job.group is not None:
        return None
    head = job.pods[0]
    memo = memo_key(head, reservations)
    if memo is None:
        return None
    return (job.tenant.queue, memo, head.priority)


def ask(pod: PodInfo) -> tuple[tuple[object, ...], np.ndarray] | None:
    """(group, vector) for :class:`Front`, or None for pods it cannot judge."""
    if pod.has_pod_affinity or pod.error:
        return None
    gpu = pod.gpu
    others = tuple(sorted((k, v) for k, v in pod.requests.items() if k not in (CPU, MEMORY)))
    group = (pod.static_key(), pod.namespace, others, gpu.memory_percent)
    whole = gpu.count > 0 and gpu.is_whole
    vec = np.array(
        [
            pod.requests.get(CPU, 0),
            pod.requests.get(MEMORY, 0),
            gpu.count,
            1000 if whole else (gpu.milli if gpu.count else 0),
            1e18 if whole else gpu.memory_mib,
        ],
        dtype=float,
    )
    return group, vec


class Front:
    """Failed asks per group key, kept as a list of request vectors: an ask that needs at
    least as much of everything as one that already failed (same selectors, tolerations,
    namespace and other resources) fails too, since placements in a cycle only take capacity.
    """

    def __init__(self) -> None:
        self._fronts: dict[tuple[object, ...], tuple[list[np.ndarray], list[str]]] = {}

    def find(self, group: tuple[object, ...], vec: np.ndarray) -> str | None:
        """The reason a dominated ask failed, or None."""
        entry = self._fronts.get(group)
        if entry is None:
            return None
        arr = np.asarray(entry[0])
        hit = np.flatnonzero((vec >= arr).all(axis=1))
        return entry[1][int(hit[0])] if hit.size else None

    def add(self, group: tuple[object, ...], vec: np.ndarray, reason: str) -> None:
        """Remember that ``vec`` failed in ``group`` for ``reason``."""
        vecs, reasons = self._fronts.setdefault(group, ([], []))
        if len(vecs) < MAX_FRONT:
            vecs.append(vec)
            reasons.append(reason)

    def clear(self) -> None:
        """Forget every failure."""
        self._fronts.clear()


@dataclass(slots=True)
class CycleMemo:
    """The memo tables of one cycle: job outcomes, failed asks, failed preemption asks."""

    outcome: dict[tuple[object, ...], tuple[str, bool]] = field(default_factory=dict)
    front: Front = field(default_factory=Front)
    preempt_front: Front = field(default_factory=Front)
    preempt_attempts: int = 0

    def forget(self) -> None:
        """Capacity was released (evictions): earlier failures may now succeed."""
        self.outcome.clear()
        self.front.clear()
        self.preempt_front.clear()
