"""Memo tables of one cycle: failures that need not be tried again.

Within a cycle, and until something is evicted, placements only take capacity and a queue's
usage only grows, so an ask that failed fails again. These keys say when two asks are "the
same" (or one needs at least as much as another); each is one small function so that what
they compare can change in one place.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import attrgetter, is_
from typing import TYPE_CHECKING

import numpy as np

from fairgpu.cluster.state import COL_CPU, COL_MEMORY, ClusterState
from fairgpu.engine.gang import Reservation, declared_runtime
from fairgpu.model.node_pools import workload_type
from fairgpu.model.pod import CPU, MEMORY, PodInfo

if TYPE_CHECKING:
    from fairgpu.engine.backlog import Backlog
    from fairgpu.engine.jobs import Job
    from fairgpu.engine.scheduler import Scheduler

_RUNTIME = attrgetter("runtime")


def _runtimes(lane: list[Job]) -> np.ndarray:
    return np.array(list(map(_RUNTIME, lane)), dtype=float)


# At most this many failed request vectors are kept per ask group.
MAX_FRONT = 256


def gpu_kind(pod: PodInfo) -> int:
    """0: no GPU, 1: whole devices, 2: a share of one device (each has its own reasons)."""
    gpu = pod.gpu
    return 0 if gpu.count == 0 else 1 if gpu.is_whole else 2


def labels_key(pod: PodInfo, cluster: ClusterState) -> tuple[tuple[str, str], ...] | None:
    """The pod's labels while placed pods carry (anti-)affinity terms that may select them
    (InterPodAffinity rejects nodes for the incoming pod's labels); None otherwise."""
    return tuple(sorted(pod.labels.items())) if cluster.pods_with_affinity else None


def memoisable(pod: PodInfo) -> bool:
    """May a failure of ``pod`` be reused for similar pods? Not when its fit depends on other
    pods through filters that run after ``GpuFit`` (inter-pod affinity, topology spread,
    host ports, volumes, DRA claims), nor for a pod that failed to decode."""
    return not (
        pod.has_pod_affinity
        or pod.spread_constraints
        or pod.host_ports
        or pod.claims
        or pod.disks
        or pod.inline_errors
        or pod.resource_claims
        or pod.error
    )


def shape(pod: PodInfo, cluster: ClusterState) -> tuple[object, ...] | None:
    """Everything the outcome of a single pod's attempt depends on besides its queue and
    priority: requests, GPU ask, selectors, namespace, whether it may preempt, and its labels
    while placed pods have (anti-)affinity terms (None for pods whose fit depends on other
    pods: inter-pod affinity, or a decode error)."""
    if not memoisable(pod):
        return None
    return (
        pod.static_key(),
        tuple(sorted(pod.requests.items())),
        pod.gpu,
        pod.namespace,
        pod.preemption_policy,
        labels_key(pod, cluster),
    )


def memo_key(pod: PodInfo, cluster: ClusterState, reservations: bool) -> tuple[object, ...] | None:
    """:func:`shape`, plus the declared run time while reservations exist (backfill reads
    it)."""
    key = shape(pod, cluster)
    if key is None:
        return None
    if reservations:
        return (*key, declared_runtime(pod))
    return key


def outcome_key(
    job: Job,
    cluster: ClusterState,
    reservations: bool,
    backfill: tuple[object, ...] | None = None,
    by_user: bool = False,
) -> tuple[object, ...] | None:
    """The fast-path key of a job of one pod: the same ask from the same queue at the same
    priority gets the same answer (None for gangs and pods :func:`shape` cannot judge) --
    from the same user too when ``by_user``: where the queue holds pods of lower priority,
    whom a pod may preempt there depends on its user's share (another user's pods only
    while it stays within its share, its own always), so one user's refusal says nothing
    of another's pod.

    While reservations exist, the declared run time matters only through the nodes
    backfill leaves the pod: ``backfill`` (:meth:`CycleMemo.backfill_key`) stands for it
    when given, so pods whose run times differ but whose backfill masks agree share a key.
    """
    if job.group is not None:
        return None
    head = job.pods[0]
    if reservations and backfill is not None:
        memo = shape(head, cluster)
        return None if memo is None else (*_tenant(job, by_user), memo, head.priority, backfill)
    memo = memo_key(head, cluster, reservations)
    if memo is None:
        return None
    return (*_tenant(job, by_user), memo, head.priority)


def _tenant(job: Job, by_user: bool) -> tuple[str, str]:
    return job.tenant.queue, job.tenant.user if by_user else ""


def same_outcome(
    leader: Job, job: Job, cluster: ClusterState, reservations: bool, held: frozenset[str]
) -> bool:
    """Does ``job``, tried right after ``leader`` failed with nothing committed in between,
    fail the same way, for the same reason?

    Both are pods alone of one queue (as in :func:`outcome_key`; a fair cycle settles only
    followers of one user's lane) with no decode or tenant error and no reservation of
    their own, and they ask for the same thing (:func:`memo_key`: the same static key,
    requests, GPU ask, namespace, preemption policy, labels while they matter, and declared
    run time while reservations exist) at the same priority, and either both or neither is
    held back from preempting (``held``: the session's ``no_preemption``). Every check an
    attempt makes then reads the same state: admission and namespace caps see the same
    usage, the failed-ask memo and the preemption memo hold the leader's failure, and the
    preemption search budget is not touched again. Cheap field comparisons, because a cycle
    asks this of every pod of a large identical backlog.
    """
    if job.group is not None or leader.group is not None:
        return False
    a, b = leader.pods[0], job.pods[0]
    ta, tb = leader.tenant, job.tenant
    if ta.error or tb.error or ta.queue != tb.queue or (a.uid in held) != (b.uid in held):
        return False
    return same_ask(a, b, cluster, reservations)


# Interned job signatures: equal signatures are one object, compared by identity.
_SIGNATURES: dict[tuple[object, ...], tuple[object, ...]] = {}
MAX_SIGNATURES = 100_000


def job_signature(job: Job) -> tuple[object, ...] | None:
    """What :func:`same_outcome` compares of a job with reservations, ``held`` and labels
    left out, as one interned object: jobs with the same signature ask the same thing from
    the same queue (None: a gang, a tenant error, or a pod :func:`memoisable` rejects).

    Computed once per job, so a cycle compares a backlog of identical pods by identity.
    When the table is full it starts afresh: equal signatures made before and after are
    then different objects, which only means fewer pods are settled together."""
    if job.group is not None or job.tenant.error:
        return None
    pod = job.pods[0]
    if not memoisable(pod):
        return None
    sig = (
        job.tenant.queue,
        pod.priority,
        pod.namespace,
        pod.preemption_policy,
        pod.gpu,
        tuple(sorted(pod.requests.items())),
        pod.static_key(),
    )
    got = _SIGNATURES.get(sig)
    if got is None:
        if len(_SIGNATURES) >= MAX_SIGNATURES:
            _SIGNATURES.clear()
        got = _SIGNATURES[sig] = sig
    return got


def same_ask(a: PodInfo, b: PodInfo, cluster: ClusterState, reservations: bool) -> bool:
    """Do ``a`` and ``b`` ask for the same thing (:func:`memo_key` equal, and the same
    priority), by cheap field comparisons?"""
    if (
        a.priority != b.priority
        or a.namespace != b.namespace
        or a.preemption_policy != b.preemption_policy
        or a.gpu != b.gpu
        or a.requests != b.requests
    ):
        return False
    if not (memoisable(a) and memoisable(b)) or a.static_key() != b.static_key():
        return False
    if cluster.pods_with_affinity and a.labels != b.labels:
        return False
    return not reservations or declared_runtime(a) == declared_runtime(b)


def ask(pod: PodInfo, cluster: ClusterState) -> tuple[tuple[object, ...], np.ndarray] | None:
    """(group, vector) for :class:`Front`, or None for pods it cannot judge.

    The vector is (CPU, memory, devices, compute and memory per device). The group holds the
    rest a failure depends on: the static key (selectors, tolerations, models, nodeName),
    namespace, other requests, the kind of GPU ask (none, whole, share: each fails with its
    own reasons), the preemption policy, and the labels while placed pods have
    (anti-)affinity.

    Reasons are handed on only up to the failed ask's :func:`ceiling` in CPU and memory:
    the filters before ``GpuFit`` then reject the same nodes for the same reasons, and every
    node that reached ``GpuFit`` and failed there fails there for a bigger GPU ask too, so
    the borrowed reason (counts included) is the one the pod would get itself. That holds
    because ``GpuFit`` is the last load-dependent filter a memoisable pod can fail; while
    placed pods have (anti-)affinity, ``InterPodAffinity`` runs after it, so the whole
    vector is then part of the group (equal asks only).
    """
    if not memoisable(pod):
        return None
    gpu = pod.gpu
    others = tuple(sorted((k, v) for k, v in pod.requests.items() if k not in (CPU, MEMORY)))
    kind = gpu_kind(pod)
    vec = np.array(
        [
            pod.requests.get(CPU, 0),
            pod.requests.get(MEMORY, 0),
            gpu.count,
            1000 if kind == 1 else (gpu.milli if kind else 0),
            1e18 if kind == 1 else gpu.memory_mib,
        ],
        dtype=float,
    )
    labels = labels_key(pod, cluster)
    exact = tuple(vec) if labels is not None else None
    group = (
        pod.static_key(),
        pod.namespace,
        others,
        kind,
        gpu.memory_percent,
        pod.preemption_policy,  # the preemption front: a pod that may preempt tries
        labels,
        exact,
    )
    return group, vec


def ceiling(
    scheduler: Scheduler, pod: PodInfo, cluster: ClusterState, vec: np.ndarray
) -> np.ndarray:
    """The largest CPU and memory (entries 0 and 1 of ``vec``) that ``NodeResourcesFit``
    rejects on exactly the same nodes, for the same resources, as it did for ``pod``: just
    below the least free amount among the nodes that had room for the pod's own ask (and
    pass the load-independent filters). GPU entries have no ceiling (see :func:`ask`)."""
    n = cluster.size
    reach = scheduler.static_mask(pod, cluster)
    top = np.full(vec.shape, np.inf)
    for j, col in enumerate((COL_CPU, COL_MEMORY)):
        free = cluster.allocatable[:n, col] - cluster.requested[:n, col]
        roomy = free[reach & (free >= vec[j])]
        if roomy.size:
            top[j] = roomy.min()
    return top


class Front:
    """Failed asks per group key (see :func:`ask`), kept as a list of request vectors: an
    ask of the same group that needs at least as much of everything as one that already
    failed fails too, since placements in a cycle only take capacity.

    An entry may carry a ceiling per vector entry (see :func:`ceiling`): only asks at or
    below it match, so the reason handed on is the one the asking pod would get itself.
    """

    def __init__(self) -> None:
        self._fronts: dict[tuple[object, ...], _Entries] = {}
        # Answers given since the last change, by (group, vector): a backlog asks the
        # same few things again and again.
        self._answers: dict[tuple[object, bytes], str | None] = {}

    def find(self, group: tuple[object, ...], vec: np.ndarray) -> str | None:
        """The reason a dominated ask failed, or None."""
        entry = self._fronts.get(group)
        if entry is None:
            return None
        key = (group, vec.tobytes())
        if key in self._answers:
            return self._answers[key]
        got = self._answers[key] = self._find(entry, vec)
        return got

    @staticmethod
    def _find(entry: _Entries, vec: np.ndarray) -> str | None:
        low, high = entry.stacked()
        hit = np.flatnonzero(((vec >= low) & (vec <= high)).all(axis=1))
        return entry.reasons[int(hit[0])] if hit.size else None

    def add(
        self,
        group: tuple[object, ...],
        vec: np.ndarray,
        reason: str,
        ceiling: np.ndarray | None = None,
    ) -> None:
        """Remember that ``vec`` failed in ``group`` for ``reason`` (valid up to
        ``ceiling``)."""
        entry = self._fronts.setdefault(group, _Entries())
        self._answers.clear()
        if len(entry.vecs) < MAX_FRONT:
            entry.vecs.append(vec)
            entry.ceilings.append(np.full(vec.shape, np.inf) if ceiling is None else ceiling)
            entry.reasons.append(reason)
            entry.cache = None

    def clear(self) -> None:
        """Forget every failure."""
        self._fronts.clear()
        self._answers.clear()


@dataclass(slots=True)
class _Entries:
    """One group's failed vectors, ceilings and reasons; the vectors and ceilings are
    stacked into arrays once per change, not at every lookup (lookups far outnumber
    failures)."""

    vecs: list[np.ndarray] = field(default_factory=list)
    ceilings: list[np.ndarray] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    cache: tuple[np.ndarray, np.ndarray] | None = None

    def stacked(self) -> tuple[np.ndarray, np.ndarray]:
        if self.cache is None:
            self.cache = (np.asarray(self.vecs), np.asarray(self.ceilings))
        return self.cache


@dataclass(slots=True)
class CycleMemo:
    """The memo tables of one cycle: job outcomes, failed asks, failed preemption asks,
    failed gang shapes (how many identical members fit before one failed, and why), gang
    screen bounds per shape and cluster state (and as held-back victims come free, and when
    and where those do), the room a victim pool would free (and how many copies of an ask
    it holds per node), backfill masks per reservation class, the sorted starts of each set
    of reservations met, the declared run times of lanes, and per signature and backfill
    class what a settled follower is judged by (its backfill mask and outcome key)."""

    outcome: dict[tuple[object, ...], tuple[str, bool]] = field(default_factory=dict)
    front: Front = field(default_factory=Front)
    preempt_front: Front = field(default_factory=Front)
    preempt_attempts: int = 0
    allowed: dict[tuple[object, ...], np.ndarray | None] = field(default_factory=dict)
    gangs: dict[tuple[object, ...], tuple[int, str]] = field(default_factory=dict)
    screens: dict[tuple[object, ...], tuple[int, str]] = field(default_factory=dict)
    screens_held: dict[
        tuple[object, ...],
        tuple[float, Mapping[str, float], tuple[np.ndarray, np.ndarray] | None],
    ] = field(default_factory=dict)
    rooms: dict[tuple[object, ...], tuple[object, np.ndarray]] = field(default_factory=dict)
    coming_free: dict[
        tuple[object, ...], tuple[object, tuple[np.ndarray, np.ndarray, np.ndarray]]
    ] = field(default_factory=dict)
    copies: dict[
        tuple[object, ...], tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]
    ] = field(default_factory=dict)
    runtimes: dict[int, tuple[list[Job], np.ndarray]] = field(default_factory=dict)
    # The engine's kept backlog, whose lanes keep what is derived from them across cycles.
    kept: Backlog | None = None
    lane_ks: dict[int, tuple[list[Job], list[float], np.ndarray]] = field(default_factory=dict)
    starts: dict[str, tuple[Reservation, float]] = field(default_factory=dict)
    judged: dict[tuple[object, ...], tuple[np.ndarray | None, tuple[object, ...] | None]] = field(
        default_factory=dict
    )
    _classes: tuple[tuple[Reservation, ...], tuple[str, ...], list[float]] | None = None
    _class_sets: dict[
        tuple[str, ...], tuple[tuple[Reservation, ...], tuple[str, ...], list[float]]
    ] = field(default_factory=dict)

    def backfill_key(
        self,
        pod: PodInfo,
        reservations: Mapping[str, Reservation],
        drain: Mapping[int, float],
        now: float,
        size: int,
    ) -> tuple[object, ...] | None:
        """A key under which pods get the same backfill mask
        (:func:`~fairgpu.engine.gang.backfill_mask`) from ``reservations``, or None when the
        mask depends on more than this key says (pods without GPUs: it reads free CPU and
        memory).

        A pod with GPUs may use a reserved node exactly when its declared run time ends by
        the time the reservation's last node drains (its start), so the mask is a function
        of which reservations there are and of how many of their starts the pod ends by --
        always the latest ones: (reservation keys, that count). Thousands of pending pods
        with as many distinct run times share a handful of keys. The sorted starts are
        computed once per set of reservations: ``drain`` holds a reservation's nodes from
        the moment it exists, and reservations never share nodes.
        """
        if pod.gpu.count == 0:
            return None
        held = tuple(reservations.values())
        known = self._classes
        if known is None or len(known[0]) != len(held) or not all(map(is_, known[0], held)):
            # Held jobs see every reservation but their own: a cycle alternates between a few
            # sets, each sorted once.
            keys = tuple(reservations)
            known = self._class_sets.get(keys)
            if known is None or not all(map(is_, known[0], held)):
                starts = sorted(self._start(k, r, drain, size) for k, r in reservations.items())
                known = self._class_sets[keys] = (held, keys, starts)
            self._classes = known
        # The workload type too: pool precedence rules open held nodes to some types.
        return (known[1], self.ends_before(declared_runtime(pod), now), workload_type(pod))

    def reservation_keys(self) -> tuple[str, ...]:
        """The reservation keys of the last :meth:`backfill_key` call (which must come
        first): with an :meth:`ends_before` count, a key of that call's form."""
        assert self._classes is not None
        return self._classes[1]

    def ends_before(self, runtime: float | None, now: float) -> int:
        """The count part of :meth:`backfill_key` for a pod declaring ``runtime``, over the
        reservations of the last :meth:`backfill_key` call (which must come first)."""
        assert self._classes is not None
        starts = self._classes[2]
        return 0 if runtime is None else len(starts) - bisect_left(starts, now + runtime)

    def lane_runtimes(self, lane: list[Job]) -> np.ndarray:
        """The declared run times of ``lane``'s jobs (nan: none), once per lane and cycle
        (lanes do not change during a cycle), and for a lane of the kept backlog once while
        it does not change (:meth:`~fairgpu.engine.backlog.Backlog.derived`)."""
        got = self.runtimes.get(id(lane))
        if got is None or got[0] is not lane:
            kept = self.kept
            times = _runtimes(lane) if kept is None else kept.derived(lane, "runtimes", _runtimes)
            got = self.runtimes[id(lane)] = (lane, times)
        return got[1]

    def lane_classes(self, lane: list[Job], now: float) -> np.ndarray:
        """:meth:`ends_before_all` of ``lane``'s declared run times, once per lane and set of
        reservations of the last :meth:`backfill_key` call (lanes do not change during a
        cycle; ``now`` is the cycle's)."""
        assert self._classes is not None
        starts = self._classes[2]
        got = self.lane_ks.get(id(lane))
        if got is None or got[0] is not lane or got[1] is not starts:
            ks = self.ends_before_all(self.lane_runtimes(lane), now)
            got = self.lane_ks[id(lane)] = (lane, starts, ks)
        return got[2]

    def ends_before_all(self, runtimes: np.ndarray, now: float) -> np.ndarray:
        """:meth:`ends_before` of each of ``runtimes`` (nan: none declared)."""
        assert self._classes is not None
        starts = np.asarray(self._classes[2], dtype=float)
        ends = len(starts) - np.searchsorted(starts, now + runtimes, side="left")
        return np.where(np.isnan(runtimes), 0, ends)

    def job_backfill_key(
        self,
        job_key: str,
        pod: PodInfo,
        reservations: Mapping[str, Reservation],
        drain: Mapping[int, float],
        now: float,
        size: int,
    ) -> tuple[object, ...] | None:
        """:meth:`backfill_key` over the reservations of jobs other than ``job_key`` (its
        own never restricts it)."""
        if job_key in reservations:
            reservations = {k: r for k, r in reservations.items() if k != job_key}
        return self.backfill_key(pod, reservations, drain, now, size)

    def _start(self, key: str, res: Reservation, drain: Mapping[int, float], size: int) -> float:
        """When the last of ``res``'s nodes drains (once per reservation and cycle)."""
        known = self.starts.get(key)
        if known is None or known[0] is not res:
            nodes = res.nodes[res.nodes < size]
            start = max((drain.get(int(i), math.inf) for i in nodes), default=math.inf)
            known = self.starts[key] = (res, start)
        return known[1]

    def forget(self) -> None:
        """Capacity was released (evictions): earlier failures may now succeed."""
        self.outcome.clear()
        self.front.clear()
        self.preempt_front.clear()
        self.gangs.clear()
        self.screens.clear()
        self.screens_held.clear()
