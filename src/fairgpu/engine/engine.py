"""The engine entry point both adapters call: one scheduling cycle over the pending pods.

A cycle orders the pending pods, tries each against the cluster, *assumes* every placement in
the :class:`ClusterState` it was given (so later pods in the same cycle see it) and returns the
decisions. The simulator applies them at simulated time; the live adapter posts the bindings
and evictions and releases an assumed pod whose bind fails.

Two orderings share everything else (filters, scores, devices):

``fair`` (default)
    Pending pods are grouped into jobs (a pod, or a pod group placed all-or-nothing) per queue
    and user. The next job always comes from the queue with the lowest weighted dominant
    resource share (departments first, then queues inside a department; optionally blended
    with decayed usage history), then from that queue's user with the lowest share, then by
    priority and creation time *inside* that user. A PriorityClass therefore never moves one
    tenant ahead of another, and submitting more pods never raises a tenant's share. Quotas
    (static or dynamic with borrowing), namespace caps, reclaim and within-queue preemption,
    gangs and starvation reservations apply.

``kube-default``
    kube-scheduler's order (priority, then creation time) with its priority preemption and no
    gangs or quotas: the baseline fairgpu is compared with.

Reclaim
    A queue below its fair share (dominant-share units, weighted max-min capped by demand) may
    preempt pods of a queue above its own; a queue within its nominal quota may preempt a
    queue borrowing beyond its quota.

No preemption cycles
    Within a queue only strictly higher priority preempts strictly lower. Between queues,
    queue Q may reclaim victims from queue V only if ``key(Q) < key(V)`` before the move and
    ``key(Q) <= key(V)`` after it (victims removed, preemptor added), where ``key`` is
    (borrowing beyond nominal quota?, department share, queue share) — instantaneous,
    without history. Reclaiming back from the state just produced would need
    ``key(V) < key(Q)`` there, contradicting ``key(Q) <= key(V)``: a victim's queue can never
    reclaim what was just taken under the same state.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import Code
from fairgpu.engine.gang import (
    Reservation,
    Statement,
    backfill_mask,
    choose_reservation,
    declared_runtime,
    drain_estimate,
    whole_gpus,
)
from fairgpu.engine.plugins.scheduling_gates import gated_reason
from fairgpu.engine.policies import DEFAULT_POLICY, policy
from fairgpu.engine.preemption import PreemptionPlan, find_preemption
from fairgpu.engine.profile import Profile
from fairgpu.engine.scheduler import Scheduler, ScheduleResult
from fairgpu.model.pod import CPU, MEMORY, PodInfo
from fairgpu.tenancy.book import QueueBook
from fairgpu.tenancy.config import DIM_GPU, TenancyConfig, default_config
from fairgpu.tenancy.fairshare import hierarchical_fair_shares
from fairgpu.tenancy.history import UsageHistory
from fairgpu.tenancy.resolve import PodGroupRef, Tenant, TenantResolver

Ordering = Literal["fair", "kube-default"]
ORDERINGS: tuple[str, ...] = ("fair", "kube-default")
# Reclaim looks for victims in at most this many queues (those furthest above the preemptor).
MAX_RECLAIM_QUEUES = 4
# Preemption searches per cycle (each scans running pods); the rest wait for the next cycle.
MAX_PREEMPTION_ATTEMPTS = 32


@dataclass(slots=True)
class Bind:
    """Bind ``pod`` to ``node_name`` using GPU ``devices``.

    ``wait_for`` lists the uids of pods evicted to make room: the live adapter posts the
    binding only once they are gone (the simulator removes them at once).
    """

    pod: PodInfo
    node_name: str
    devices: tuple[int, ...] = ()
    wait_for: tuple[str, ...] = ()


@dataclass(slots=True)
class Evict:
    """Evict ``pod`` (a preemption victim) to make room for ``preemptor``.

    ``kind``: ``reclaim`` (between queues), ``priority`` (inside a queue, or kube-default),
    ``gang-timeout`` (a pod group stayed below minMember too long).
    """

    pod: PodInfo
    preemptor: PodInfo | None = None
    reason: str = ""
    kind: str = ""


@dataclass(slots=True)
class Unschedulable:
    """``pod`` stays pending for ``reason``; ``resolvable`` is False if no change can help."""

    pod: PodInfo
    reason: str
    resolvable: bool = True


@dataclass(slots=True)
class CycleResult:
    """All decisions of one cycle, in the order they were made.

    ``reserved`` maps a large job's key to the node names held for it after this cycle.
    """

    binds: list[Bind] = field(default_factory=list)
    evictions: list[Evict] = field(default_factory=list)
    unschedulable: list[Unschedulable] = field(default_factory=list)
    reserved: dict[str, list[str]] = field(default_factory=dict)


def kube_default_order(pods: Iterable[PodInfo]) -> list[PodInfo]:
    """kube-scheduler's active queue order: priority (high first), then creation time."""
    return sorted(pods, key=lambda p: (-p.priority, p.created, p.uid))


