"""The queue book: who holds what, quotas, borrowing, lending, cohorts, namespace caps, shares.

The engine keeps one :class:`QueueBook` and syncs it with the cluster's placements at the start
of every cycle (only the difference is processed), then updates it as it assumes placements and
evictions within the cycle. All amounts are vectors over
:data:`~fairgpu.tenancy.config.DIMENSIONS` (milli-GPU, GPU MiB, milli-CPU, bytes).

Quota rules (per resource, only where the queue sets a value):

- static mode: usage never exceeds the nominal quota; a queue without a quota gets its
  weighted share of the cluster as nominal quota.
- dynamic mode: usage may exceed the nominal quota by at most ``borrowingLimit`` (unlimited if
  unset); inside a cohort the total borrowed never exceeds what the other members lend
  (``min(lendingLimit, unused nominal)``). Queues outside any cohort borrow idle cluster
  capacity. Borrowed capacity is reclaimed by preemption when its owner needs it.
- either mode: usage never exceeds the queue's ``limit``, and a department's queues together
  never exceed the department's ``limit``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from fairgpu.cluster.state import (
    COL_CPU,
    COL_GPU_MEMORY,
    COL_GPU_MILLI,
    COL_MEMORY,
    ClusterState,
    Placement,
)
from fairgpu.model.gpu import WHOLE
from fairgpu.model.pod import CPU, MEMORY, PodInfo
from fairgpu.tenancy.config import (
    DIM_CPU,
    DIM_GPU,
    DIM_GPU_MEMORY,
    DIM_MEMORY,
    DIM_UNITS,
    DIMENSIONS,
    QueueConfig,
    QueuePreemption,
    TenancyConfig,
)
from fairgpu.tenancy.fairshare import hierarchical_fair_shares
from fairgpu.tenancy.resolve import Tenant, TenantResolver
from fairgpu.tenancy.touched import TouchedUids

NDIM = len(DIMENSIONS)
INF = np.full(NDIM, np.inf)
# Per namespace: whole GPU devices, milli-CPU, bytes, pods (ResourceQuota style caps).
NS_KEYS = {"requests.nvidia.com/gpu": 0, "requests.cpu": 1, "requests.memory": 2, "pods": 3}
NS_NAMES = ("requests.nvidia.com/gpu", "requests.cpu", "requests.memory", "pods")


def placed_vector(pod: PodInfo, placement: Placement) -> np.ndarray:
    """The book's vector of a placed pod: what it actually holds (its devices' share of GPU
    compute and memory, and its CPU and memory requests)."""
    vec = zero()
    if placement.devices:
        vec[DIM_GPU] = placement.device_milli * len(placement.devices)
        vec[DIM_GPU_MEMORY] = placement.device_memory * len(placement.devices)
    # GPUs through DRA claims count as GPUs, their memory as GPU memory.
    vec[DIM_GPU] += placement.dra_milli
    vec[DIM_GPU_MEMORY] += placement.dra_memory
    vec[DIM_CPU] = pod.requests.get(CPU, 0)
    vec[DIM_MEMORY] = pod.requests.get(MEMORY, 0)
    return vec


def zero() -> np.ndarray:
    """A zero resource vector."""
    return np.zeros(NDIM)


@dataclass(slots=True)
class Entry:
    """A placed pod as the book accounts it."""

    tenant: Tenant
    namespace: str
    vec: np.ndarray
    ns_vec: np.ndarray
    group: str = ""
    priority: int = 0


@dataclass(slots=True)
class QueueLimits:
    """A queue's static quota description as vectors (``inf`` where unset)."""

    name: str
    weight: float = 1.0
    parent: str = ""
    cohort: str | None = None
    nominal: np.ndarray = field(default_factory=lambda: INF.copy())
    borrowing: np.ndarray = field(default_factory=lambda: INF.copy())
    lending: np.ndarray = field(default_factory=lambda: INF.copy())
    has_quota: bool = False
    # The hard cap (``limit``; a department's caps its queues together).
    limit: np.ndarray = field(default_factory=lambda: INF.copy())
    has_limit: bool = False
    preemption: QueuePreemption = field(default_factory=QueuePreemption)
    users: dict[str, float] = field(default_factory=dict)


