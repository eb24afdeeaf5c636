"""Answers for users, computed by the engine over a read-only snapshot of the live cluster.

* :func:`explain_pod` -- why is this pod pending: its queue and user, its place in the fair
  order, its queue's share against its fair share, quota and borrowing, kube-scheduler's
  "0/N nodes are available" line, the nodes it would fit on were something freed (and what),
  what the next cycle would decide, the reservation or nomination it holds, and its predicted
  start (:func:`fairgpu.kube.forecaster.forecast_snapshot`, from declared run times, beside
  the one the running scheduler annotated, which also uses run times it learned); for a pod
  of a batch/v1 Job, running or pending, how far the Job is and when it is predicted to end;
* :func:`queue_rows` -- one row per queue: weight, fair share, allocated, pending, borrowed,
  the pods its Jobs are still to create, and when its backlog is predicted to drain (its last
  pending pod, or pod still to be created, to start);
* :func:`job_rows` -- one row per batch/v1 Job still running or to run: how far it is and
  when it is predicted to end;
* :func:`what_if` -- where pods not yet created would go now, or which rule stops them.

Every figure comes from the engine's own code (``Scheduler.schedule`` and its diagnosis,
``Engine.fair_shares``, the queue book, the fair order, ``find_preemption``, ``Engine.cycle``)
run over copies of the state :mod:`fairgpu.kube.snapshot` builds; nothing here decides
anything the engine would not. Results are plain dicts (``-o json`` prints them as they are).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.actions.gang_domains import confinement
from fairgpu.engine.actions.order import FairOrder, Lanes, kube_default_order, lanes
from fairgpu.engine.actions.preempt import FairVictims
from fairgpu.engine.actions.reclaim import (
    PoolShares,
    above_band,
    band_for,
    deserved_shares,
    held,
    may_reclaim_from,
    reclaim_refusal,
)
from fairgpu.engine.actions.reserve import protected_until
from fairgpu.engine.actions.victim_eligibility import cooling
from fairgpu.engine.decisions import CycleResult
from fairgpu.engine.engine import Engine
from fairgpu.engine.fragile_jobs import LABEL_JOBSET, fragile_key, job_groups
from fairgpu.engine.framework import AttemptError, CycleState
from fairgpu.engine.jobs import Job, build_jobs
from fairgpu.engine.leader_worker_groups import LABEL_GROUP_INDEX as LWS_GROUP_INDEX
from fairgpu.engine.leader_worker_groups import LABEL_NAME as LWS_NAME
from fairgpu.engine.leader_worker_groups import LABEL_SIZE as LWS_SIZE
from fairgpu.engine.leader_worker_groups import group_key as leader_worker_key
from fairgpu.engine.leader_worker_groups import groups as leader_worker_groups
from fairgpu.engine.preemption import find_preemption, victim_eligible
from fairgpu.engine.scheduler import Scheduler
from fairgpu.kube.cache import SchedulerCache
from fairgpu.kube.forecaster import ANN_PREDICTED_START, forecast_snapshot, time_label
from fairgpu.kube.reporter import PREDICTED_START
from fairgpu.kube.snapshot import Snapshot
from fairgpu.model.gpu import WHOLE
from fairgpu.model.pod import PodInfo
from fairgpu.sim.forecast import Forecast, JobFailure, forecast
from fairgpu.sim.job_backlog import JobAhead
from fairgpu.sim.learner import Runtimes
from fairgpu.sim.statefulset_controller import SetAhead
from fairgpu.tenancy.config import DIM_GPU

__all__ = ["explain_pod", "job_rows", "queue_rows", "what_if"]

#: How many nodes "would fit if freed" lists at most (each costs a preemption search).
MAX_FREED_NODES = 5


def _gpus(milli: float) -> float:
    """Milli-GPU as GPUs, rounded for people."""
    return round(float(milli) / WHOLE, 2)


def _finite(value: float) -> float | None:
    return None if not np.isfinite(value) else _gpus(value)


# ---- queues ---------------------------------------------------------------------------------
def _deserved(
    engine: Engine, cluster: ClusterState, pending: Sequence[PodInfo], now: float
) -> tuple[Any, list[Job], Lanes, dict[str, float]]:
    """A session at ``now``, the pending jobs, their lanes and the fair shares a cycle would
    judge reclaims by (pool-aware for queues with GPU work, as :class:`FairCycle` computes
    them)."""
    todo = [p for p in pending if not p.scheduling_gates]
    session = engine.session(cluster, now)
    annotation = engine.tenancy.gang.min_member_annotation
    jobs = build_jobs(todo, session.resolver, session.book, annotation, CycleResult())
    queues = lanes(jobs)
    return session, jobs, queues, deserved_shares(session.book, queues, session)


def _queue_state(
    engine: Engine, cluster: ClusterState, pending: Sequence[PodInfo], now: float
) -> dict:
    """Per queue: weight, fair share, allocated, quota, most it may hold, borrowed, its
    department's limit and holdings (when the department sets a limit), pending (GPUs). A
    queue with GPU work shows its pool-aware fair share of GPUs, the one reclaim is judged
    by."""
    fair = dict(engine.fair_shares(cluster, pending))
    deserved = _deserved(engine, cluster, pending, now)[3]
    if isinstance(deserved, PoolShares):
        fair.update({q: deserved[q] * deserved.gpu_cap for q in deserved.gpu_queues})
    book = engine.book
    queues: dict[str, dict[str, Any]] = {}
    names = set(fair) | set(book.usage) | {q.name for q in engine.tenancy.queues}
    parents = {q.parent for q in engine.tenancy.queues if q.parent}
    for q in sorted(names - parents):
        used = float(book.used(q)[DIM_GPU])
        nominal = float(book.nominal(q)[DIM_GPU])
        top = float(book.max_usage(q)[DIM_GPU])
        borrowed = max(0.0, used - nominal) if np.isfinite(nominal) else 0.0
        dept = book.department_limit(q)
        queues[q] = {
            "queue": q,
            "parent": book.queue_limits(q).parent,
            "weight": book.weight(q),
            "fair_share_gpus": _gpus(fair.get(q, 0.0)),
            "allocated_gpus": _gpus(used),
            "share": round(book.queue_share(q), 4),
            "nominal_gpus": _finite(nominal),
            "max_gpus": _finite(top),
            "borrowed_gpus": _gpus(borrowed),
            # A department's limit caps its queues together: what it holds beside it.
            "department_max_gpus": None if dept is None else _finite(dept.limit[DIM_GPU]),
            "department_allocated_gpus": None
            if dept is None
            else _gpus(book.department_used(dept.name)[DIM_GPU]),
            "pending_pods": 0,
            "pending_gpus": 0.0,
        }
    for pod in pending:
        if pod.scheduling_gates:
            continue
        t = engine.tenant(pod)
        row = queues.get(t.queue)
        if t.error is None and row is not None:
            row["pending_pods"] += 1
            row["pending_gpus"] = round(
                row["pending_gpus"] + _gpus(book.pending_vector(pod)[DIM_GPU]), 2
            )
    return queues


#: The window of ``queues``' preemption count, seconds.
PREEMPTION_WINDOW = 3600.0


def queue_rows(snapshot: Snapshot) -> list[dict[str, Any]]:
    """One row per queue (see :func:`_queue_state`), sorted by name, with
    ``preemptions_last_hour``: its pods preempted in the hour before the snapshot (None:
    unknown, the scheduler's Events could not be read), ``pods_to_create``: the pods its
    Jobs and StatefulSets are still to create (:mod:`fairgpu.sim.job_backlog`,
    :mod:`fairgpu.kube.statefulset_progress`), and ``drains_at``: when the
    last of its pending pods and of those is predicted to start (None: nothing pending, or
    unknown -- ``drain_known`` tells which)."""
    cache, engine = snapshot.build()
    rows = _queue_state(engine, cache.cluster, cache.schedulable(), snapshot.now)
    for name, row in rows.items():
        row["preemptions_last_hour"] = (
            None
            if snapshot.preemptions is None
            else sum(
                1
                for when, queue in snapshot.preemptions
                if queue == name and snapshot.now - PREEMPTION_WINDOW < when <= snapshot.now
            )
        )
    ahead = snapshot.jobs_ahead(cache, _no_runtime)
    sets = snapshot.sets_ahead(cache, _no_runtime)
    predicted, pending, _ = forecast_snapshot(
        snapshot,
        None,
        snapshot.forecast_budget,
        job_ends=any(j.future for j in ahead),
        set_drains=bool(sets),
    )
    by_queue: dict[str, list[str]] = {}
    for pod in pending:
        by_queue.setdefault(engine.tenant(pod).queue, []).append(pod.uid)
    # The Jobs and StatefulSets with pods still to create, by queue: (key, how many).
    to_come: dict[str, list[tuple[str, int]]] = {}
    for job in ahead:
        if job.future:
            queue = engine.tenant(job.future[0].pod).queue
            to_come.setdefault(queue, []).append((job.job.key, len(job.future)))
    for made in sets:
        queue = engine.tenant(made.future[0].pod).queue
        to_come.setdefault(queue, []).append((made.key, len(made.future)))
    for name, row in rows.items():
        uids, later = by_queue.get(name, []), to_come.get(name, [])
        drain = _drain(predicted, uids, [key for key, _ in later])
        row["drains_at"] = None if drain is None else snapshot.label(drain)
        row["drain_known"] = not (uids or later) or drain is not None
        row["pods_to_create"] = sum(n for _, n in later)
    return list(rows.values())


def job_rows(snapshot: Snapshot, namespace: str | None = None) -> list[dict[str, Any]]:
    """One row per batch/v1 Job still running or to run (of ``namespace``, or all), sorted
    by key: its queue, completions and those succeeded, its pods running and pending, those
    still to be created (:mod:`fairgpu.sim.job_backlog`), and when its last pod is predicted
    to end (``predicted_end``) or it to fail (``predicted_failure``, e.g. at its
    ``activeDeadlineSeconds``; ``end_known`` False: neither, the forecast could not see it
    through)."""
    cache, engine = snapshot.build()
    ahead = [
        j
        for j in snapshot.jobs_ahead(cache, _no_runtime)
        if namespace is None or j.job.key.partition("/")[0] == namespace
    ]
    if not ahead:
        return []
    predicted = forecast_snapshot(snapshot, None, snapshot.forecast_budget, job_ends=True)[0]
    rows = []
    for job in sorted(ahead, key=lambda j: j.job.key):
        mine = [cache.cluster.pods.get(u) or cache.pending.get(u) for u in job.existing]
        model = next((p for p in mine if p is not None), None)
        if model is None and job.future:
            model = job.future[0].pod
        row = job_progress(snapshot, job, predicted)
        row["queue"] = engine.tenant(model).queue if model is not None else None
        row["running"] = sum(1 for u in job.existing if u in cache.cluster.placements)
        row["pending"] = len(job.existing) - row["running"]
        row["end_known"] = row["predicted_end"] is not None or bool(row["predicted_failure"])
        rows.append(row)
    return rows


def _no_runtime(_pod: PodInfo) -> None:
    """Run times are not needed to count a Job's pods."""
    return None


def _drain(predicted: Forecast, uids: list[str], later: list[str]) -> float | None:
    """When the last of pending pods ``uids`` and of the pods Jobs and StatefulSets
    ``later`` (their keys) are to create is predicted to start; None when nothing waits or
    any of them has no prediction."""
    if not uids and not later:
        return None
    times = [predicted.job_drains.get(key, predicted.set_drains.get(key)) for key in later]
    if uids:
        times.append(predicted.drain(uids))
    if any(t is None for t in times):
        return None
    return max(t for t in times if t is not None)


def _leader_worker_group(cache: SchedulerCache, pod: PodInfo | None) -> dict[str, Any] | None:
    """The LeaderWorkerSet group ``pod`` belongs to (None: none), as its pods stand: the
    set, the group index, its size (the controller's annotation; None if unreadable), and
    how many of its pods run and wait."""
    key = leader_worker_key(pod) if pod is not None else ""
    if pod is None or not key:
        return None
    running = sum(1 for p in cache.cluster.pods.values() if leader_worker_key(p) == key)
    waiting = sum(1 for p in cache.pending.values() if leader_worker_key(p) == key)
    size = pod.annotations.get(LWS_SIZE, "")
    return {
        "set": f"{pod.namespace}/{pod.labels[LWS_NAME]}",
        "group": pod.labels[LWS_GROUP_INDEX],
        "size": int(size) if size.isdigit() else None,
        "running": running,
        "pending": waiting,
    }


def _deadline(snapshot: Snapshot, cache: SchedulerCache, pod: PodInfo | None) -> str | None:
    """When a running pod's ``activeDeadlineSeconds`` ends it at the latest (None: no
    deadline, or not running)."""
    if pod is None or pod.active_deadline is None:
        return None
    placement = cache.cluster.placements.get(pod.uid)
    return None if placement is None else snapshot.label(placement.started + pod.active_deadline)


def job_progress(snapshot: Snapshot, ahead: JobAhead, predicted: Forecast | None) -> dict[str, Any]:
    """How far a pod's Job is and when it is predicted to end (``predicted``: a forecast
    that followed Jobs to their end; None: not asked)."""
    end = None if predicted is None else predicted.job_ends.get(ahead.job.key)
    fails = None if predicted is None else predicted.job_failures.get(ahead.job.key)
    deadline = ahead.job.active_deadline
    return {
        "job": ahead.job.key,
        "completions": ahead.completions,
        "succeeded": ahead.succeeded,
        "pods_in_cluster": len(ahead.existing),
        "pods_to_create": len(ahead.future),
        "predicted_end": None if end is None else snapshot.label(end),
        "predicted_end_in_seconds": None if end is None else round(end - snapshot.now),
        "deadline": (
            None
            if deadline is None or ahead.job.created is None
            else snapshot.label(ahead.job.created + deadline)
        ),
        "predicted_failure": None if fails is None else _failure(snapshot, ahead, fails),
        "forecast_out_of_budget": None if predicted is None else predicted.out_of_budget,
    }


def _failure(snapshot: Snapshot, ahead: JobAhead, fails: JobFailure) -> dict[str, Any]:
    """A Job predicted to fail, in a report: when, its Failed condition's reason, why, and
    how many of its completions will have succeeded by then."""
    return {
        "at": snapshot.label(fails.at),
        "in_seconds": round(fails.at - snapshot.now),
        "reason": fails.reason,
        "why": fails.why,
        "succeeded_by_then": ahead.succeeded + fails.succeeded,
    }


def _job_of(snapshot: Snapshot, cache: SchedulerCache, pod: PodInfo | None) -> JobAhead | None:
    """The Job ``pod`` belongs to, as a forecast continues it (None: not a Job's, or its
    Job creates nothing more and has no other pod)."""
    if pod is None or pod.owner_kind != "Job":
        return None
    jobs = snapshot.jobs_ahead(cache, _no_runtime)
    return next((j for j in jobs if j.job.uid == pod.owner), None)


def _forecast_for(snapshot: Snapshot, job: JobAhead | None, made: SetAhead | None) -> Forecast:
    """The forecast of ``snapshot``, followed until ``job`` ends and ``made``'s last pod
    starts when there are such."""
    return forecast_snapshot(
        snapshot,
        None,
        snapshot.forecast_budget,
        job_ends=job is not None,
        set_drains=made is not None,
    )[0]


def _set_of(snapshot: Snapshot, cache: SchedulerCache, pod: PodInfo | None) -> SetAhead | None:
    """The pods still to be created by ``pod``'s StatefulSet, or that its start creates
    (a LeaderWorkerSet leader's workers); None when there are none."""
    if pod is None:
        return None
    sets = snapshot.sets_ahead(cache, _no_runtime)
    return next(
        (c for c in sets if c.gate == pod.uid or (pod.owner and c.owner == pod.owner)), None
    )


def set_progress(
    snapshot: Snapshot, cache: SchedulerCache, made: SetAhead, predicted: Forecast
) -> dict[str, Any]:
    """A controller's pods still to be created, in a report: its pods in the cluster now,
    those to come and how (at once, or each once the one before starts), and when the last
    is predicted to start (None: the forecast could not see it)."""
    present = [*cache.cluster.pods.values(), *cache.pending.values()]
    last = predicted.set_drains.get(made.key)
    # Its pods: those of its controller, and -- a LeaderWorkerSet group's leader and workers
    # having different ones -- those of its group.
    group = leader_worker_key(made.future[0].pod)
    mine = [
        p
        for p in present
        if (made.owner and p.owner == made.owner) or (group and leader_worker_key(p) == group)
    ]
    return {
        "controller": made.key,
        "pods_in_cluster": len(mine),
        "pods_to_create": len(made.future),
        "at_once": made.fan,
        "after": next((p.key for p in present if p.uid == made.gate), None) if made.gate else None,
        "last_start": None if last is None else snapshot.label(last),
        "last_start_in_seconds": None if last is None else round(last - snapshot.now),
        "forecast_out_of_budget": predicted.out_of_budget,
    }


def predicted_start(
    forecast: Forecast, uid: str, label: Callable[[float], str] = time_label
) -> dict[str, Any]:
    """The pod's predicted start in a report: as ``label`` writes times (RFC 3339 live) and
    in seconds from the snapshot."""
    t = forecast.start(uid)
    return {
        "predicted_start": None if t is None else label(t),
        "predicted_deleted": forecast.deleted.get(uid),
        "predicted_in_seconds": None if t is None else round(t - forecast.now),
        "forecast_complete": forecast.complete,
        "forecast_out_of_budget": forecast.out_of_budget,
    }


# ---- the fair order -------------------------------------------------------------------------
class _Rules:
    """Why the engine's victim policy would not let ``pod`` evict a running pod: the same
    conditions :class:`~fairgpu.engine.actions.preempt.FairVictims` checks, in words."""

    def __init__(
        self,
        engine: Engine,
        session: Any,
        deserved: dict,
        job: Any,
        pod: PodInfo,
        queues: Lanes | None = None,
    ):
        self.engine, self.s, self.deserved, self.job, self.pod = engine, session, deserved, job, pod
        self.allowed: set[str] = set()
        self.victims: FairVictims | None = None
        if job is not None and engine.ordering == "fair":
            # The pending jobs as the cycle's victim policy has them (a relocation must not
            # take room a waiting queue below its share may use).
            self.victims = FairVictims(session, deserved, queues)
            self.allowed = {u for uids in self.victims.candidate_sets(job, pod) for u in uids}

    def why_not(self, uid: str) -> str | None:
        """None if ``uid`` may be a victim of the pod; otherwise the rule that forbids it."""
        if uid in self.allowed:
            return None
        if self.victims is not None and uid in self.victims.shielded(self.pod):
            return "a pool precedence rule puts its workload type first on this node"
        s, pod, cluster = self.s, self.pod, self.s.cluster
        victim = cluster.pods[uid]
        if not s.tenancy.preemption.enabled:
            return "preemption is disabled"
        if pod.preemption_policy == "Never":
            return "the pod's preemptionPolicy is Never"
        if self.engine.ordering != "fair":
            return f"its priority {victim.priority} is not below {pod.priority}"
        ran = s.now - cluster.placements[uid].started
        if ran < s.tenancy.preemption.min_runtime_seconds:
            return f"it has run {ran:.0f} s, under minRuntimeSeconds"
        if self.job is None:
            return "the pod is not tried now (its pod group cannot start yet)"
        mine, theirs = self.job.tenant.queue, self.engine.tenant(victim).queue
        if mine == theirs:
            if s.book.queue_limits(mine).preemption.within_queue == "Never":
                return f"queue {mine} never preempts its own pods"
            if victim.priority < pod.priority:
                return self._protected(uid) or (
                    "its user is not another user the pod's user may take from (users' shares)"
                )
            return f"its priority {victim.priority} is not below {pod.priority}"
        cfg = s.tenancy.preemption
        if ran < cfg.reclaim_min_runtime_seconds:
            return f"it has run {ran:.0f} s, under reclaimMinRuntimeSeconds"
        return self._reclaim_why_not(uid, mine, theirs)

    def veto(self, victims: list[PodInfo], moved: frozenset[str]) -> str | None:
        """The reclaim rule's verdict on evicting ``victims`` together (None: allowed): after
        the move the preemptor's queue must not rank above a queue it took from (``moved``,
        :meth:`moved`: victims that would run elsewhere at once leave their queue what it
        held; those a pool precedence rule lets go are not judged)."""
        if self.job is None or self.victims is None:
            return None
        queue, book = self.job.tenant.queue, self.s.book
        # As the search judges it: a gang member with the members its group still needs.
        vec, band = self.victims.judged_by(self.job, self.pod)
        # What a pool precedence rule lets go answers to no share rule (as in the search).
        preceded = self.victims.preceded(self.job, self.pod)
        judged = [v for v in victims if v.uid not in preceded]
        return reclaim_refusal(book, queue, vec, judged, self.deserved, band, moved)

    def moved(self, victims: list[PodInfo]) -> frozenset[str]:
        """The ``victims`` that would run at once on nodes the pod may not use (a relocation,
        :mod:`~fairgpu.engine.actions.relocate`)."""
        if self.job is None or self.victims is None:
            return frozenset()
        return self.victims.moved(self.job, self.pod, victims)

    def _cooling(self, uid: str, mine: str, theirs: str) -> str:
        """Why a pod of a queue ``mine`` may reclaim from is held back all the same: its
        GPUs changed tenant within the cooldown, or taking it would reverse a reclaim
        ``theirs`` made from ``mine`` on its node (the two cooldown rules of
        :mod:`~fairgpu.engine.actions.reclaim`; protection is asked before)."""
        s = self.s
        cooldown = s.tenancy.preemption.reclaim_cooldown_seconds
        pl = s.cluster.placements[uid]
        node = s.cluster.node(pl.node).name
        changed = [s.state.tenant_changed.get((node, d)) for d in pl.devices]
        recent = [t for t in changed if cooling(t, pl.started) and s.now - t < cooldown]
        if recent:
            return (
                "it sits on GPUs that changed tenant at "
                f"{s.time_label(max(recent))}, within reclaimCooldownSeconds ({cooldown:g})"
            )
        when = s.state.reclaimed.get((node, theirs, mine))
        if when is not None and s.now - when <= cooldown:
            return (
                f"queue {theirs} reclaimed node {node} from queue {mine} at "
                f"{s.time_label(when)}; taking it back within reclaimCooldownSeconds "
                f"({cooldown:g}) would reverse that"
            )
        return "it is not bound yet, or is terminating"

    def _protected(self, uid: str) -> str | None:
        """The protection of a pod started from a reservation, while it lasts."""
        until = protected_until(self.s, uid)
        if until is None:
            return None
        return (
            "it started from a reservation and is protected from preemption until "
            f"{self.s.time_label(until)} (starvation.reservedMin/MaxRuntimeSeconds)"
        )

    def _reclaim_why_not(self, uid: str, mine: str, theirs: str) -> str:
        book = self.s.book
        if not book.queue_limits(mine).preemption.reclaim:
            return f"queue {mine} may not reclaim"
        if not book.queue_limits(theirs).preemption.preemptible:
            return f"queue {theirs} is not preemptible"
        band = band_for(
            self.s.tenancy.preemption.reclaim_tolerance_band, book, self.deserved, mine, None
        )
        if may_reclaim_from(book, self.deserved, mine, theirs, band):
            return self._protected(uid) or self._cooling(uid, mine, theirs)
        if not above_band(book, self.deserved, theirs, band):
            used = held(book, self.deserved, theirs)
            fair = self.deserved.get(theirs, 0.0)
            margin = " by more than the band" if band else ""
            return (
                f"queue {theirs} is not above its fair share{margin} (it holds "
                f"{used:.0%} of the cluster, its fair share is {fair:.0%})"
            )
        return f"reclaiming from queue {theirs} would leave queue {mine} above it"


def _order(
    engine: Engine, cluster: ClusterState, pending: Sequence[PodInfo], pod: PodInfo, now: float
) -> tuple[list[list[str]], _Rules]:
    """Pending jobs (lists of pod uids) in the order a cycle starting now would try them, at
    current usage (a real cycle re-ranks queues as it places pods); and the preemption rules
    as they apply to ``pod``."""
    todo = [p for p in pending if not p.scheduling_gates]
    session, jobs, queues, deserved = _deserved(engine, cluster, todo, now)
    job = next((j for j in jobs if any(p.uid == pod.uid for p in j.pods)), None)
    rules = _Rules(engine, session, deserved, job, pod, queues)
    if engine.ordering != "fair":
        lower = {u for u, p in cluster.pods.items() if p.priority < pod.priority}
        rules.allowed = lower if engine.tenancy.preemption.enabled else set()
        return [[p.uid] for p in kube_default_order(todo)], rules
    order = FairOrder(session, queues)
    out = []
    while (nxt := order.pop()) is not None:
        out.append([p.uid for p in nxt.pods])
    return out, rules


def _position(order: list[list[str]], uid: str) -> dict[str, Any]:
    for i, uids in enumerate(order):
        if uid in uids:
            return {"position": i + 1, "of": len(order), "job_pods": len(uids)}
    return {"position": None, "of": len(order), "job_pods": 0}


# ---- nodes ----------------------------------------------------------------------------------
def _empty_copy(cluster: ClusterState) -> ClusterState:
    """The same nodes with nothing running on them."""
    empty = ClusterState(max_devices=cluster.max_devices)
    for idx in sorted(cluster.node_index.values()):
        if cluster.active[idx]:
            empty.add_node(cluster.node(idx))
    empty.namespace_labels = cluster.namespace_labels
    empty.service_selectors = cluster.service_selectors
    empty.volumes = cluster.volumes
    empty.dra = cluster.dra
    return empty


def fits_when_empty(engine: Engine, pod: PodInfo, cluster: ClusterState) -> tuple[list[str], str]:
    """Names of the nodes ``pod`` passes every filter on if they ran nothing, and, when there
    are none, the reason in kube-scheduler's form."""
    empty = _empty_copy(cluster)
    scheduler = Scheduler(engine.profile, engine.scheduler.seed)
    cycle = CycleState(rng=scheduler.rng)
    for plugin in scheduler.pre_filters:
        status = plugin.pre_filter(cycle, pod, empty)
        if not status.ok:
            return [], "; ".join(status.reasons)
    try:
        mask, results = scheduler.filter(pod, empty, cycle)
    except AttemptError as error:  # the attempt fails with an error wherever it is tried
        return [], str(error)
    names = [empty.node(int(i)).name for i in np.flatnonzero(mask)]
    reason = "" if names else scheduler.diagnose(empty, results, None).message()
    return names, reason


def _victim(engine: Engine, pod: PodInfo, cluster: ClusterState | None = None) -> dict[str, Any]:
    """A victim as answers show it; with ``cluster``, ``job_fails_with_it``: the other running
    pods of its Job -- of its JobSet, ``jobset``, if it has one -- when evicting it would fail
    the Job (:mod:`~fairgpu.engine.fragile_jobs`), and ``group_restarts_with_it``: those of
    its LeaderWorkerSet group (:mod:`~fairgpu.engine.leader_worker_groups`); else [] (a
    decision's evictions list them already)."""
    t = engine.tenant(pod)
    siblings: list[str] = []
    if cluster is not None and pod.owner_kind == "Job" and pod.owner in engine.fragile_jobs:
        running = job_groups(cluster, {pod.owner}, lambda uid: False)
        others = running.get(fragile_key(pod), set()) - {pod.uid}
        siblings = sorted(cluster.pods[uid].key for uid in others)
    group: list[str] = []
    key = leader_worker_key(pod)
    if cluster is not None and key:
        members = leader_worker_groups(cluster, lambda uid: False).get(key, set())
        group = sorted(cluster.pods[uid].key for uid in members - {pod.uid})
    return {
        "pod": pod.key,
        "queue": t.queue,
        "priority": pod.priority,
        "job_fails_with_it": siblings,
        "jobset": pod.labels.get(LABEL_JOBSET) if siblings else None,
        "group_restarts_with_it": group,
    }


def _rules_may(victim: dict[str, Any], reason: str | None) -> dict:
    victim["preemptible_by_rules"] = reason is None
    victim["not_preemptible_because"] = reason
    return victim


def freed_nodes(
    engine: Engine,
    pod: PodInfo,
    cluster: ClusterState,
    candidates: list[str],
    now: float,
    rules: _Rules,
) -> list[dict[str, Any]]:
    """For up to :data:`MAX_FREED_NODES` of ``candidates`` (nodes it fits on when empty), the
    fewest running pods whose leaving would let ``pod`` fit there (a dry-run preemption
    search over any running pod), each marked with whether the preemption rules let ``pod``
    evict it (or the rule that forbids it)."""
    out: list[dict[str, Any]] = []
    placements = cluster.placements
    for name in candidates:
        idx = cluster.node_index[name]
        uids = sorted(u for u in cluster.node_pods[idx] if victim_eligible(placements.get(u), now))
        terminating = sum(1 for u in cluster.node_pods[idx] if placements[u].terminating)
        only = np.zeros(cluster.size, dtype=bool)
        only[idx] = True
        plan = find_preemption(pod, cluster, engine.scheduler, uids, only) if uids else None
        if plan is None:
            continue
        moved = rules.moved(plan.victims)
        veto = rules.veto(plan.victims, moved)
        mine = rules.job.tenant.queue if rules.job is not None else ""
        gone = []
        for v in plan.victims:
            reason = rules.why_not(v.uid)
            if reason is None and veto is not None and engine.tenant(v).queue != mine:
                # The rules allow this pod by itself; the node's move is refused as a whole
                # (maybe for another queue's pods that must leave with it) -- say so, or the
                # refusal reads as if it were about this pod's queue.
                reason = f"the reclaim rule refuses this node's move as a whole: {veto}"
            victim = _rules_may(_victim(engine, v, cluster), reason)
            victim["runs_elsewhere"] = v.uid in moved
            gone.append(victim)
        out.append({"node": name, "would_have_to_go": gone, "terminating_pods": terminating})
        if len(out) >= MAX_FREED_NODES:
            break
    return out


# ---- one cycle --------------------------------------------------------------------------------
def _decision(result: CycleResult, engine: Engine, uid: str) -> dict[str, Any]:
    """What ``result`` decided for pod ``uid``: bind (with victims) or the pending reason."""
    for b in result.binds:
        if b.pod.uid == uid:
            victims = [
                _victim(engine, e.pod) | {"kind": e.kind}
                for e in result.evictions
                if e.preemptor is not None and e.preemptor.uid == uid
            ]
            return {"outcome": "bind", "node": b.node_name, "preempts": victims}
    for u in result.unschedulable:
        if u.pod.uid == uid:
            return {"outcome": "pending", "reason": u.reason, "resolvable": u.resolvable}
    return {"outcome": "not tried", "reason": "not handed to the engine this cycle"}


def next_cycle(snapshot: Snapshot, extra: Sequence[PodInfo] = ()) -> tuple[CycleResult, Engine]:
    """One engine cycle over a fresh copy of the snapshot, with ``extra`` pods pending."""
    cache, engine = snapshot.build()
    pending = [*cache.schedulable(), *extra]
    return engine.cycle(cache.cluster, pending, snapshot.now), engine


# ---- explain ----------------------------------------------------------------------------------
def explain_pod(snapshot: Snapshot, namespace: str, name: str, raw: dict[str, Any]) -> dict:
    """Everything :mod:`fairgpu.cli`'s ``explain`` prints about pod ``namespace/name``, whose
    API object is ``raw``."""
    cache, engine = snapshot.build()
    cluster = cache.cluster
    meta, spec, status = raw.get("metadata", {}), raw.get("spec", {}), raw.get("status", {})
    uid = meta.get("uid", "")
    report: dict[str, Any] = {
        "pod": f"{namespace}/{name}",
        "scheduler": spec.get("schedulerName", "default-scheduler"),
        "phase": status.get("phase", ""),
        "policy": engine.profile.name,
        "ordering": engine.ordering,
    }
    node = spec.get("nodeName") or ""
    pod = cache.pending.get(uid)
    if pod is None:
        pod = next((p for ps in cache.bound_on.values() for u, p in ps.items() if u == uid), None)
    if pod is not None:
        t = engine.tenant(pod)
        report.update(queue=t.queue, user=t.user, department=t.parent, tenant_error=t.error)
    job = _job_of(snapshot, cache, pod)
    made = _set_of(snapshot, cache, pod)
    report["leader_worker_group"] = _leader_worker_group(cache, pod)
    if node:
        report["state"] = "bound"
        report["node"] = node
        report["deadline"] = _deadline(snapshot, cache, pod)
        if pod is not None and pod.error:  # counted with what it asked all the same
            report["error"] = pod.error
        if job is not None or made is not None:
            ends = _forecast_for(snapshot, job, made)
            if job is not None:
                report["job"] = job_progress(snapshot, job, ends)
            if made is not None:
                report["to_create"] = set_progress(snapshot, cache, made, ends)
        return report
    if report["scheduler"] != snapshot.settings.scheduler_name or pod is None:
        report["state"] = "not ours"
        return report
    if pod.error:  # malformed: no node, queue or time changes that -- only a fixed object
        report["state"] = "invalid"
        report["error"] = pod.error
        return report
    if report.get("tenant_error"):  # no queue: no share, order or start time to speak of
        report["state"] = "no queue"
        return report
    report["state"] = "gated" if pod.scheduling_gates else "pending"
    report["scheduling_gates"] = list(pod.scheduling_gates)
    _pending_detail(report, snapshot, cache.schedulable(), engine, cluster, pod)
    report.update(_scheduler_notes(status))
    predicted = _forecast_for(snapshot, job, made)
    report.update(predicted_start(predicted, uid, snapshot.label))
    if job is not None:
        report["job"] = job_progress(snapshot, job, predicted)
    if made is not None:
        report["to_create"] = set_progress(snapshot, cache, made, predicted)
    ann = meta.get("annotations") or {}
    report["scheduler_predicted_start"] = ann.get(ANN_PREDICTED_START)
    return report


def _pending_detail(
    report: dict[str, Any],
    snapshot: Snapshot,
    pending: list[PodInfo],
    engine: Engine,
    cluster: ClusterState,
    pod: PodInfo,
) -> None:
    now = snapshot.now
    queues = _queue_state(engine, cluster, pending, now)
    tenant = engine.tenant(pod)
    report["queue_state"] = queues.get(tenant.queue)
    report["queue_admits"] = (
        engine.book.admit(tenant.queue, engine.book.pending_vector(pod)) or "yes"
        if tenant.error is None
        else tenant.error
    )
    order, rules = _order(engine, cluster, pending, pod, now)
    report["fair_order"] = _position(order, pod.uid)
    report["fair_order"]["queues_ahead"] = _queues_ahead(queues, tenant.queue)
    topology = confinement(rules.s, rules.job) if rules.job is not None else None
    report["gang_topology"] = (
        None
        if topology is None
        else {"required": topology.required, "preferred": topology.preferred}
    )
    result = engine.scheduler.schedule(pod, cluster)
    report["fits_now"] = result.node_name if result.ok else None
    report["nodes"] = result.reason() if not result.ok else f"fits on {result.node_name}"
    report["nodes_total"] = int(cluster.active[: cluster.size].sum())
    skip = result.ok or bool(pod.scheduling_gates)
    empty, why = fits_when_empty(engine, pod, cluster) if not skip else ([], "")
    report["fits_on_empty_nodes"] = empty
    report["empty_nodes_reason"] = why
    report["if_freed"] = freed_nodes(engine, pod, cluster, empty, now, rules)
    decided, engine2 = next_cycle(snapshot)
    report["next_cycle"] = _decision(decided, engine2, pod.uid)


def _queues_ahead(queues: dict[str, dict[str, Any]], queue: str) -> list[str]:
    """Queues with pending work and a lower weighted share than ``queue`` (tried first)."""
    mine = queues.get(queue)
    if mine is None:
        return []
    return [
        q["queue"]
        for q in queues.values()
        if q["queue"] != queue
        and q["pending_pods"]
        and (q["share"], q["queue"]) < (mine["share"], queue)
    ]


def _scheduler_notes(status: dict[str, Any]) -> dict[str, Any]:
    """What the running scheduler last said about the pod: its PodScheduled message, the
    GPUs held for it (a starvation reservation) and the node it is nominated to."""
    notes: dict[str, Any] = {"nominated_node": status.get("nominatedNodeName") or None}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            message = (cond.get("message") or "").partition(PREDICTED_START)[0]
            notes["scheduler_said"] = message
            notes["scheduler_said_at"] = cond.get("lastTransitionTime")
            held = message.partition("; GPUs are held for it on ")[2]
            notes["reservation"] = f"GPUs are held for it on {held}" if held else None
    return notes


# ---- what-if ----------------------------------------------------------------------------------
def what_if(
    snapshot: Snapshot, pods: Sequence[PodInfo], pod_groups: dict[str, int] | None = None
) -> list[dict[str, Any]]:
    """Where each of ``pods`` (not in the cluster) would go in one cycle starting now, beside
    the pods already pending, or why not (queue quota, node reasons); and, for a pod that
    would wait but could fit, when it is predicted to start (the live forecast's path, the
    pods added). A pod that would wait carries ``fits_on_empty_nodes`` and
    ``empty_nodes_reason`` (:func:`fits_when_empty`): one that fits no node even when they are
    empty gets no forecast -- nothing ending would start it. A pod the API server would
    refuse (:class:`~fairgpu.api.errors.RefusedObjectError`) is answered ``refused``, with
    the field at fault. Creates nothing."""
    cache, engine = snapshot.build()
    if pod_groups:
        engine.register_pod_groups(pod_groups)
    taken = {p.key for p in (*cache.pending.values(), *cache.cluster.pods.values())}
    for pod in pods:
        if pod.error is None and pod.key in taken:
            pod.error = f"Pod {pod.key}: a pod of that name exists already (it would not be made)"
    # A pod that could not be made as it is (malformed, its namespace missing, its name
    # taken) is answered with that alone: neither the cycle nor the forecast is asked.
    asked = [p for p in pods if not p.error]
    pending = [*cache.schedulable(), *asked]
    result = engine.cycle(cache.cluster, pending, snapshot.now)
    rows = []
    for pod in pods:
        t = engine.tenant(pod)
        row: dict[str, Any] = {"pod": pod.key, "queue": t.queue, "user": t.user}
        if pod.error:
            # One the API server refuses would never exist; one it accepts would wait.
            outcome = "refused" if pod.refused else "pending"
            row.update(outcome=outcome, reason=pod.error, resolvable=False)
        else:
            row.update(_decision(result, engine, pod.uid))
        if row["outcome"] == "pending" and row.get("resolvable", True):
            empty, why = fits_when_empty(engine, pod, cache.cluster)
            row["fits_on_empty_nodes"], row["empty_nodes_reason"] = empty, why
            if not empty:
                row["predicted_start"] = None
        rows.append(row)
    waiting = [r for r in rows if r.get("fits_on_empty_nodes")]
    if waiting:
        predicted = _forecast_with(snapshot, asked, pod_groups)
        uids = {p.key: p.uid for p in pods}
        for row in waiting:
            row.update(predicted_start(predicted, uids[row["pod"]], snapshot.label))
    return rows


def _forecast_with(
    snapshot: Snapshot, pods: Sequence[PodInfo], pod_groups: dict[str, int] | None
) -> Forecast:
    """The forecast of a fresh copy of ``snapshot`` with ``pods`` pending too (declared run
    times only: a command has no completions to learn from)."""
    cache, engine = snapshot.build()
    if pod_groups:
        engine.register_pod_groups(pod_groups)
    pending = [*(p for p in cache.schedulable() if not p.scheduling_gates), *pods]
    runtimes = Runtimes(lambda p: engine.tenant(p).queue, None)
    return forecast(
        cache.cluster,
        engine,
        pending,
        snapshot.now,
        runtimes,
        budget_s=snapshot.forecast_budget,
        jobs=snapshot.jobs_ahead(cache, runtimes.replayed),
        sets=snapshot.sets_ahead(cache, runtimes.replayed),
    )
