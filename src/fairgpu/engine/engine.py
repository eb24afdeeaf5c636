"""The engine entry point both adapters call: one scheduling cycle over the pending pods.

A cycle opens a :class:`~fairgpu.engine.session.Session` over the :class:`ClusterState` it is
given, runs its ordering's actions (:mod:`fairgpu.engine.orderings`: ``fair`` or
``kube-default``), which *assume* every placement in the cluster through a statement (so later
pods in the same cycle see it), and returns the decisions. The simulator applies them at
simulated time; the live adapter posts the bindings and evictions and releases an assumed pod
whose bind fails.

Where each idea lives: queue orders in ``actions/order.py``, admission in ``actions/admit.py``,
placement (a pod alone is a gang of one) in ``actions/allocate.py``, victim policies in
``actions/preempt.py``, the reclaim rule (and why it cannot cycle) in ``actions/reclaim.py``,
starvation reservations in ``actions/reserve.py``, gang timeouts in
``actions/gang_timeout.py``, the transaction in ``statement.py``, memo keys in ``memo.py``,
identical followers of a failed pod in ``actions/settle.py``, pending work kept between
cycles in ``backlog.py``, reports of changed reasons only in ``report_changes.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import Literal

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.actions.order import kube_default_order
from fairgpu.engine.actions.preempt import MAX_PREEMPTION_ATTEMPTS, MAX_RECLAIM_QUEUES
from fairgpu.engine.actions.reclaim import ReclaimKey, reclaim_allowed, reclaim_key
from fairgpu.engine.actions.reserve import publish_reservations
from fairgpu.engine.backlog import Backlog, PendingChanges
from fairgpu.engine.decisions import (
    Bind,
    CycleResult,
    Deallocate,
    Displace,
    Evict,
    ReclaimNote,
    Unschedulable,
)
from fairgpu.engine.gang import Reservation
from fairgpu.engine.jobs import Job
from fairgpu.engine.orderings import CYCLES
from fairgpu.engine.plugins.dra_stale import stale_claim_to_free
from fairgpu.engine.plugins.scheduling_gates import gated_reason
from fairgpu.engine.policies import DEFAULT_POLICY, policy
from fairgpu.engine.profile import Profile
from fairgpu.engine.registry import Registry
from fairgpu.engine.report_changes import changed_reports
from fairgpu.engine.scheduler import Scheduler
from fairgpu.engine.session import EngineState, Session
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy.book import QueueBook
from fairgpu.tenancy.config import DIM_GPU, TenancyConfig, default_config
from fairgpu.tenancy.history import UsageHistory
from fairgpu.tenancy.resolve import PodGroupRef, Tenant, TenantResolver

__all__ = [
    "MAX_PREEMPTION_ATTEMPTS",
    "MAX_RECLAIM_QUEUES",
    "ORDERINGS",
    "Bind",
    "CycleResult",
    "Deallocate",
    "Displace",
    "Engine",
    "Evict",
    "Job",
    "Ordering",
    "Unschedulable",
    "kube_default_order",
]

Ordering = Literal["fair", "kube-default"]
_UID = attrgetter("uid")
# Evictions that are not preemptions (no preemptor): the releases of rules with a deadline.
NOT_PREEMPTIONS = ("gang-timeout", "backfill-overrun")
_GATES = attrgetter("scheduling_gates")
ORDERINGS: tuple[str, ...] = tuple(CYCLES)


class Engine:
    """Pure scheduling engine: state and pending pods in, decisions out.

    ``tenancy``: queues, quotas, preemption, gang and starvation settings (None: every
    namespace a queue of weight 1, dynamic mode). ``ordering``: ``fair`` or ``kube-default``.
    ``registry``: where the profile's plugin names are looked up (default: the built-ins).
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
        registry: Registry | None = None,
    ) -> None:
        if ordering not in ORDERINGS:
            raise ValueError(f"unknown ordering {ordering!r}; known: {', '.join(ORDERINGS)}")
        self.profile = profile or policy(DEFAULT_POLICY)
        self.scheduler = Scheduler(self.profile, seed, registry)
        self.ordering: Ordering = ordering
        self._cycle = CYCLES[ordering]()
        self.tenancy = tenancy or default_config()
        self.resolver = TenantResolver(self.tenancy)
        self.book = QueueBook(self.tenancy, self.resolver)
        self.state = EngineState(UsageHistory(self.tenancy.history.half_life_seconds))
        # Pending pods grouped into sorted lanes, kept between cycles (see backlog.py); with
        # keep_backlog False every cycle groups the pods it is given afresh (same decisions).
        self.backlog = Backlog(grouped=ordering == "fair")
        self.keep_backlog = True
        # How a point in time reads in a pending pod's reason (the live adapter: UTC).
        self.time_label = time_label or (lambda t: f"t={t:.0f} s")
        # Pods that may be placed but not preempt this cycle (the live adapter: preemptors whose
        # earlier victims still terminate on their nominated node). Empty in the simulator.
        self.no_preemption: frozenset[str] = frozenset()
        # Unbound pods that may be victims this cycle, displaced rather than evicted (the live
        # adapter: preemptors held while their victims go; see decisions.Displace). Empty in
        # the simulator, which holds nobody.
        self.displaceable: frozenset[str] = frozenset()
        # True where evicted pods terminate gracefully, holding their room meanwhile (the live
        # adapter): what a victim holds beyond its preemptor's ask stays held (lingering.py).
        self.victims_linger = False
        # Uids of batch/v1 Jobs that fail when one more of their pods is evicted (both
        # adapters): the running pods of one are a single victim (fragile_jobs.py).
        self.fragile_jobs: frozenset[str] = frozenset()
        # "namespace/name" of LeaderWorkerSets whose restartPolicy is None (both adapters):
        # their pods are victims one by one, not whole groups (leader_worker_groups.py).
        self.loose_leader_worker_sets: frozenset[str] = frozenset()
        # False: a pending pod's reason is reported only when it differs from the last one
        # reported for it (report_changes.py; for an adapter that keeps the last reason).
        self.report_unchanged = True

    @property
    def state(self) -> EngineState:
        """What the engine keeps between cycles (:class:`~fairgpu.engine.session.EngineState`).

        Setting it to a state carried over from another engine of the same policy (a
        forecast's, :func:`~fairgpu.sim.forecast.carry_state`) also hands this engine's
        plugins a copy of what that engine's plugins had learned (``EngineState.learned``):
        without it the same cluster would be scored with other typical shapes, and the
        forecast would place pods where the scheduler does not.
        """
        return self._state

    @state.setter
    def state(self, state: EngineState) -> None:
        if state.learned:
            self.scheduler.adopt(state.learned)
        state.learned = self.scheduler.learned()
        self._state = state

    # ---- configuration hooks for the adapters ------------------------------------------------
    def set_pod_group(self, namespace: str, name: str, min_member: int) -> None:
        """Register a PodGroup (coscheduling or Volcano) and its ``minMember``."""
        self.resolver.set_pod_group(namespace, name, min_member)
        self.backlog.reset()

    def remove_pod_group(self, namespace: str, name: str) -> None:
        """Forget a PodGroup (its object was deleted)."""
        self.resolver.remove_pod_group(namespace, name)
        self.backlog.reset()

    def set_pod_group_error(self, namespace: str, name: str, error: str) -> None:
        """A PodGroup object is invalid: its pods are reported unschedulable with ``error``."""
        self.resolver.set_pod_group_error(namespace, name, error)
        self.backlog.reset()

    def register_pod_groups(self, groups: dict[str, int]) -> None:
        """Register many PodGroups at once: ``namespace/name`` -> minMember."""
        for key, min_member in groups.items():
            namespace, _, name = key.partition("/")
            self.resolver.set_pod_group(namespace, name, min_member)
        self.backlog.reset()

    def forget_pod(self, uid: str) -> None:
        """A pod was deleted: drop what the engine cached about it."""
        self.resolver.forget(uid)

    # ---- questions the adapters ask ----------------------------------------------------------
    def tenant(self, pod: PodInfo) -> Tenant:
        """The queue, department and user ``pod`` is accounted to."""
        return self.resolver.resolve(pod)

    def pod_group(self, pod: PodInfo) -> PodGroupRef | None:
        """The pod group ``pod`` belongs to, or None."""
        return self.resolver.pod_group(pod)

    @property
    def reservations(self) -> dict[str, Reservation]:
        """Nodes held for starving jobs, by job key (read only)."""
        return self.state.reservations

    def has_reservations(self) -> bool:
        """Are nodes held for a starving job? (Then a cycle is due even without events.)"""
        return bool(self.state.reservations)

    def restore_reclaim(self, pod: PodInfo, note: ReclaimNote, now: float) -> bool:
        """Take back what placing ``pod`` reclaimed (its :class:`ReclaimNote`, written down
        by an adapter whose engine started afresh), while the reclaim cooldown still counts
        at ``now``: the node flows and the GPUs that changed tenant, as the cycle that
        placed it recorded them (a later record of the same kind wins). Returns whether it
        still counted."""
        if now - note.at > self.tenancy.preemption.reclaim_cooldown_seconds:
            return False
        queue = self.tenant(pod).queue
        reclaimed, changed = self.state.reclaimed, self.state.tenant_changed
        for node, victim in note.flows:
            key = (node, queue, victim)
            reclaimed[key] = max(reclaimed.get(key, note.at), note.at)
        for gpu in note.gpus:
            changed[gpu] = max(changed.get(gpu, note.at), note.at)
        return True

    def restore_torn_down(self, key: str) -> None:
        """Take back that a preemption tore pod group ``key`` down and it has not started
        again since (a :class:`Bind`'s ``tore_down``, written down by an adapter whose engine
        started afresh): it is protected when it does, as a reserved start is. The adapter
        leaves out groups running now; a group with no pod left is forgotten at the next
        cycle."""
        self.state.torn_down.add(key)

    def restore_protection(self, pod: PodInfo, until: float, now: float) -> bool:
        """Take back that ``pod``, started from its job's reservation, is no preemption
        victim until ``until`` (its Bind's ``protected_until``, written down by an adapter
        whose engine started afresh). Returns whether it still counted at ``now``."""
        if until <= now:
            return False
        protected = self.state.protected
        protected[pod.uid] = max(protected.get(pod.uid, until), until)
        return True

    @property
    def history(self) -> UsageHistory:
        """Decayed usage per queue (fair ordering)."""
        return self.state.history

    @property
    def preemptions(self) -> int:
        """Evictions made to place pods so far (gang timeouts not counted)."""
        return self.state.preemptions

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
                want[t.queue] = want.get(t.queue, 0.0) + self.book.pending_vector(pod)[DIM_GPU]
        return self.book.gpu_fair_shares(want)

    def reclaim_key(self, queue: str, deltas: dict[str, np.ndarray] | None = None) -> ReclaimKey:
        """See :func:`fairgpu.engine.actions.reclaim.reclaim_key`."""
        return reclaim_key(self.book, queue, deltas)

    def reclaim_allowed(self, queue: str, vec: np.ndarray, victims: list[PodInfo]) -> bool:
        """See :func:`fairgpu.engine.actions.reclaim.reclaim_allowed`."""
        return reclaim_allowed(self.book, queue, vec, victims)

    # ---- the cycle -------------------------------------------------------------------------
    def session(self, cluster: ClusterState, now: float) -> Session:
        """A session over ``cluster`` at ``now`` (the queue book synced to it)."""
        self.book.sync(cluster)
        return Session(
            cluster,
            now,
            self.book,
            self.resolver,
            self.scheduler,
            self.tenancy,
            self.state,
            self.time_label,
            no_preemption=self.no_preemption,
            displaceable=self.displaceable,
            victims_linger=self.victims_linger,
            fragile_jobs=self.fragile_jobs,
            loose_leader_worker_sets=self.loose_leader_worker_sets,
        )

    def cycle(
        self,
        cluster: ClusterState,
        pending: Sequence[PodInfo],
        now: float,
        changes: PendingChanges | None = None,
    ) -> CycleResult:
        """Try every pending pod (or pod group) once, in this engine's order.

        Pods whose exact shape already failed in this cycle are not retried until something is
        released: placements only consume capacity, so they would fail again (pods with
        inter-pod affinity excepted). The pending pods are kept grouped between cycles
        (:class:`~fairgpu.engine.backlog.Backlog`, updated by what changed in ``pending``,
        pod objects compared by identity); with :attr:`report_unchanged` off, a reason is
        reported only when it changed (:mod:`~fairgpu.engine.report_changes`).

        ``changes``: an adapter that knows what changed in ``pending`` since its previous
        call (:class:`~fairgpu.engine.backlog.PendingChanges`) hands it in, and the backlog
        is updated from it alone, not compared with all of ``pending`` -- a cycle that starts
        one pod of a backlog of thousands then costs as much as one with a short backlog.
        Such an adapter hands in no placed pod, as the simulator does (a bound pod leaves
        its pending pods, an evicted one comes back as a change). The first call with a
        source, and any call after the backlog was dropped or with an added pod already
        placed, compares all of ``pending`` as without it.
        """
        session = self.session(cluster, now)
        todo = pending
        placements = cluster.placements
        kept, backlog = self.keep_backlog, self.backlog
        if (
            kept
            and changes is not None
            and placements.keys().isdisjoint(map(_UID, changes.added))
            and backlog.follow(changes, self.resolver)
        ):
            gated = list(backlog.gated.values())
        else:
            if not placements.keys().isdisjoint(map(_UID, pending)):
                todo = [p for p in pending if p.uid not in placements]
            # Gated pods are not pending work yet: no attempt, no share of the queue's demand.
            gated = [p for p in todo if p.scheduling_gates] if any(map(_GATES, todo)) else []
            if gated:
                todo = [p for p in todo if not p.scheduling_gates]
            if kept:
                backlog.sync(todo, self.resolver)
                backlog.gated = {id(p): p for p in gated}
                backlog.following = None if changes is None else changes.source
            else:
                backlog.reset()
        if gated:
            session.out.unschedulable.extend(Unschedulable(p, gated_reason(p)) for p in gated)
        if kept:
            session.backlog = session.memo.kept = backlog
        session.report_unchanged = self.report_unchanged or not kept
        self._cycle.run(session, todo)
        self.book.mark_synced(cluster)
        publish_reservations(session)
        out = session.out
        _free_stale_claims(out, cluster)
        if not session.report_unchanged:
            out.unschedulable = changed_reports(
                out.unschedulable, self.backlog.alone, session.recorded
            )
        self.state.preemptions += sum(1 for e in out.evictions if e.kind not in NOT_PREEMPTIONS)
        return out


def _free_stale_claims(out: CycleResult, cluster: ClusterState) -> None:
    """Add the stale claim allocations that keep pending pods off nodes to ``out``
    (:mod:`~fairgpu.engine.plugins.dra_stale`), each claim once."""
    seen: set[str] = set()
    for u in out.unschedulable:
        if not u.pod.resource_claims:
            continue
        freed = stale_claim_to_free(u.pod, u.reason, cluster)
        if freed is not None and freed.claim not in seen:
            seen.add(freed.claim)
            out.deallocations.append(freed)