def _limits(q: QueueConfig) -> QueueLimits:
    nominal = np.array(q.quota.vector())
    return QueueLimits(
        name=q.name,
        weight=q.weight,
        parent=q.parent or "",
        cohort=q.cohort,
        nominal=nominal,
        borrowing=np.array(q.borrowing_limit.vector()),
        lending=np.array(q.lending_limit.vector()),
        has_quota=not q.quota.is_empty(),
        limit=np.array(q.limit.vector()),
        has_limit=not q.limit.is_empty(),
        preemption=q.preemption,
        users=dict(q.users),
    )


def _after(held: np.ndarray, vec: np.ndarray, freed: np.ndarray | None) -> np.ndarray:
    """What is held once ``vec`` is added and ``freed`` (if any) taken away."""
    after: np.ndarray = held + vec if freed is None else held + vec - freed
    return after


def _first_over(after: np.ndarray, vec: np.ndarray, top: np.ndarray) -> int | None:
    """The first resource ``vec`` asks for whose amount ``after`` exceeds ``top``."""
    over = np.flatnonzero((after > top + 1e-6) & (vec > 0))
    return int(over[0]) if over.size else None


def _fmt(dim: int, amount: float) -> str:
    if dim == DIM_GPU:
        return f"{amount / WHOLE:g} GPU"
    if dim == DIM_CPU:
        return f"{amount / 1000:g} cpu"
    if dim == DIM_MEMORY:
        return f"{amount / 2**30:.3g}Gi memory"
    return f"{amount:g} {DIM_UNITS[dim]} GPU memory"