@dataclass(slots=True)
class Job:
    """What the fair order hands out: one pod, or the pending members of a pod group.

    ``need`` members must be placed together (minMember minus running members).
    """

    key: str
    pods: list[PodInfo]
    tenant: Tenant
    group: PodGroupRef | None = None
    need: int = 1
    waiting: str = ""

    @property
    def sort_key(self) -> tuple[int, float, str]:
        """Order inside one user: priority (high first), creation time, key."""
        return (-max(p.priority for p in self.pods), min(p.created for p in self.pods), self.key)


class Engine:
    """Pure scheduling engine: state and pending pods in, decisions out.

    ``tenancy``: queues, quotas, preemption, gang and starvation settings (None: every
    namespace a queue of weight 1, dynamic mode). ``ordering``: ``fair`` or ``kube-default``.
    The engine keeps what must survive between cycles (usage history, gang and reservation
    timers) but never reads a clock: time is the ``now`` passed to :meth:`cycle`.
    """

    def __init__(
        self,
        profile: Profile | None = None,
        seed: int = 0,
        *,
        tenancy: TenancyConfig | None = None,
        ordering: Ordering = "fair",
        time_label: Callable[[float], str] | None = None,
    ) -> None:
        if ordering not in ORDERINGS:
            raise ValueError(f"unknown ordering {ordering!r}; known: {', '.join(ORDERINGS)}")
        self.profile = profile or policy(DEFAULT_POLICY)
        self.scheduler = Scheduler(self.profile, seed)
        self.ordering: Ordering = ordering
        self.tenancy = tenancy or default_config()
        self.resolver = TenantResolver(self.tenancy)
        self.book = QueueBook(self.tenancy, self.resolver)
        self.history = UsageHistory(self.tenancy.history.half_life_seconds)
        self.reservations: dict[str, Reservation] = {}
        # How a point in time reads in a pending pod's reason (the live adapter: UTC).
        self.time_label = time_label or (lambda t: f"t={t:.0f} s")
        self.preemptions = 0
        self._blocked_since: dict[str, float] = {}
        self._partial_since: dict[str, float] = {}
        self._bound_now: set[str] = set()
        self._keys: dict[str, tuple[float, float, str]] = {}
        self._deserved: dict[str, float] = {}

    # ---- configuration hooks for the adapters ------------------------------------------------
    def set_pod_group(self, namespace: str, name: str, min_member: int) -> None:
        """Register a PodGroup (coscheduling or Volcano) and its ``minMember``."""
        self.resolver.set_pod_group(namespace, name, min_member)

    def remove_pod_group(self, namespace: str, name: str) -> None:
        """Forget a PodGroup (its object was deleted)."""
        self.resolver.remove_pod_group(namespace, name)

    def set_pod_group_error(self, namespace: str, name: str, error: str) -> None:
        """A PodGroup object is invalid: its pods are reported unschedulable with ``error``."""
        self.resolver.set_pod_group_error(namespace, name, error)

    def register_pod_groups(self, groups: dict[str, int]) -> None:
        """Register many PodGroups at once: ``namespace/name`` -> minMember."""
        for key, min_member in groups.items():
            namespace, _, name = key.partition("/")
            self.resolver.set_pod_group(namespace, name, min_member)

    def tenant(self, pod: PodInfo) -> Tenant:
        """The queue, department and user ``pod`` is accounted to."""
        return self.resolver.resolve(pod)

    def fair_shares(
        self, cluster: ClusterState, demand: Iterable[PodInfo] | None = None
    ) -> dict[str, float]:
        """Per queue, the weighted max-min fair share of cluster GPUs in milli-GPU, capped by
        demand = what the queue holds in ``cluster`` plus the GPU asks of ``demand`` (pending
        pods). Static mode caps by the nominal quota instead. Pure: ``cluster`` is not changed.
        """
        self.book.sync(cluster)
        want: dict[str, float] = {
            q: float(u[DIM_GPU]) for q, u in self.book.usage.items() if u[DIM_GPU] > 0
        }
        for pod in demand or ():
            t = self.resolver.resolve(pod)
            if t.error is None and pod.uid not in cluster.placements:
                want[t.queue] = want.get(t.queue, 0.0) + pod.gpu.count * (
                    1000 if pod.gpu.is_whole else pod.gpu.milli
                )
        return self.book.gpu_fair_shares(want)

    # ---- one attempt -------------------------------------------------------------------------
    def try_place(self, pod: PodInfo, cluster: ClusterState, now: float) -> ScheduleResult:
        """One attempt for one pod; on success the placement is assumed in ``cluster``."""
        result = self.scheduler.schedule(pod, cluster)
        if result.ok and result.node is not None:
            cluster.assign(pod, result.node, result.devices, started=now)
        return result

    # ---- the cycle -------------------------------------------------------------------------
    def cycle(self, cluster: ClusterState, pending: Sequence[PodInfo], now: float) -> CycleResult:
        """Try every pending pod (or pod group) once, in this engine's order.

        Pods whose exact shape already failed in this cycle are not retried until something is
        released: placements only consume capacity, so they would fail again (pods with
        inter-pod affinity excepted).
        """
        out = CycleResult()
        self.book.sync(cluster)
        self._bound_now = set()
        pending = [p for p in pending if p.uid not in cluster.placements]
        # Gated pods are not pending work yet: no attempt, no share of the queue's demand.
        gated = [p for p in pending if p.scheduling_gates]
        if gated:
            out.unschedulable.extend(Unschedulable(p, gated_reason(p)) for p in gated)
            pending = [p for p in pending if not p.scheduling_gates]
        if self.ordering == "kube-default":
            self._kube_cycle(cluster, pending, now, out)
        else:
            self.history.advance(now, self._history_shares())
            self._fair_cycle(cluster, pending, now, out)
            self.history.set_current(self._history_shares())
        self.book.mark_synced(cluster)
        for key, res in self.reservations.items():
            out.reserved[key] = list(res.node_names)
        if self.reservations:
            self._explain_reservations(cluster, out)
        self.preemptions += sum(1 for e in out.evictions if e.kind != "gang-timeout")
        return out

    def _explain_reservations(self, cluster: ClusterState, out: CycleResult) -> None:
        """Tell a held job's pending pods where GPUs are held for them and when those should
        be free: the latest declared end (``fairgpu.io/duration-seconds``) of the pods on the
        held nodes. The time is absolute, so the reason stays the same from cycle to cycle."""
        notes: dict[str, str] = {}
        for item in out.unschedulable:
            group = self.resolver.pod_group(item.pod)
            key = group.key if group is not None else item.pod.uid
            if key not in self.reservations:
                key = item.pod.uid  # a member of a group that already runs goes alone
            res = self.reservations.get(key)
            if res is None:
                continue
            note = notes.get(key)
            if note is None:
                names = res.node_names
                held = ", ".join(names[:3]) + (
                    f" and {len(names) - 3} more" if len(names) > 3 else ""
                )
                ends = [drain_estimate(cluster, int(i)) for i in res.nodes if i < cluster.size]
                end = max(ends, default=math.inf)
                when = (
                    f"expected free by {self.time_label(end)} (the declared run times there)"
                    if math.isfinite(end)
                    else "when they free up is unknown (pods there declare no run time)"
                )
                note = notes[key] = f"; GPUs are held for it on {held}, {when}"
            item.reason += note

    # ---- kube-default baseline ---------------------------------------------------------------
    def _kube_cycle(
        self, cluster: ClusterState, pending: list[PodInfo], now: float, out: CycleResult
    ) -> None:
        ctx = _CycleCtx(cluster, now, out)
        enabled = self.tenancy.preemption.enabled
        lowest = min((p.priority for p in cluster.pods.values()), default=0)
        for pod in kube_default_order(pending):
            reason = self.book.namespace_never_fits(pod)
            if reason:
                out.unschedulable.append(Unschedulable(pod, reason, False))
                continue
            reason = self.book.namespace_admit(pod)
            if reason:
                out.unschedulable.append(Unschedulable(pod, reason))
                continue
            ask = _ask(pod)
            known = ctx.front.find(*ask) if ask is not None else None
            if known is not None:
                reason = known
            else:
                result = self.scheduler.schedule(pod, cluster)
                if result.ok and result.node is not None:
                    self._assume(cluster, pod, result.node, result.devices, now, out)
                    lowest = min(lowest, pod.priority)
                    continue
                reason = result.reason()
                if result.code == Code.UNRESOLVABLE:
                    out.unschedulable.append(Unschedulable(pod, reason, False))
                    continue
                if ask is not None:
                    ctx.front.add(*ask, reason)
            pgroup = None if ask is None else (pod.priority, *ask[0])
            tried = pgroup is not None and ctx.preempt_front.find(pgroup, ask[1]) is not None
            if (
                enabled
                and pod.preemption_policy != "Never"
                and pod.priority > lowest
                and not tried
                and ctx.preempt_attempts < MAX_PREEMPTION_ATTEMPTS
            ):
                ctx.preempt_attempts += 1
                victims = [
                    uid
                    for uid, p in cluster.pods.items()
                    if p.priority < pod.priority and uid not in self._bound_now
                ]
                plan = find_preemption(pod, cluster, self.scheduler, victims)
                if plan is not None and self._apply_plan(cluster, pod, plan, now, out, "priority"):
                    ctx.forget()
                    continue
                if pgroup is not None and ask is not None:
                    ctx.preempt_front.add(pgroup, ask[1], reason)
            out.unschedulable.append(Unschedulable(pod, reason))

    # ---- fair ------------------------------------------------------------------------------
    def _history_shares(self) -> dict[str, float]:
        shares: dict[str, float] = {}
        for q, u in self.book.usage.items():
            shares[q] = self.book.dominant(u)
        for p, u in self.book.parent_usage.items():
            shares["/" + p] = self.book.dominant(u)
        return shares

    def _blend(self, key: str, instant: float, weight: float) -> float:
        if not self.history.enabled:
            return instant
        a = self.tenancy.history.weight
        return (1 - a) * instant + a * self.history.value(key) / weight

    def _order_key(self, queue: str) -> tuple[float, float, str]:
        book = self.book
        lim = book.queue_limits(queue)
        qs = self._blend(queue, book.queue_share(queue), lim.weight)
        if lim.parent:
            top = self._blend(
                "/" + lim.parent, book.top_share(queue), book.parent_weight(lim.parent)
            )
        else:
            top = qs
        return (top, qs, queue)

    def _build_jobs(
        self, pending: list[PodInfo], now: float, out: CycleResult
    ) -> dict[str, dict[str, list[Job]]]:
        queues: dict[str, dict[str, list[Job]]] = {}
        groups: dict[str, list[PodInfo]] = {}
        singles: list[tuple[PodInfo, PodGroupRef | None]] = []
        for pod in pending:
            ref = self.resolver.pod_group(pod)
            if ref is None:
                singles.append((pod, None))
            else:
                groups.setdefault(ref.key, []).append(pod)
        jobs: list[Job] = []
        for pod, _ in singles:
            jobs.append(Job(pod.uid, [pod], self.resolver.resolve(pod)))
        for key, members in groups.items():
            members.sort(key=lambda p: (-p.priority, p.created, p.uid))
            ref = self.resolver.pod_group(members[0])
            assert ref is not None
            tenant = self.resolver.resolve(members[0])
            running = len(self.book.group_running.get(key, ()))
            if ref.min_member is None:
                reason = self.resolver.pod_group_errors.get(key) or (
                    f"pod group {key}: minMember unknown (no PodGroup registered and no "
                    f"{self.tenancy.gang.min_member_annotation} annotation)"
                )
                out.unschedulable.extend(Unschedulable(p, reason) for p in members)
                continue
            need = max(0, ref.min_member - running)
            if need == 0:
                # The group already runs with minMember: further members go one by one.
                jobs.extend(Job(p.uid, [p], tenant, ref) for p in members)
                continue
            if len(members) < need:
                reason = (
                    f"pod group {key}: waiting for members, {running} running + "
                    f"{len(members)} pending < minMember {ref.min_member}"
                )
                out.unschedulable.extend(Unschedulable(p, reason) for p in members)
                continue
            jobs.append(Job(key, members, tenant, ref, need))
        for job in jobs:
            queues.setdefault(job.tenant.queue, {}).setdefault(job.tenant.user, []).append(job)
        for users in queues.values():
            for lst in users.values():
                lst.sort(key=lambda j: j.sort_key)
        return queues

    def _expire(
        self, cluster: ClusterState, pending_keys: set[str], now: float, out: CycleResult
    ) -> None:
        """Gang timeout: release groups stuck below minMember, and stale reservations."""
        timeout = self.tenancy.gang.timeout_seconds
        for key in list(self._partial_since):
            running = self.book.group_running.get(key, set())
            if not running:
                del self._partial_since[key]
        for key, uids in self.book.group_running.items():
            if not uids:
                continue
            some = cluster.pods.get(next(iter(uids)))
            ref = self.resolver.pod_group(some) if some is not None else None
            if ref is None or ref.min_member is None or len(uids) >= ref.min_member:
                self._partial_since.pop(key, None)
                continue
            since = self._partial_since.setdefault(key, now)
            if now - since < timeout:
                continue
            reason = (
                f"pod group {key} ran with {len(uids)} < minMember {ref.min_member} for "
                f"more than {timeout:g}s; releasing its pods"
            )
            for uid in sorted(uids):
                pod = cluster.pods.get(uid)
                if pod is None:
                    continue
                cluster.release(uid)
                self.book.remove(uid)
                out.evictions.append(Evict(pod, None, reason, "gang-timeout"))
            del self._partial_since[key]
        for key in list(self.reservations):
            res = self.reservations[key]
            if key not in pending_keys or now - res.since > timeout:
                del self.reservations[key]
                if key in pending_keys:
                    self._blocked_since[key] = now  # wait again before the next reservation
        for key in list(self._blocked_since):
            if key not in pending_keys:
                del self._blocked_since[key]

    def _fair_cycle(
        self, cluster: ClusterState, pending: list[PodInfo], now: float, out: CycleResult
    ) -> None:
        queues = self._build_jobs(pending, now, out)
        pending_keys = {j.key for users in queues.values() for lst in users.values() for j in lst}
        self._deserved = self._deserved_shares(queues)
        self._expire(cluster, pending_keys, now, out)
        cursors: dict[str, dict[str, deque[Job]]] = {
            q: {u: deque(lst) for u, lst in users.items()} for q, users in queues.items()
        }
        self._keys = {q: self._order_key(q) for q in cursors}
        ctx = _CycleCtx(cluster, now, out)
        ctx.drain = {
            int(i): drain_estimate(cluster, int(i))
            for res in self.reservations.values()
            for i in res.nodes
            if i < cluster.size
        }
        user_keys = ctx.user_keys
        while cursors:
            queue = min(cursors, key=self._keys.__getitem__)
            users = cursors[queue]
            user = min(users, key=lambda u: self._user_key(user_keys, queue, u))
            job = users[user].popleft()
            if not users[user]:
                del users[user]
                if not users:
                    del cursors[queue]
            changed = self._try_job(job, ctx)
            if changed:
                self._refresh_keys(changed, cursors)
                for key in [k for k in user_keys if k[0] in changed]:
                    del user_keys[key]

    def _user_key(
        self, cache: dict[tuple[str, str], tuple[float, str]], queue: str, user: str
    ) -> tuple[float, str]:
        key = cache.get((queue, user))
        if key is None:
            key = (self.book.user_share(queue, user), user)
            cache[(queue, user)] = key
        return key

    def _deserved_shares(self, queues: dict[str, dict[str, list[Job]]]) -> dict[str, float]:
        """Each queue's fair share in dominant-share units (cluster = 1): two-level weighted
        max-min, capped by its demand (what it holds plus everything it has pending)."""
        book = self.book
        demand: dict[str, float] = {}
        for q, users in queues.items():
            vec = book.used(q).copy()
            for lst in users.values():
                for job in lst:
                    for p in job.pods:
                        vec += book.pending_vector(p)
            demand[q] = book.dominant(vec)
        for q, used in book.usage.items():
            if q not in demand:
                demand[q] = book.dominant(used)
        return hierarchical_fair_shares(
            1.0,
            demand,
            book.weight,
            lambda q: book.queue_limits(q).parent,
            book.parent_weight,
        )

    def _may_reclaim_from(self, queue: str, other: str) -> bool:
        """Reclaim needs the preemptor's queue below its fair share and the victim's above
        its own — or the preemptor within its nominal quota and the victim borrowing — and
        the pairwise order of :meth:`reclaim_key` (which is what rules out cycles)."""
        mine, theirs = self.reclaim_key(queue), self.reclaim_key(other)
        if not mine < theirs:
            return False
        if mine[0] == 0 and theirs[0] == 1:
            return True
        book = self.book
        deserved = self._deserved
        below = book.dominant(book.used(queue)) < deserved.get(queue, 0.0) - 1e-9
        above = book.dominant(book.used(other)) > deserved.get(other, 0.0) + 1e-9
        return below and above

    def _refresh_keys(self, changed: set[str], cursors: dict[str, dict[str, deque[Job]]]) -> None:
        parents = {self.book.queue_limits(q).parent for q in changed} - {""}
        for q in cursors:
            if q in changed or self.book.queue_limits(q).parent in parents:
                self._keys[q] = self._order_key(q)

    # ---- one job -------------------------------------------------------------------------
    def _try_job(self, job: Job, ctx: _CycleCtx) -> set[str]:
        """Place ``job`` (or explain why not); returns the queues whose usage changed."""
        out = ctx.out
        tenant = job.tenant
        if tenant.error:
            out.unschedulable.extend(Unschedulable(p, tenant.error, False) for p in job.pods)
            return set()
        fast: tuple[object, ...] | None = None
        if job.group is None:
            head = job.pods[0]
            memo = self._memo_key(head)
            if memo is not None:
                # Within a cycle, and until something is evicted, a queue's usage and the
                # cluster's load only grow: the same ask from the same queue fails again.
                fast = (tenant.queue, memo, head.priority)
                known = ctx.outcome.get(fast)
                if known is not None:
                    out.unschedulable.append(Unschedulable(head, known[0], known[1]))
                    if head.gpu.count >= self.tenancy.starvation.min_gpus:
                        self._blocked(job, ctx)
                    return set()
        n_before = len(out.unschedulable)
        changed = self._try_job_slow(job, ctx)
        if fast is not None and not changed and len(out.unschedulable) > n_before:
            last = out.unschedulable[-1]
            ctx.outcome[fast] = (last.reason, last.resolvable)
        return changed

    def _try_job_slow(self, job: Job, ctx: _CycleCtx) -> set[str]:
        out = ctx.out
        tenant = job.tenant
        book = self.book
        pods = job.pods
        vecs = [book.pending_vector(p) for p in pods]
        need_vec = sum(vecs[: job.need], start=np.zeros_like(vecs[0]))
        for pod in pods:
            if pod.error:
                out.unschedulable.append(Unschedulable(pod, pod.error, False))
        if any(p.error for p in pods):
            return set()
        reason = book.never_fits(tenant.queue, need_vec) or book.namespace_never_fits(pods[0])
        if reason:
            out.unschedulable.extend(Unschedulable(p, reason, False) for p in pods)
            return set()
        reason = book.admit(tenant.queue, need_vec)
        if reason:
            out.unschedulable.extend(Unschedulable(p, reason) for p in pods)
            return set()
        if job.group is None:
            return self._try_single(job, vecs[0], ctx)
        return self._try_gang(job, ctx)

    def _allowed(self, job: Job, pod: PodInfo, ctx: _CycleCtx) -> np.ndarray | None:
        others = [r for k, r in self.reservations.items() if k != job.key]
        if not others:
            return None
        return backfill_mask(pod, ctx.cluster, others, ctx.drain, ctx.now)

    def _memo_key(self, pod: PodInfo) -> tuple[object, ...] | None:
        shape = _shape(pod)
        if shape is None:
            return None
        if self.reservations:
            return (*shape, declared_runtime(pod))
        return shape

    def _try_single(self, job: Job, vec: np.ndarray, ctx: _CycleCtx) -> set[str]:
        pod = job.pods[0]
        out = ctx.out
        reason = self.book.namespace_admit(pod)
        if reason:
            out.unschedulable.append(Unschedulable(pod, reason))
            return set()
        allowed = self._allowed(job, pod, ctx)
        ask = _ask(pod) if allowed is None else None
        known = ctx.front.find(*ask) if ask is not None else None
        if known is not None:
            reason = known
        else:
            result = self.scheduler.schedule(pod, ctx.cluster, restrict=allowed)
            if result.ok and result.node is not None:
                self._assume(ctx.cluster, pod, result.node, result.devices, ctx.now, out)
                self._placed(job)
                return {job.tenant.queue}
            reason = result.reason()
            if result.code == Code.UNRESOLVABLE:
                out.unschedulable.append(Unschedulable(pod, reason, False))
                return set()
            if ask is not None:
                ctx.front.add(*ask, reason)
        pgroup = None if ask is None else (job.tenant.queue, pod.priority, *ask[0])
        tried = pgroup is not None and ctx.preempt_front.find(pgroup, ask[1]) is not None
        if not tried and ctx.preempt_attempts < MAX_PREEMPTION_ATTEMPTS:
            ctx.preempt_attempts += 1
            changed = self._try_preempt(job, pod, vec, allowed, ctx)
            if changed:
                self._placed(job)
                return changed
            if pgroup is not None and ask is not None:
                ctx.preempt_front.add(pgroup, ask[1], reason)
        self._blocked(job, ctx)
        out.unschedulable.append(Unschedulable(pod, reason))
        return set()

    def _try_gang(self, job: Job, ctx: _CycleCtx) -> set[str]:
        out = ctx.out
        cluster = ctx.cluster
        stmt = Statement(cluster, self.book, ctx.now)
        placed: list[tuple[PodInfo, int, tuple[int, ...], tuple[str, ...]]] = []
        first_reason = ""
        caps_reason = ""
        for pod in job.pods:
            caps_reason = self.book.namespace_admit(pod) or ""
            if caps_reason:
                first_reason = first_reason or caps_reason
                continue
            allowed = self._allowed(job, pod, ctx)
            result = self.scheduler.schedule(pod, cluster, restrict=allowed)
            if result.ok and result.node is not None:
                stmt.assign(pod, result.node, result.devices)
                placed.append((pod, result.node, result.devices, ()))
                continue
            first_reason = first_reason or result.reason()
            plan = self._plan(job, pod, self.book.pending_vector(pod), allowed, ctx)
            if plan is None:
                if len(placed) >= job.need:
                    continue
                break
            before = len(stmt.evicted)
            for victim in plan.victims:
                stmt.evict(victim, pod)
            retry = self.scheduler.schedule(pod, cluster, restrict=_only(cluster, plan.node))
            if not retry.ok or retry.node is None:
                break
            stmt.assign(pod, retry.node, retry.devices)
            waits = tuple(v.uid for v, _, _ in stmt.evicted[before:])
            placed.append((pod, retry.node, retry.devices, waits))
        if len(placed) < job.need:
            stmt.discard()
            reason = (
                f"pod group {job.key}: only {len(placed)} of {job.need} needed members fit "
                f"together ({first_reason or 'no room'})"
            )
            out.unschedulable.extend(Unschedulable(p, reason) for p in job.pods)
            self._blocked(job, ctx)
            return set()
        changed = {job.tenant.queue}
        for victim, _, preemptor in stmt.evicted:
            vt = self.resolver.resolve(victim)
            kind = "priority" if vt.queue == job.tenant.queue else "reclaim"
            out.evictions.append(
                Evict(victim, preemptor, f"preempted by pod group {job.key} ({kind})", kind)
            )
            changed.add(vt.queue)
        placed_uids = set()
        for pod, node, devices, waits in placed:
            out.binds.append(Bind(pod, cluster.node(node).name, devices, waits))
            self._bound_now.add(pod.uid)
            placed_uids.add(pod.uid)
        for pod in job.pods:
            if pod.uid not in placed_uids:
                out.unschedulable.append(
                    Unschedulable(pod, first_reason or "no room beyond minMember")
                )
        if stmt.evicted:
            ctx.forget()
        self._placed(job)
        return changed

    # ---- bookkeeping helpers -----------------------------------------------------------------
    def _assume(
        self,
        cluster: ClusterState,
        pod: PodInfo,
        node: int,
        devices: tuple[int, ...],
        now: float,
        out: CycleResult,
        wait_for: tuple[str, ...] = (),
    ) -> None:
        stmt = Statement(cluster, self.book, now)
        stmt.assign(pod, node, devices)
        out.binds.append(Bind(pod, cluster.node(node).name, devices, wait_for))
        self._bound_now.add(pod.uid)

    def _placed(self, job: Job) -> None:
        self._blocked_since.pop(job.key, None)
        self.reservations.pop(job.key, None)

    def _blocked(self, job: Job, ctx: _CycleCtx) -> None:
        """A job at the head of fair order did not fit: start or check its starvation clock."""
        cfg = self.tenancy.starvation
        if not cfg.enabled or job.key in self.reservations:
            return
        needed = job.pods[: job.need]
        large = whole_gpus(needed) >= cfg.min_gpus or (
            job.group is not None and job.need >= cfg.min_gang_pods
        )
        if not large:
            return
        since = self._blocked_since.setdefault(job.key, ctx.now)
        if ctx.now - since < cfg.reserve_after_seconds:
            return
        cluster = ctx.cluster
        taken = np.zeros(cluster.size, dtype=bool)
        for res in self.reservations.values():
            taken[res.nodes[res.nodes < cluster.size]] = True
        nodes = choose_reservation(
            needed,
            cluster,
            lambda p: self.scheduler.static_mask(p, cluster),
            taken,
            self.scheduler.ranks(cluster),
        )
        if nodes is None:
            return
        head = needed[0]
        per_node = max(1, -(-len(needed) // len(nodes)))
        res = Reservation(
            job.key,
            job.tenant.queue,
            nodes,
            ctx.now,
            cpu=float(head.requests.get(CPU, 0) * per_node),
            memory=float(head.requests.get(MEMORY, 0) * per_node),
            node_names=[cluster.node(int(i)).name for i in nodes],
        )
        self.reservations[job.key] = res
        for i in nodes:
            ctx.drain[int(i)] = drain_estimate(cluster, int(i))

    # ---- preemption ------------------------------------------------------------------------
    def reclaim_key(self, queue: str, deltas: dict[str, np.ndarray] | None = None) -> tuple:
        """The order reclaim respects: (borrowing beyond nominal?, department share, queue
        share), instantaneous; ``deltas`` applies hypothetical changes (queue -> vector)."""
        d = (deltas or {}).get(queue)
        book = self.book
        return (
            0 if book.within_nominal(queue, d) else 1,
            book.top_share(queue, deltas),
            book.queue_share(queue, d),
        )

    def reclaim_allowed(self, queue: str, vec: np.ndarray, victims: list[PodInfo]) -> bool:
        """May ``queue`` take ``vec`` by evicting ``victims`` of other queues? (The rule in
        the module docstring; victims of ``queue`` itself are not judged here.)"""
        by_queue: dict[str, np.ndarray] = {}
        for v in victims:
            entry = self.book.entries.get(v.uid)
            if entry is None:
                return False
            q = entry.tenant.queue
            if q == queue:
                continue
            by_queue[q] = by_queue.get(q, np.zeros_like(vec)) - entry.vec
        if not by_queue:
            return True
        deltas = dict(by_queue)
        deltas[queue] = vec.copy()
        for v_queue in by_queue:
            if not self.reclaim_key(queue) < self.reclaim_key(v_queue):
                return False
            if not self.reclaim_key(queue, deltas) <= self.reclaim_key(v_queue, deltas):
                return False
        return True

    def _candidate_sets(self, job: Job, pod: PodInfo, ctx: _CycleCtx) -> list[list[str]]:
        """Victim pools to try in order: each queue above the preemptor's (most above first),
        then the preemptor's own lower-priority pods, then all of those together."""
        cfg = self.tenancy
        if not cfg.preemption.enabled or pod.preemption_policy == "Never":
            return []
        book = self.book
        queue = job.tenant.queue
        lim = book.queue_limits(queue)
        min_run = cfg.preemption.min_runtime_seconds
        placements = ctx.cluster.placements
        members = {p.uid for p in job.pods}

        def usable(uid: str) -> bool:
            return (
                uid not in self._bound_now
                and uid not in members
                and uid in placements
                and ctx.now - placements[uid].started >= min_run
            )

        sets: list[list[str]] = []
        if lim.preemption.reclaim:
            above = []
            for other, uids in book.queue_pods.items():
                if other == queue or not uids:
                    continue
                if not book.queue_limits(other).preemption.preemptible:
                    continue
                if self._may_reclaim_from(queue, other):
                    above.append((self.reclaim_key(other), other))
            for _, other in sorted(above, reverse=True)[:MAX_RECLAIM_QUEUES]:
                sets.append(sorted(u for u in book.queue_pods[other] if usable(u)))
        if lim.preemption.within_queue == "LowerPriority":
            own = []
            for uid in book.queue_pods.get(queue, ()):
                p = ctx.cluster.pods.get(uid)
                if p is not None and p.priority < pod.priority and usable(uid):
                    own.append(uid)
            sets.append(sorted(own))
        sets = [s for s in sets if s]
        if len(sets) > 1:
            sets.append(sorted({u for s in sets for u in s}))
        return sets

    def _plan(
        self,
        job: Job,
        pod: PodInfo,
        vec: np.ndarray,
        allowed: np.ndarray | None,
        ctx: _CycleCtx,
    ) -> PreemptionPlan | None:
        queue = job.tenant.queue
        for eligible in self._candidate_sets(job, pod, ctx):
            plan = find_preemption(
                pod,
                ctx.cluster,
                self.scheduler,
                eligible,
                allowed,
                accept=lambda victims: self.reclaim_allowed(queue, vec, victims),
            )
            if plan is not None:
                return plan
        return None

    def _try_preempt(
        self,
        job: Job,
        pod: PodInfo,
        vec: np.ndarray,
        allowed: np.ndarray | None,
        ctx: _CycleCtx,
    ) -> set[str]:
        plan = self._plan(job, pod, vec, allowed, ctx)
        if plan is None:
            return set()
        queue = job.tenant.queue
        changed = {queue}
        for v in plan.victims:
            changed.add(self.resolver.resolve(v).queue)
        kind = "reclaim" if changed != {queue} else "priority"
        if not self._apply_plan(ctx.cluster, pod, plan, ctx.now, ctx.out, kind):
            return set()
        ctx.forget()
        return changed

    def _apply_plan(
        self,
        cluster: ClusterState,
        pod: PodInfo,
        plan: PreemptionPlan,
        now: float,
        out: CycleResult,
        kind: str,
    ) -> bool:
        stmt = Statement(cluster, self.book, now)
        for victim in plan.victims:
            stmt.evict(victim, pod)
        result = self.scheduler.schedule(pod, cluster, restrict=_only(cluster, plan.node))
        if not result.ok or result.node is None:
            stmt.discard()
            return False
        for victim in plan.victims:
            vq = self.resolver.resolve(victim).queue
            pq = self.resolver.resolve(pod).queue
            k = kind if self.ordering == "kube-default" else ("priority" if vq == pq else "reclaim")
            out.evictions.append(
                Evict(
                    victim,
                    pod,
                    f"preempted by {pod.key} ({k}) on {cluster.node(plan.node).name}",
                    k,
                )
            )
        self._assume(
            cluster,
            pod,
            result.node,
            result.devices,
            now,
            out,
            wait_for=tuple(v.uid for v in plan.victims),
        )
        return True


class _Front:
    """Failed asks per pod group key, kept as a list of request vectors: an ask that needs at
    least as much of everything as one that already failed (same selectors, tolerations,
    namespace and other resources) fails too, since placements in a cycle only take capacity.
    """

    def __init__(self) -> None:
        self._fronts: dict[tuple[object, ...], tuple[list[np.ndarray], list[str]]] = {}

    def find(self, group: tuple[object, ...], vec: np.ndarray) -> str | None:
        entry = self._fronts.get(group)
        if entry is None:
            return None
        arr = np.asarray(entry[0])
        hit = np.flatnonzero((vec >= arr).all(axis=1))
        return entry[1][int(hit[0])] if hit.size else None

    def add(self, group: tuple[object, ...], vec: np.ndarray, reason: str) -> None:
        vecs, reasons = self._fronts.setdefault(group, ([], []))
        if len(vecs) < 256:
            vecs.append(vec)
            reasons.append(reason)

    def clear(self) -> None:
        self._fronts.clear()


def _ask(pod: PodInfo) -> tuple[tuple[object, ...], np.ndarray] | None:
    """(group, vector) for :class:`_Front`, or None for pods it cannot judge."""
    if pod.has_pod_affinity or pod.spread_constraints or pod.host_ports or pod.error:
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


@dataclass(slots=True)
class _CycleCtx:
    cluster: ClusterState
    now: float
    out: CycleResult
    outcome: dict[tuple[object, ...], tuple[str, bool]] = field(default_factory=dict)
    user_keys: dict[tuple[str, str], tuple[float, str]] = field(default_factory=dict)
    front: _Front = field(default_factory=_Front)
    preempt_front: _Front = field(default_factory=_Front)
    preempt_attempts: int = 0

    def forget(self) -> None:
        """Capacity was released (evictions): earlier failures may now succeed."""
        self.outcome.clear()
        self.front.clear()
        self.preempt_front.clear()

    drain: dict[int, float] = field(default_factory=dict)


def _only(cluster: ClusterState, node: int) -> np.ndarray:
    mask = np.zeros(cluster.size, dtype=bool)
    mask[node] = True
    return mask


def _shape(pod: PodInfo) -> tuple[object, ...] | None:
    if pod.has_pod_affinity or pod.spread_constraints or pod.host_ports or pod.error:
        return None
    return (pod.static_key(), tuple(sorted(pod.requests.items())), pod.gpu, pod.namespace)