class QueueBook:
    """Usage per queue, department, user and namespace, with quota checks and shares."""

    def __init__(self, config: TenancyConfig, resolver: TenantResolver) -> None:
        self.config = config
        self.resolver = resolver
        self.static = config.mode == "static"
        self.limits: dict[str, QueueLimits] = {q.name: _limits(q) for q in config.queues}
        self._dominant_by: tuple[np.ndarray, np.ndarray | None, np.ndarray, bool] | None = None
        self.entries: dict[str, Entry] = {}
        # Uids added to or removed from ``entries`` since the pool demand index looked.
        self.touched = TouchedUids()
        self.usage: dict[str, np.ndarray] = {}
        self.parent_usage: dict[str, np.ndarray] = {}
        self.user_usage: dict[tuple[str, str], np.ndarray] = {}
        self.ns_usage: dict[str, np.ndarray] = {}
        self.queue_pods: dict[str, set[str]] = {}
        # How often each queue's pods were added or removed (never reset): a queue whose
        # count is the same holds the same pods.
        self.queue_changes: dict[str, int] = {}
        # How many placed pods of each priority each queue holds.
        self.queue_priorities: dict[str, dict[int, int]] = {}
        self.group_running: dict[str, set[str]] = {}
        # Members of each pod group that ran to completion (ClusterState.complete): with the
        # running ones, what a group has toward its minMember (members_toward_min).
        self.group_completed: dict[str, set[str]] = {}
        self._completed_of: tuple[ClusterState | None, int] = (None, -1)
        # What pods hold against quotas and limits only, not in shares (_sync_caps_only): the
        # cluster's detached pods (bound to a node it does not have now), and what terminating
        # victims hold in the API beyond the remainder the cluster keeps of them (leaving).
        self.leaving: dict[str, tuple[PodInfo, np.ndarray, np.ndarray]] = {}
        # Entries counted from a victim's remainder (lingering): counted afresh once the
        # cluster holds the whole victim again (its preemptor gave up).
        self.remainders: set[str] = set()
        self._leaving_version = 0
        self.caps_only_usage: dict[str, np.ndarray] = {}
        self.caps_only_parent: dict[str, np.ndarray] = {}
        self.caps_only_ns: dict[str, np.ndarray] = {}
        self._caps_only_of: tuple[ClusterState | None, int, int] = (None, -1, -1)
        self.ns_caps: dict[str, np.ndarray] = {}
        for ns, caps in config.namespace_quotas.items():
            self.set_namespace_caps(ns, caps)
        self.capacity = np.ones(NDIM)
        self.device_memory = 0.0
        self._static_nominal: dict[str, np.ndarray] = {}
        self._cluster: ClusterState | None = None
        self._load_version = -1
        self._static_version: tuple[int, int] = (-1, -1)

    # ---- configuration --------------------------------------------------------------------
    def set_namespace_caps(self, namespace: str, caps: dict[str, int | float | str]) -> None:
        """ResourceQuota-style hard caps for ``namespace`` (``requests.nvidia.com/gpu``,
        ``requests.cpu``, ``requests.memory``, ``pods``); replaces earlier caps."""
        from fairgpu.api.quantity import to_int, to_milli

        vec = np.full(4, np.inf)
        for key, value in caps.items():
            if key not in NS_KEYS:
                raise ValueError(f"namespace {namespace}: unsupported quota key {key!r}")
            vec[NS_KEYS[key]] = to_milli(value) if key == "requests.cpu" else to_int(value)
        self.ns_caps[namespace] = vec

    def queue_limits(self, queue: str) -> QueueLimits:
        """Limits of ``queue``; unconfigured (namespace) queues get defaults (weight 1)."""
        lim = self.limits.get(queue)
        if lim is None:
            lim = QueueLimits(name=queue, parent=self.resolver.parent_of(queue))
            self.limits[queue] = lim
        return lim

    def weight(self, queue: str) -> float:
        """The queue's weight."""
        return self.queue_limits(queue).weight

    def parent_weight(self, parent: str) -> float:
        """A department's weight (1 if it is not configured)."""
        lim = self.limits.get(parent)
        return lim.weight if lim is not None else 1.0

    def user_weight(self, queue: str, user: str) -> float:
        """A user's weight inside its queue (1 unless configured)."""
        return self.queue_limits(queue).users.get(user, 1.0)

    # ---- vectors ----------------------------------------------------------------------------
    def pending_vector(self, pod: PodInfo) -> np.ndarray:
        """What ``pod`` will take once placed (whole GPUs: the largest device's memory)."""
        gpu = pod.gpu
        vec = zero()
        if gpu.count:
            vec[DIM_GPU] = gpu.count * (WHOLE if gpu.is_whole else gpu.milli)
            if gpu.is_whole:
                mem = self.device_memory
            elif gpu.memory_mib:
                mem = gpu.memory_mib
            elif gpu.memory_percent:
                mem = self.device_memory * gpu.memory_percent / 100
            else:
                mem = 0.0
            vec[DIM_GPU_MEMORY] = gpu.count * mem
        if pod.resource_claims and self._cluster is not None:  # GPUs through DRA claims
            milli, mib = self._cluster.dra.asked_gpu(pod, self._cluster)
            vec[DIM_GPU] += milli
            vec[DIM_GPU_MEMORY] += mib
        vec[DIM_CPU] = pod.requests.get(CPU, 0)
        vec[DIM_MEMORY] = pod.requests.get(MEMORY, 0)
        return vec

    @staticmethod
    def ns_vector(pod: PodInfo, dra_milli: float = 0.0) -> np.ndarray:
        """The pod's charge against namespace caps: GPU devices (``dra_milli``, GPUs through
        DRA claims, added as GPUs: a namespace cannot escape its cap by asking through
        claims), milli-CPU, bytes, 1 pod."""
        gpus = pod.gpu.count + dra_milli / WHOLE
        return np.array([gpus, pod.requests.get(CPU, 0), pod.requests.get(MEMORY, 0), 1.0])

    def _pending_ns_vector(self, pod: PodInfo) -> np.ndarray:
        """:meth:`ns_vector` of a pending pod, with the GPUs its claims ask for."""
        dra = 0.0
        if pod.resource_claims and self._cluster is not None:
            dra = self._cluster.dra.asked_gpu_milli(pod, self._cluster)
        return self.ns_vector(pod, dra)

    # ---- accounting -------------------------------------------------------------------------
    def sync(self, cluster: ClusterState) -> None:
        """Bring the book in line with ``cluster``'s placements and capacity."""
        self._sync_completed(cluster)
        self._sync_caps_only(cluster)
        static = (cluster.static_version, cluster.dra.slice_version)  # slices publish GPUs too
        if (
            cluster is self._cluster
            and cluster.load_version == self._load_version
            and static == self._static_version
        ):
            return  # nothing placed, released or changed since the last sync
        if cluster is not self._cluster or static != self._static_version:
            self._capacity(cluster)
        placed = cluster.placements
        for uid in self.entries.keys() - placed.keys():
            self.remove(uid)
        if self.remainders:
            self._settle_remainders(cluster)
        for uid in placed.keys() - self.entries.keys():
            pod = cluster.pods[uid]
            self.add(uid, pod, placed_vector(pod, placed[uid]), placed[uid].dra_milli)
            if placed[uid].remainder:
                self.remainders.add(uid)
        if self.static:
            self._static_nominal = self._weighted_nominal()
        self.mark_synced(cluster)

    def _sync_completed(self, cluster: ClusterState) -> None:
        """Group ``cluster``'s completed pods by pod group (when they changed)."""
        seen, version = self._completed_of
        if seen is cluster and version == cluster.completed_version:
            return
        self._completed_of = (cluster, cluster.completed_version)
        groups: dict[str, set[str]] = {}
        for uid, pod in cluster.completed.items():
            ref = self.resolver.pod_group(pod)
            if ref is not None:
                groups.setdefault(ref.key, set()).add(uid)
        self.group_completed = groups

    def _sync_caps_only(self, cluster: ClusterState) -> None:
        """Total what is held against quotas and limits only (when it changed): each of
        ``cluster``'s detached pods as admission judged it (:meth:`pending_vector`; it holds
        no node to read it from), and what each terminating victim of :attr:`leaving` holds
        beyond its remainder."""
        seen, version, leaving = self._caps_only_of
        if (
            seen is cluster
            and version == cluster.detached_version
            and leaving == self._leaving_version
        ):
            return
        self._caps_only_of = (cluster, cluster.detached_version, self._leaving_version)
        self.caps_only_usage, self.caps_only_parent, self.caps_only_ns = {}, {}, {}
        for pod in cluster.detached.values():
            self._add_caps_only(pod, self.pending_vector(pod), self._pending_ns_vector(pod))
        for pod, vec, ns_vec in self.leaving.values():
            self._add_caps_only(pod, vec, ns_vec)

    def _add_caps_only(self, pod: PodInfo, vec: np.ndarray, ns_vec: np.ndarray) -> None:
        """Count ``vec`` (``ns_vec`` against its namespace's caps) of ``pod`` as held against
        quotas and limits only."""
        tenant = self.resolver.resolve(pod)
        usage, parent, ns = self.caps_only_usage, self.caps_only_parent, self.caps_only_ns
        usage[tenant.queue] = usage.get(tenant.queue, zero()) + vec
        if tenant.parent:
            parent[tenant.parent] = parent.get(tenant.parent, zero()) + vec
        ns[pod.namespace] = ns.get(pod.namespace, np.zeros(4)) + ns_vec

    def hold_leaving(self, uid: str, pod: PodInfo, vec: np.ndarray, ns_vec: np.ndarray) -> None:
        """Victim ``uid`` (``pod``; one of :attr:`remainders`) terminates, holding ``vec``
        (and ``ns_vec`` against its namespace's caps) in the API beyond the remainder the
        cluster keeps of it: its queue's quota and limits, and its department's, count it
        until the victim is gone (added to the totals at once: later jobs of the cycle are
        admitted against it)."""
        again = uid in self.leaving
        self.leaving[uid] = (pod, vec, ns_vec)
        self._leaving_version += 1
        seen, detached, _ = self._caps_only_of
        if again and self._cluster is not None:  # its earlier amount is in the totals
            self._sync_caps_only(self._cluster)
            return
        self._caps_only_of = (seen, detached, self._leaving_version)
        self._add_caps_only(pod, vec, ns_vec)

    def _settle_remainders(self, cluster: ClusterState) -> None:
        """The victims :attr:`remainders` counted by what they kept, now gone or held whole
        by ``cluster`` again: counted afresh from their placement, and no longer held beyond
        it (:attr:`leaving`)."""
        placed = cluster.placements
        for uid in list(self.remainders):
            placement = placed.get(uid)
            if placement is not None and placement.remainder:
                continue
            self.remainders.discard(uid)
            if self.leaving.pop(uid, None) is not None:
                self._leaving_version += 1
            if placement is not None and uid in self.entries:
                self.remove(uid)
                pod = cluster.pods[uid]
                self.add(uid, pod, placed_vector(pod, placement), placement.dra_milli)
        self._sync_caps_only(cluster)

    def members_toward_min(self, group: str) -> int:
        """Members of pod group ``group`` that count toward its minMember: those running
        and those that ran to completion (a finished member is not missing)."""
        done = self.group_completed.get(group)
        return len(self.group_running.get(group, ())) + (len(done) if done else 0)

    def mark_synced(self, cluster: ClusterState) -> None:
        """Record that the book matches ``cluster`` as it is now (after the engine's own
        assigns and releases, which it accounts itself)."""
        self._cluster = cluster
        self._load_version = cluster.load_version
        self._static_version = (cluster.static_version, cluster.dra.slice_version)

    def _capacity(self, cluster: ClusterState) -> None:
        n = cluster.size
        active = cluster.active[:n]
        alloc = cluster.allocatable[:n][active]
        self.capacity = np.array(
            [
                alloc[:, COL_GPU_MILLI].sum() + cluster.dra.gpu_capacity_milli(),
                alloc[:, COL_GPU_MEMORY].sum() + cluster.dra.gpu_memory_capacity_mib(),
                alloc[:, COL_CPU].sum(),
                alloc[:, COL_MEMORY].sum(),
            ],
            dtype=float,
        )
        totals = cluster.device_memory_total[:n][active]
        self.device_memory = float(totals.max()) if totals.size else 0.0

    def add(self, uid: str, pod: PodInfo, vec: np.ndarray, dra_milli: float = 0.0) -> None:
        """Account ``pod`` (placed) with resource vector ``vec``; ``dra_milli``: the GPU milli
        it holds through DRA claims (part of ``vec``; namespace caps count it too)."""
        tenant = self.resolver.resolve(pod)
        ref = self.resolver.pod_group(pod)
        ns_vec = self.ns_vector(pod, dra_milli)
        entry = Entry(tenant, pod.namespace, vec, ns_vec, ref.key if ref else "", pod.priority)
        self.entries[uid] = entry
        self.touched.note(uid)
        self._apply(entry, +1)
        self.queue_pods.setdefault(tenant.queue, set()).add(uid)
        counts = self.queue_priorities.setdefault(tenant.queue, {})
        counts[pod.priority] = counts.get(pod.priority, 0) + 1
        self.queue_changes[tenant.queue] = self.queue_changes.get(tenant.queue, 0) + 1
        if entry.group:
            self.group_running.setdefault(entry.group, set()).add(uid)

    def remove(self, uid: str) -> Entry | None:
        """Stop accounting pod ``uid``; returns its entry."""
        entry = self.entries.pop(uid, None)
        if entry is not None:
            self.touched.note(uid)
            self._apply(entry, -1)
            self.queue_pods.get(entry.tenant.queue, set()).discard(uid)
            queue = entry.tenant.queue
            counts = self.queue_priorities[queue]
            counts[entry.priority] -= 1
            if not counts[entry.priority]:
                del counts[entry.priority]
            self.queue_changes[queue] = self.queue_changes.get(queue, 0) + 1
            if entry.group:
                self.group_running.get(entry.group, set()).discard(uid)
        return entry

    def holds_lower_priority(self, queue: str, priority: int) -> bool:
        """Does ``queue`` hold a placed pod of priority below ``priority``?"""
        counts = self.queue_priorities.get(queue)
        return counts is not None and bool(counts) and min(counts) < priority

    def _apply(self, e: Entry, sign: int) -> None:
        t = e.tenant
        self.usage.setdefault(t.queue, zero())
        self.usage[t.queue] += sign * e.vec
        if t.parent:
            self.parent_usage.setdefault(t.parent, zero())
            self.parent_usage[t.parent] += sign * e.vec
        key = (t.queue, t.user)
        self.user_usage.setdefault(key, zero())
        self.user_usage[key] += sign * e.vec
        self.ns_usage.setdefault(e.namespace, np.zeros(4))
        self.ns_usage[e.namespace] += sign * e.ns_vec

    def used(self, queue: str) -> np.ndarray:
        """Current usage vector of ``queue``."""
        u = self.usage.get(queue)
        return u if u is not None else zero()

    @staticmethod
    def _held(used: np.ndarray, caps_only: np.ndarray | None) -> np.ndarray:
        """What is held for a quota: ``used`` (placed pods) and what is held against quotas
        only (``caps_only``, :meth:`_sync_caps_only`)."""
        return used if caps_only is None else used + caps_only

    def department_used(self, department: str) -> np.ndarray:
        """Current usage vector of ``department``'s queues together."""
        u = self.parent_usage.get(department)
        return u if u is not None else zero()

    # ---- shares -------------------------------------------------------------------------
    def dominant(self, vec: np.ndarray) -> float:
        """Dominant resource share of ``vec`` against cluster capacity."""
        cap = self.capacity
        known = self._dominant_by
        if known is None or known[0] is not cap:
            # Which resources the cluster has, once per capacity (a new array when it
            # changes): the same quotients as before, fewer array operations per call.
            has = cap > 0
            known = self._dominant_by = (cap, None if has.all() else has, cap[has], bool(has.any()))
        _, which, positive, some = known
        if not some:
            return 0.0
        # The largest quotient (at least 0) over a handful of resources: Python's max of the
        # listed floats, without the array method's reduction wrapper.
        most: float = max(0.0, *((vec if which is None else vec[which]) / positive).tolist())
        return most

    def queue_share(self, queue: str, delta: np.ndarray | None = None) -> float:
        """Weighted dominant share of ``queue`` (optionally with ``delta`` added)."""
        u = self.used(queue)
        if delta is not None:
            u = u + delta
        return self.dominant(u) / self.weight(queue)

    def top_share(self, queue: str, deltas: Mapping[str, np.ndarray] | None = None) -> float:
        """Weighted dominant share at the top level: the queue's department, or the queue
        itself when it has no parent. ``deltas`` maps queues to hypothetical changes."""
        lim = self.queue_limits(queue)
        if not lim.parent:
            return self.queue_share(queue, (deltas or {}).get(queue))
        u = self.parent_usage.get(lim.parent, zero())
        if deltas:
            for q, d in deltas.items():
                if self.queue_limits(q).parent == lim.parent:
                    u = u + d
        return self.dominant(u) / self.parent_weight(lim.parent)

    def user_share(self, queue: str, user: str) -> float:
        """Weighted dominant share of ``user`` inside ``queue``."""
        u = self.user_usage.get((queue, user))
        s = self.dominant(u) if u is not None else 0.0
        return s / self.user_weight(queue, user)

    # ---- quotas -------------------------------------------------------------------------
    def nominal(self, queue: str) -> np.ndarray:
        """Effective nominal quota (static mode fills unset queues with a weighted share)."""
        lim = self.queue_limits(queue)
        if self.static and not lim.has_quota:
            got = self._static_nominal.get(queue)
            if got is None:
                self._static_nominal = self._weighted_nominal(extra=queue)
                got = self._static_nominal[queue]
            return got
        return lim.nominal

    def _weighted_nominal(self, extra: str | None = None) -> dict[str, np.ndarray]:
        queues = {q for q, lim in self.limits.items() if q not in self._parents()}
        queues |= set(self.usage)
        if extra:
            queues.add(extra)
        reserved = zero()
        free_queues = []
        for q in sorted(queues):
            lim = self.queue_limits(q)
            if lim.has_quota:
                reserved += np.where(np.isinf(lim.nominal), 0, lim.nominal)
            else:
                free_queues.append(q)
        left = np.maximum(self.capacity - reserved, 0)
        out: dict[str, np.ndarray] = {}
        if not free_queues:
            return out
        demand = {q: 1.0 for q in free_queues}
        frac = hierarchical_fair_shares(
            1.0,
            demand,
            self.weight,
            lambda q: self.queue_limits(q).parent,
            self.parent_weight,
        )
        for q in free_queues:
            out[q] = left * frac[q]
        return out

    def _parents(self) -> set[str]:
        return {lim.parent for lim in self.limits.values() if lim.parent}

    def within_nominal(self, queue: str, delta: np.ndarray | None = None) -> bool:
        """True if the queue has a quota and (with ``delta``) stays within it everywhere."""
        lim = self.queue_limits(queue)
        if not lim.has_quota and not self.static:
            return False
        u = self.used(queue) if delta is None else self.used(queue) + delta
        return bool((u <= self.nominal(queue) + 1e-6).all())

    def max_usage(self, queue: str) -> np.ndarray:
        """The most ``queue`` may ever hold per resource (its department's limit aside:
        :meth:`department_limit`)."""
        nominal = self.nominal(queue)
        lim = self.queue_limits(queue)
        top: np.ndarray = nominal if self.static else nominal + lim.borrowing  # inf if unset
        if lim.has_limit:
            top = np.minimum(top, lim.limit)
        return top

    def department_limit(self, queue: str) -> QueueLimits | None:
        """The limits of ``queue``'s department when that department sets a ``limit``."""
        parent = self.queue_limits(queue).parent
        dept = self.limits.get(parent) if parent else None
        return dept if dept is not None and dept.has_limit else None

    def unlimited(self, queue: str) -> bool:
        """May ``queue`` hold anything? (Dynamic mode, no nominal quota and no limit on it or
        its department -- every resource of :meth:`max_usage` is then ``inf``, whatever the
        borrowing limit --: :meth:`never_fits` and :meth:`admit` always pass.)"""
        lim = self.queue_limits(queue)
        if self.static or lim.has_quota or lim.has_limit:
            return False
        return self.department_limit(queue) is None

    def _cap_words(self, queue: str, dim: int) -> str:
        """What caps ``queue`` at :meth:`max_usage` in resource ``dim``: its limit when that
        is below what its quota (and borrowing) allow, else the quota."""
        lim = self.queue_limits(queue)
        nominal = self.nominal(queue)[dim]
        by_quota = nominal if self.static else nominal + lim.borrowing[dim]
        if lim.has_limit and lim.limit[dim] < by_quota:
            return "limit"
        return "nominal quota" if self.static else "nominal quota + borrowing limit"

    def never_fits(self, queue: str, vec: np.ndarray) -> str | None:
        """A reason if ``vec`` alone exceeds what ``queue`` (or its department) may ever
        hold."""
        if self.unlimited(queue):
            return None
        top = self.max_usage(queue)
        over = np.flatnonzero(vec > top + 1e-6)
        if over.size:
            d = int(over[0])
            return (
                f"pod asks {_fmt(d, vec[d])} but queue {queue!r} may never hold more than "
                f"{_fmt(d, top[d])} ({self._cap_words(queue, d)})"
            )
        dept = self.department_limit(queue)
        if dept is None:
            return None
        over = np.flatnonzero(vec > dept.limit + 1e-6)
        if over.size == 0:
            return None
        d = int(over[0])
        return (
            f"pod asks {_fmt(d, vec[d])} but department {dept.name!r} may never hold more "
            f"than {_fmt(d, dept.limit[d])} (its limit)"
        )

    def admit(
        self,
        queue: str,
        vec: np.ndarray,
        freed: np.ndarray | None = None,
        others_freed: np.ndarray | None = None,
    ) -> str | None:
        """None if ``queue`` may take ``vec`` more now; otherwise the reason it may not.
        ``freed``: what the queue would hold less first (pods of its own it would evict);
        ``others_freed``: what the other queues of its department would hold less (pods it
        would take back from them), which its department's limit counts."""
        if self.unlimited(queue):
            return None
        lim = self.queue_limits(queue)
        after = _after(self._held(self.used(queue), self.caps_only_usage.get(queue)), vec, freed)
        top = self.max_usage(queue)
        d = _first_over(after, vec, top)
        if d is not None:
            return (
                f"queue {queue!r} would hold {_fmt(d, after[d])}, above its "
                f"{self._cap_words(queue, d)} of {_fmt(d, top[d])}"
            )
        gone = freed
        if others_freed is not None:
            gone = others_freed if freed is None else freed + others_freed
        refused = self._department_admit(queue, vec, gone)
        if refused:
            return refused
        if self.static or lim.cohort is None or not lim.has_quota:
            return None
        nominal = lim.nominal
        borrow = np.where(np.isinf(nominal), 0.0, np.maximum(after - nominal, 0.0))
        need = np.flatnonzero((borrow > 1e-6) & (vec > 0))
        if need.size == 0:
            return None
        borrowed = zero()
        lendable = zero()
        for other in self.limits.values():
            if other.cohort != lim.cohort or other.name == queue:
                continue
            u = self.used(other.name)
            nom = np.where(np.isinf(other.nominal), 0.0, other.nominal)
            borrowed += np.maximum(u - nom, 0.0)
            lendable += np.minimum(other.lending, np.maximum(nom - u, 0.0))
        for d in need.tolist():
            if borrowed[d] + borrow[d] > lendable[d] + 1e-6:
                return (
                    f"queue {queue!r} would borrow {_fmt(d, borrow[d])} but cohort "
                    f"{lim.cohort!r} lends only {_fmt(d, max(0.0, lendable[d] - borrowed[d]))}"
                )
        return None

    def _department_admit(
        self, queue: str, vec: np.ndarray, freed: np.ndarray | None
    ) -> str | None:
        """The reason ``queue``'s department's limit refuses ``vec`` more now, if it does
        (``freed``: what the queue would hold less first -- its department too)."""
        dept = self.department_limit(queue)
        if dept is None:
            return None
        held = self._held(self.department_used(dept.name), self.caps_only_parent.get(dept.name))
        after = _after(held, vec, freed)
        d = _first_over(after, vec, dept.limit)
        if d is None:
            return None
        return (
            f"department {dept.name!r} would hold {_fmt(d, after[d])}, above its limit of "
            f"{_fmt(d, dept.limit[d])} (its queues together)"
        )

    def namespace_admit(self, pod: PodInfo) -> str | None:
        """None if the namespace's ResourceQuota-style caps allow ``pod``; else the reason."""
        caps = self.ns_caps.get(pod.namespace)
        if caps is None:
            return None
        used = self._held(
            self.ns_usage.get(pod.namespace, np.zeros(4)), self.caps_only_ns.get(pod.namespace)
        )
        need = self._pending_ns_vector(pod)
        after = used + need
        for i in range(4):
            if need[i] > 0 and after[i] > caps[i]:
                return (
                    f"namespace {pod.namespace!r} quota exceeded: {NS_NAMES[i]} "
                    f"used {used[i]:g} + requested {need[i]:g} > hard {caps[i]:g}"
                )
        return None

    def namespace_never_fits(self, pod: PodInfo) -> str | None:
        """A reason if ``pod`` alone exceeds its namespace's caps."""
        caps = self.ns_caps.get(pod.namespace)
        if caps is None:
            return None
        need = self._pending_ns_vector(pod)
        for i in range(4):
            if need[i] > caps[i]:
                return (
                    f"namespace {pod.namespace!r} quota: {NS_NAMES[i]} requested "
                    f"{need[i]:g} > hard {caps[i]:g}"
                )
        return None

    def gpu_fair_shares(self, demand_milli: dict[str, float]) -> dict[str, float]:
        """Per queue, the weighted max-min fair share of cluster GPUs (milli), capped by
        ``demand_milli`` and by :meth:`gpu_caps`; static mode caps by the nominal quota (and
        limit) instead."""
        cap = float(self.capacity[DIM_GPU])
        if self.static:
            return {q: float(min(d, self.max_usage(q)[DIM_GPU])) for q, d in demand_milli.items()}
        return hierarchical_fair_shares(
            cap,
            demand_milli,
            self.weight,
            lambda q: self.queue_limits(q).parent,
            self.parent_weight,
            self.gpu_caps(demand_milli),
        )

    def gpu_caps(self, queues: Iterable[str]) -> dict[str, int]:
        """The most each of ``queues`` -- and each of their departments, its queues
        together -- may ever hold, in milli-GPU, where its quota, borrowing limit or limit
        bounds it (static mode's shares of unset quotas aside): no fair share lies above."""
        out: dict[str, int] = {}
        for q in queues:
            lim = self.queue_limits(q)
            if lim.has_quota or lim.has_limit:
                top = float(self.max_usage(q)[DIM_GPU])
                if math.isfinite(top):
                    out[q] = int(top)
            dept = self.department_limit(q)
            if dept is not None and math.isfinite(dept.limit[DIM_GPU]):
                out[dept.name] = int(dept.limit[DIM_GPU])
        return out
