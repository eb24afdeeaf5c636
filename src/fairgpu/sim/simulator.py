"""Deterministic discrete-event simulation driving the engine exactly as the live scheduler does.

Events sit on a heap ordered by ``(time, kind priority, sequence)`` so a replay is bit-for-bit
reproducible: at one instant completions free capacity before arrivals are queued, and after
every instant with events the engine runs one scheduling cycle over all pending pods.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.cluster.volumes import apply_decision, settle
from fairgpu.engine.backlog import PendingChanges
from fairgpu.engine.decisions import CycleResult
from fairgpu.engine.engine import Engine
from fairgpu.engine.plugins.gpu import lowest_devices
from fairgpu.model.order import pod_identity
from fairgpu.model.pod import PodInfo
from fairgpu.sim.accounting import DEADLINE_EXCEEDED, RunAttempt, RunLog, sibling_cause
from fairgpu.sim.job_controller import JobController
from fairgpu.sim.jobset_controller import FAIL
from fairgpu.sim.leader_worker_controller import GroupRestarts
from fairgpu.sim.rendezvous import DEFAULT_TIMEOUT, Rendezvous
from fairgpu.sim.statefulset_controller import OrderedCreation
from fairgpu.sim.workload import BatchJob, PodArrival, Workload

# Event kinds, in the order events of one instant are handled; a wake only runs a cycle.
_COMPLETE, _GIVE_UP, _DEADLINE, _ARRIVE, _WAKE = 0, 1, 2, 3, 4
# A pod's own activeDeadlineSeconds (last: a pod that ends its work at the same instant
# completes).
_POD_DEADLINE = 5

#: A replay without ``until`` stops when nothing but the scheduler's own wake-ups is left
#: (no arrival, no run time ending, no deadline) and none of them started or evicted a pod
#: for this long: pods still waiting then wait for room that only pods running to the end
#: of time could free, and the engine's timed rules (minimum runtimes, cooldowns,
#: reservations) would only repeat.
STALL_SECONDS = 24 * 3600.0


@dataclass(slots=True)
class PodRecord:
    """The life of one pod in a simulation (times in simulated seconds)."""

    pod: PodInfo
    tenant: str
    user: str
    arrival: float
    duration: float | None
    start: float | None = None
    end: float | None = None
    node: str = ""
    devices: tuple[int, ...] = ()
    reason: str = ""
    preempted: int = 0
    run: int = 0
    failed_at: float | None = None  # its job failed (gave up its rendezvous too often)

    @property
    def wait(self) -> float | None:
        """Seconds from arrival to (last) start, or None if it never started."""
        return None if self.start is None else self.start - self.arrival


class PendingPods(dict[str, PodInfo]):
    """The simulator's pending pods by uid, which also note what changed since the last
    :meth:`changes` (pods set and popped, by object): the engine then updates its backlog
    by those alone (:class:`~fairgpu.engine.backlog.PendingChanges`).

    A pod set and popped between two calls is no change (the engine never saw it). A pod
    popped and set again is both: it left the pending pods (it started) and came back (its
    gang gave up, its Job replaced it) -- the engine forgets what it had (the last reason it
    reported for it, which the simulator cleared when the pod started) and takes it afresh.
    Netting that out left such a pod without a reason when the engine's next one repeated
    the last."""

    def __init__(self) -> None:
        super().__init__()
        self._added: dict[int, PodInfo] = {}
        self._removed: dict[int, PodInfo] = {}

    def __setitem__(self, uid: str, pod: PodInfo) -> None:
        old = self.get(uid)
        if old is pod:
            return
        if old is not None:
            self._gone(old)
        super().__setitem__(uid, pod)
        self._added[id(pod)] = pod

    def __delitem__(self, uid: str) -> None:
        self._gone(self[uid])
        super().__delitem__(uid)

    def pop(self, uid: str, *default: PodInfo | None) -> PodInfo | None:  # type: ignore[override]
        """:meth:`dict.pop`, noted."""
        if uid in self:
            self._gone(self[uid])
        return super().pop(uid, *default)

    def popitem(self) -> tuple[str, PodInfo]:
        """:meth:`dict.popitem`, noted."""
        uid, pod = super().popitem()
        self._gone(pod)
        return uid, pod

    def clear(self) -> None:
        """:meth:`dict.clear`, noted."""
        for pod in self.values():
            self._gone(pod)
        super().clear()

    def setdefault(self, uid: str, pod: PodInfo) -> PodInfo:  # type: ignore[override]
        """:meth:`dict.setdefault`, noted."""
        if uid not in self:
            self[uid] = pod
        return self[uid]

    def update(self, *args: Any, **kwargs: PodInfo) -> None:
        """:meth:`dict.update`, noted."""
        for uid, pod in dict(*args, **kwargs).items():
            self[uid] = pod

    def _gone(self, pod: PodInfo) -> None:
        # Set since the last call: the engine has not seen it come back (or at all).
        if self._added.pop(id(pod), None) is None or id(pod) in self._removed:
            self._removed[id(pod)] = pod

    def changes(self) -> PendingChanges:
        """What changed since the last call (net), and start noting afresh."""
        out = PendingChanges(self, list(self._added.values()), list(self._removed.values()))
        self._added, self._removed = {}, {}
        return out


@dataclass(slots=True)
class Timeline:
    """Samples taken after every scheduling cycle."""

    time: list[float] = field(default_factory=list)
    gpu_allocated_milli: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    tenant_gpu_milli: dict[str, list[int]] = field(default_factory=dict)
    tenant_demand_milli: dict[str, list[int]] = field(default_factory=dict)
    fragmentation_milli: list[int] = field(default_factory=list)

    def cut(self, end: float) -> None:
        """Drop the samples taken after ``end``."""
        n = bisect.bisect_right(self.time, end)
        del self.time[n:]
        counts: list[list[int]] = [
            self.gpu_allocated_milli,
            self.pending,
            self.running,
            self.fragmentation_milli,
            *self.tenant_gpu_milli.values(),
            *self.tenant_demand_milli.values(),
        ]
        for series in counts:
            del series[n:]


@dataclass(slots=True)
class SimulationResult:
    """Everything a report needs: per-pod records, the timeline and the cluster's capacity."""

    workload: str
    policy: str
    seed: int
    records: list[PodRecord]
    timeline: Timeline
    gpu_capacity_milli: int
    end_time: float
    preemptions: int
    cycles: int
    runs: list[RunAttempt] = field(default_factory=list)
    # batch/v1 Jobs that failed (their pods evicted too often): key -> (when, why).
    failed_jobs: dict[str, tuple[float, str]] = field(default_factory=dict)
    # The Jobs as they ended (a JobSet's Jobs created again have their new pods), and each
    # JobSet restart: (when, JobSet key, why).
    jobs: list[BatchJob] = field(default_factory=list)
    jobset_restarts: list[tuple[float, str, str]] = field(default_factory=list)
    # The replay ended here, where it last changed, with pods waiting and nothing left to
    # change them (STALL_SECONDS).
    stalled_at: float | None = None


class Simulation:
    """Replays ``workload`` through ``engine``.

    ``tenant_of``/``user_of`` label pods for per-tenant accounting; ``until`` stops the clock
    (pods still running are cut there); ``on_progress(done, total)`` is called as pods arrive.
    ``rendezvous_timeout``: how long members of a pod group wait for minMember of them to run
    before they fail and queue again (:mod:`fairgpu.sim.rendezvous`; None: for ever).
    """

    def __init__(
        self,
        workload: Workload,
        engine: Engine,
        *,
        seed: int = 0,
        until: float | None = None,
        tenant_of: Callable[[PodInfo], str] | None = None,
        user_of: Callable[[PodInfo], str] | None = None,
        on_progress: Callable[[int, int], None] | None = None,
        max_devices: int | None = None,
        track_fragmentation: bool = True,
        rendezvous_timeout: float | None = DEFAULT_TIMEOUT,
    ) -> None:
        self.workload = workload
        self.engine = engine
        # A pod keeps its last reason in its record: the engine need not repeat it.
        engine.report_unchanged = False
        self.seed = seed
        self.until = until
        # By default pods are accounted exactly as the engine's tenancy resolves them.
        self.tenant_of = tenant_of or (lambda p: engine.tenant(p).queue)
        self.user_of = user_of or (lambda p: engine.tenant(p).user)
        self.pending_milli: dict[str, int] = {}
        self._group_of = engine.pod_group
        self.group_running: dict[str, set[str]] = {}
        self.rendezvous = Rendezvous(rendezvous_timeout)
        self.on_progress = on_progress
        self.track_fragmentation = track_fragmentation
        devices = max_devices or max([n.gpu_count for n in workload.nodes] + [1])
        self.cluster = ClusterState(max_devices=devices, capacity=max(64, len(workload.nodes)))
        self.cluster.namespace_labels = dict(workload.extra.get("namespace_labels", {}))
        self.cluster.service_selectors = dict(workload.extra.get("service_selectors", {}))
        for node in workload.nodes:
            self.cluster.add_node(node)
        for obj in workload.extra.get("storage", ()):
            self.cluster.volumes.add(obj)
        settle(self.cluster.volumes)  # the PV controller's part: phases, Immediate claims
        for obj in workload.extra.get("dra", ()):
            self.cluster.dra.add(obj)
        self._events: list[tuple[float, int, int, str]] = []
        self._seq = 0
        self.records: dict[str, PodRecord] = {}
        self.pending = PendingPods()
        # Pods no change can help (an invalid object, an unknown queue): no longer tried,
        # still pending as in the API (answers about the run read them here).
        self.given_up: dict[str, PodInfo] = {}
        self.tenant_milli: dict[str, int] = {}
        self._claimed: dict[tuple[str, str], int] = {}  # DRA GPU milli counted per pod
        self.timeline = Timeline()
        self.preemptions = 0
        self.cycles = 0
        self.now = 0.0
        self.runs = RunLog(self.tenant_of)
        self._wake_at: float | None = None  # the cycle a time rule asked for, if scheduled
        self.jobs = JobController(workload.jobs, workload.arrivals, workload.jobsets)
        self.ordered = OrderedCreation(workload.ordered, workload.arrivals, workload.fanned)
        self.group_restarts = GroupRestarts(workload.recreated_groups)
        self._progress_at = 0.0  # the last event or cycle that changed more than the time
        # Jobs the engine came with as fragile (a live snapshot's, in a forecast), kept
        # beside those of the replay's own Job controller.
        self._fragile_given = engine.fragile_jobs
        # LeaderWorkerSets whose pods restart alone: victims one by one, as they go.
        engine.loose_leader_worker_sets |= workload.loose_leader_worker_sets
        self.failed_jobs: dict[str, tuple[float, str]] = {}
        self.jobset_restarts: list[tuple[float, str, str]] = []

    def _push(self, time: float, kind: int, uid: str) -> None:
        heapq.heappush(self._events, (time, kind, self._seq, uid))
        self._seq += 1

    def _schedule_wake(self, when: float | None) -> None:
        """A cycle at ``when``, when a time rule changes what a cycle may do (a held-back pod
        becomes a victim, a reservation falls due or ends, a pod group times out:
        :attr:`~fairgpu.engine.decisions.CycleResult.retry_at`): the live scheduler's periodic
        cycles would act then; without it a replay waits for the next arrival or completion."""
        if when is None or when <= self.now:
            return
        if self._wake_at is not None and self._wake_at <= when:
            return
        self._wake_at = when
        self._push(when, _WAKE, "")

    def _add_arrival(self, arrival: PodArrival) -> None:
        pod = arrival.pod
        if pod.uid in self.records:
            raise ValueError(f"Pod {pod.key}: duplicate uid {pod.uid!r} in workload")
        self.records[pod.uid] = PodRecord(
            pod, self.tenant_of(pod), self.user_of(pod), arrival.arrival, arrival.duration
        )
        self._push(arrival.arrival, _ARRIVE, pod.uid)
        if pod.resource_claims:  # kube-controller-manager's resourceclaim controller
            self.cluster.dra.create_pod_claims(pod)

    def _group_key(self, pod: PodInfo) -> str:
        ref = self._group_of(pod)
        return ref.key if ref is not None else ""

    def _leave_group(self, rec: PodRecord) -> None:
        key = self._group_key(rec.pod)
        members = self.group_running.get(key)
        if members is not None:
            members.discard(rec.pod.uid)
        self.rendezvous.leave(key, rec.pod.uid)

    def _wait(self, rec: PodRecord, sign: int) -> None:
        """Count (or uncount) the pod's GPU ask as pending demand of its tenant."""
        milli = rec.pod.gpu.total_milli + self._claim_milli(rec, sign, "ask")
        self.pending_milli[rec.tenant] = self.pending_milli.get(rec.tenant, 0) + sign * milli

    def _charge_tenant(self, rec: PodRecord, sign: int) -> None:
        milli = rec.pod.gpu.total_milli + self._claim_milli(rec, sign, "held")
        self.tenant_milli[rec.tenant] = self.tenant_milli.get(rec.tenant, 0) + sign * milli

    def _claim_milli(self, rec: PodRecord, sign: int, what: str) -> int:
        """GPUs (milli) asked or held through DRA claims; what was added is what is taken
        off again, though the claims changed in between."""
        pod = rec.pod
        if not pod.resource_claims:
            return 0
        key = (pod.uid, what)
        if sign < 0:
            return self._claimed.pop(key, 0)
        if what == "held":
            pl = self.cluster.placements.get(pod.uid)
            milli = pl.dra_milli if pl is not None else 0
        else:
            dra = self.cluster.dra
            milli = dra.asked_gpu_milli(pod, self.cluster)
        self._claimed[key] = milli
        return milli

    def _sample(self) -> None:
        tl = self.timeline
        tl.time.append(self.now)
        tl.gpu_allocated_milli.append(self.cluster.gpu_allocated_milli())
        tl.pending.append(len(self.pending))
        tl.running.append(len(self.cluster.placements))
        if self.track_fragmentation:
            tl.fragmentation_milli.append(
                unusable_gpu_milli(self.cluster, list(self.pending.values()))
            )
        samples = len(tl.time)
        for tenant, milli in self.tenant_milli.items():
            series = tl.tenant_gpu_milli.setdefault(tenant, [0] * (samples - 1))
            series.append(milli)
        for tenant, series in tl.tenant_gpu_milli.items():
            if len(series) < samples:
                series.append(self.tenant_milli.get(tenant, 0))
        for tenant in self.tenant_milli.keys() | self.pending_milli.keys():
            series = tl.tenant_demand_milli.setdefault(tenant, [0] * (samples - 1))
            series.append(self.tenant_milli.get(tenant, 0) + self.pending_milli.get(tenant, 0))
        for series in tl.tenant_demand_milli.values():
            if len(series) < samples:
                series.append(0)

    def _taken_down(
        self, result: CycleResult
    ) -> tuple[list[PodInfo], dict[str, tuple[str, PodInfo | None]]]:
        """The cycle's evicted pods and those their controllers take down with them, each
        with why it goes (kind, preemptor)."""
        evicted = [e.pod for e in result.evictions]
        seen = {p.uid for p in evicted}
        causes = {e.pod.uid: (e.kind, e.preemptor) for e in result.evictions}
        for pod in evicted:
            # A gang cannot run below minMember: losing a member it needs restarts the whole
            # group, as a job controller does when a worker of a distributed job is evicted;
            # members beyond minMember (an elastic group) leave alone.
            left = sorted(
                u
                for u in self.group_running.get(self._group_key(pod), ())
                if u not in seen and u in self.cluster.placements
            )
            ref = self._group_of(pod)
            if ref is not None and ref.min_member is not None and len(left) >= ref.min_member:
                continue
            for uid in left:
                if uid not in seen:
                    seen.add(uid)
                    evicted.append(self.records[uid].pod)
                    causes[uid] = sibling_cause(causes[pod.uid])
        for pod in list(evicted):
            # A LeaderWorkerSet recreates the whole group an evicted pod belongs to.
            placed = self.cluster.placements
            for uid in self.group_restarts.taken_with(pod.uid, placed.__contains__, seen):
                seen.add(uid)
                evicted.append(self.records[uid].pod)
                causes[uid] = sibling_cause(causes[pod.uid])
        return evicted, causes

    def _cycle(self) -> None:
        self.cycles += 1
        pending = self.pending
        self.engine.fragile_jobs = self._fragile_given | self.jobs.fragile()
        result = self.engine.cycle(
            self.cluster, list(pending.values()), self.now, pending.changes()
        )
        self._schedule_wake(result.retry_at)
        evicted, causes = self._taken_down(result)
        if evicted or result.binds:
            self._progress_at = self.now
        for pod in evicted:
            self._requeue(pod, *causes[pod.uid])
            self.preemptions += 1
        for bind in result.binds:
            rec = self.records[bind.pod.uid]
            if self.pending.pop(bind.pod.uid, None) is not None:
                self._wait(rec, -1)
            self._bind_volumes(bind.pod, bind.node_name)
            if bind.pod.resource_claims:  # PreBind: status.allocation and reservedFor
                slot = self.cluster.node_index[bind.node_name]
                self.cluster.dra.commit(bind.pod, slot)
            self._started(rec, bind.node_name, bind.devices)
        freed = [
            d for d in result.deallocations if self.cluster.dra.deallocate(d.claim, d.claim_uid)
        ]
        if freed:
            # The claims' status updates reach the scheduler as events (cached failures are
            # stale, as after a release): it tries again now.
            self.cluster.release_version += 1
            self._push(self.now, _WAKE, "")
        for unsched in result.unschedulable:
            rec = self.records[unsched.pod.uid]
            rec.reason = unsched.reason
            # No change to the cluster can help (e.g. invalid object): stop retrying it.
            if not unsched.resolvable and self.pending.pop(unsched.pod.uid, None) is not None:
                self.given_up[unsched.pod.uid] = unsched.pod
                self._wait(rec, -1)
        # Last: a pod of a failing Job bound or reported in this cycle goes with the rest.
        failing = self.jobs.evicted((e.pod.uid for e in result.evictions), self.now)
        for uid, why in self.jobs.take_dropped():  # its index failed for good
            self._delete_pods([uid], why)
        for arrival in self.jobs.take_created():  # the place it left, to its Job's next pod
            self._add_arrival(arrival)
        for key in failing:
            self._job_failed(key)

    def _job_failed(self, key: str) -> None:
        """Job ``key`` failed (:meth:`~fairgpu.sim.job_controller.JobController.evicted`,
        or its deadline): it and, if its JobSet fails with it, that JobSet's other Jobs end
        (:meth:`_fail_job`); if its JobSet restarts, the Jobs created again lose their pods
        and make new ones now. Jobs failing in the same cycle: the first one's JobSet
        restart creates the others again too (so they are no longer failed), as the JobSet
        controller applies its failure policy once for the Jobs failed by then."""
        if key not in self.jobs.failed:
            return
        turn = self.jobs.after_failure(key, self.now)
        if turn is None or turn.action == FAIL:
            for failed in [key, *(turn.failed if turn is not None else ())]:
                self._fail_job(failed)
            return
        why = f"JobSet {turn.jobset} restarted ({turn.why}) after Job {key} failed"
        self.jobset_restarts.append((self.now, turn.jobset, turn.why))
        self._delete_pods(turn.gone, why)
        for arrival in turn.arrivals:
            self._add_arrival(arrival)
        for when, job in turn.deadlines:
            self._push(when, _DEADLINE, job)

    def _fail_job(self, key: str) -> None:
        """Job ``key`` failed: the Job controller deletes its pods -- running ones end
        (outcome ``deleted``), waiting ones leave the queue -- and creates no more."""
        why = self.jobs.failed[key]
        self.failed_jobs[key] = (self.now, why)
        self._delete_pods(self.jobs.pods_of(key), why)

    def _delete_pods(self, uids: Iterable[str], why: str) -> None:
        """Pods ``uids`` are deleted now (``why``): running ones end (outcome ``deleted``),
        waiting ones leave the queue; those not created yet or done are left as they are."""
        released = False
        for uid in uids:
            rec = self.records.get(uid)
            if rec is None or rec.end is not None or rec.failed_at is not None:
                continue  # not created yet, succeeded, or deleted before (its why kept)
            if uid in self.cluster.placements:
                self._end_run(rec, "deleted")
                rec.run += 1  # the end scheduled for this run is stale now
                released = True
            elif self.pending.pop(uid, None) is not None:
                self._wait(rec, -1)
            rec.reason, rec.failed_at = why, self.now
        if released:
            self._push(self.now, _WAKE, "")  # the room they leave is scheduled again now

    def _end_run(
        self, rec: PodRecord, outcome: str, preemptor: PodInfo | None = None, again: bool = False
    ) -> None:
        """``rec``'s run ends now with ``outcome`` (:meth:`~fairgpu.sim.accounting.RunLog.stop`):
        it leaves the cluster (unless the engine released it already), its claims (made afresh
        from their templates if it waits ``again``), its group's rendezvous and its tenant's
        usage."""
        uid = rec.pod.uid
        if uid in self.cluster.placements:
            self.cluster.release(uid)
        self._release_claims(rec.pod, requeue=again)
        self._leave_group(rec)
        self._charge_tenant(rec, -1)
        self.runs.stop(uid, self.now, outcome, preemptor)

    def _started(self, rec: PodRecord, node_name: str, devices: tuple[int, ...]) -> None:
        """``rec``'s pod, placed in the cluster, starts on ``node_name`` now."""
        rec.start, rec.node, rec.devices, rec.reason = self.now, node_name, devices, ""
        self._charge_tenant(rec, +1)
        self.runs.start(rec, self.now, node_name, devices, self._group_key(rec.pod))
        self._join(rec)
        if rec.pod.active_deadline is not None:  # the kubelet fails it then
            self._push(
                self.now + rec.pod.active_deadline, _POD_DEADLINE, f"{rec.pod.uid}#{rec.run}"
            )
        for created in self.ordered.started(rec.pod.uid, self.now):
            self._add_arrival(created)  # its StatefulSet's next pod, created at this instant

    def _arrive(self, rec: PodRecord) -> None:
        """``rec``'s pod is created: it starts at once if its spec names its node (see
        :meth:`_admit_assigned`), else it waits for the scheduler."""
        if rec.pod.node_name and self._admit_assigned(rec):
            return
        self.pending[rec.pod.uid] = rec.pod
        self._wait(rec, +1)

    def _admit_assigned(self, rec: PodRecord) -> bool:
        """A pod created with ``spec.nodeName`` (a pod a cluster export shows running, a
        static or DaemonSet-made pod) is never queued by a scheduler: its node's kubelet
        admits it if it fits. Here it starts on that node when it arrives -- before the
        instant's scheduling cycle -- if the node's filters pass for it now, on the devices
        the device policy picks there (True). A pod that does not fit, or that holds volumes
        or resource claims (their binding is the scheduler's part), is queued instead,
        restricted to that node (False)."""
        pod = rec.pod
        if pod.error:
            return self._admit_unreadable(rec)
        if pod.claims or pod.disks or pod.resource_claims or pod.scheduling_gates:
            return False
        found = self.engine.scheduler.schedule(pod, self.cluster)  # NodeName: that node only
        if found.node is None:
            return False
        self.cluster.assign(pod, found.node, found.devices, self.now)
        self._started(rec, found.node_name or self.cluster.node(found.node).name, found.devices)
        return True

    def _admit_unreadable(self, rec: PodRecord) -> bool:
        """A pod bound to a node that the scheduler cannot read (it carries its decode error,
        :func:`~fairgpu.model.pod.bound_pod_holding`) holds what it asked there, as the live
        cache counts it: it starts on its node if that has the room, on the lowest devices
        with room (True); else it is queued, and reported with its error (False)."""
        pod, cluster = rec.pod, self.cluster
        idx = cluster.node_index.get(pod.node_name)
        if idx is None:
            return False
        cols, amounts = cluster.request_vector(pod)
        if (cluster.free()[idx, cols] < amounts).any():
            return False
        devices = lowest_devices(pod, cluster, idx)
        if devices is None:
            return False
        cluster.assign(pod, idx, devices, self.now)
        self._started(rec, pod.node_name, devices)
        return True

    def _requeue(
        self,
        pod: PodInfo,
        kind: str,
        preemptor: PodInfo | None,
        again: bool = True,
        counted: bool = True,
    ) -> None:
        """``pod`` stopped running before its end (evicted, or its gang gave up -- counted
        as a preemption --, or failed and replaced by its Job): it waits again (unless
        ``again`` is false: its job failed); its wait is measured to the start of its final
        run."""
        rec = self.records[pod.uid]
        # The engine already released its victims from the cluster; the others go here.
        self._end_run(rec, kind, preemptor, again=True)
        rec.preempted += counted
        rec.run += 1
        rec.node, rec.devices, rec.start = "", (), None
        if again:
            self.pending[pod.uid] = pod
            self._wait(rec, +1)

    def _join(self, rec: PodRecord) -> None:
        """A bound pod joins its group's rendezvous; whoever starts working now gets its
        completion, and a group left waiting a deadline to give up by."""
        pod = rec.pod
        key = self._group_key(pod)
        running: set[str] = set()
        if key:
            running = self.group_running.setdefault(key, set())
            running.add(pod.uid)
        ref = self._group_of(pod)
        min_member = ref.min_member if ref is not None else None
        working = self.rendezvous.bind(key, min_member, running, pod.uid, self.now)
        for uid in working:
            member = self.records[uid]
            self.runs.work(uid, self.now)
            if member.duration is not None:
                self._push(self.now + member.duration, _COMPLETE, f"{uid}#{member.run}")
        deadline = self.rendezvous.deadline(key)
        if not working and deadline is not None and self.rendezvous.since[key] == self.now:
            self._push(deadline, _GIVE_UP, key)  # this member began the group's wait

    def _stale(self, event: tuple[float, int, int, str]) -> bool:
        """Is ``event`` the end of a run that was cut short (preempted, its group restarted),
        a give-up deadline its group no longer has (it reached minMember, or its waiting
        members left) or the deadline of a Job that already ended? Such an event must not
        become an instant of the replay: it would move the clock (and with it the end of the
        run) and run a cycle for nothing that happened."""
        when, kind, _, key = event
        if kind in (_COMPLETE, _POD_DEADLINE):
            uid, _, run = key.rpartition("#")
            # The pod was preempted (or its group restarted) after this end was scheduled.
            return int(run) != self.records[uid].run or uid not in self.cluster.placements
        if kind == _DEADLINE:  # the Job succeeded or failed before it
            return not self.jobs.active(key)
        return kind == _GIVE_UP and self.rendezvous.deadline(key) != when

    def _give_up(self, key: str) -> bool:
        """The members of group ``key`` still waiting at their deadline fail (outcome
        ``gang-timeout``) and queue again, or, at the backoff limit, the job fails: none of
        its pods queues any more. True when any member failed."""
        members = self.rendezvous.expired(key, self.now)
        if not members:
            return False
        failed = self.rendezvous.give_up(key)
        for uid in members:
            self._requeue(self.records[uid].pod, "gang-timeout", None, again=not failed)
        if failed:
            reason = (
                f"pod group {key} failed: its members gave up waiting for minMember "
                f"{self.rendezvous.backoff_limit} times"
            )
            for rec in self.records.values():
                if rec.start is None and self._group_key(rec.pod) == key:
                    rec.reason, rec.failed_at = reason, self.now
                    if self.pending.pop(rec.pod.uid, None) is not None:
                        self._wait(rec, -1)
        return True

    def _bind_volumes(self, pod: PodInfo, node_name: str) -> None:
        """Apply the pod's volume binding decision, as the PV controller would at once."""
        store = self.cluster.volumes
        if pod.uid in store.choices:
            slot = self.cluster.node_index[node_name]
            decision = store.decision(pod.uid, slot, node_name)
            apply_decision(store, decision, self.cluster.node(slot).labels)
            store.forget_pod(pod.uid)

    def _complete(self, token: str) -> None:
        uid = token.rpartition("#")[0]
        rec = self.records[uid]
        self._end_run(rec, "completed")
        if self._group_key(rec.pod):  # counts toward its group's minMember from now on
            self.cluster.complete(rec.pod)
        rec.end = self.now
        created = self.jobs.succeeded(uid, self.now)
        if created is not None:  # its Job's next pod, queued at this instant
            self._add_arrival(created)
        for key in self.jobs.take_finished_failed():  # its last index ended, some failed
            self._job_failed(key)

    def _release_claims(self, pod: PodInfo, requeue: bool) -> None:
        """The pod stopped: its claims are no longer reserved for it (deallocated when no pod
        reserves them); an evicted pod that waits again gets fresh claims from templates."""
        if pod.resource_claims:
            dra = self.cluster.dra
            dra.release_pod(pod)
            if requeue:
                dra.create_pod_claims(pod)

    def run(self) -> SimulationResult:
        """Run to the end of the workload (or ``until``) and return the result."""
        # Pods arriving together in the live scheduler's order: creation time, namespace/name.
        for arrival in sorted(
            self.ordered.initial(self.jobs.initial(self.workload.arrivals)),
            key=lambda a: (a.arrival, pod_identity(a.pod)),
        ):
            self._add_arrival(arrival)
        total = len(self.records) + self.jobs.waiting + self.ordered.waiting
        for when, key in self.jobs.deadlines():
            self._push(when, _DEADLINE, key)
        arrived = 0
        stalled_at = None
        while self._events:
            if self._stale(self._events[0]):
                heapq.heappop(self._events)  # not an instant (see _stale)
                continue
            now = self._events[0][0]
            if self.until is not None and now > self.until:
                break
            if self._stalled(now):
                # It ends where it last changed: the wake-ups since changed nothing.
                stalled_at = self.now = self._progress_at
                self.timeline.cut(stalled_at)
                break
            self.now = now
            changed = False
            while self._events and self._events[0][0] == now:
                _, kind, _, uid = heapq.heappop(self._events)
                if kind in (_COMPLETE, _POD_DEADLINE) and self._stale((now, kind, 0, uid)):
                    continue  # at the same instant as another event
                if kind != _WAKE:
                    self._progress_at = now
                changed = self._handle(kind, uid) or changed
                arrived += kind == _ARRIVE
            if changed and self.pending:
                self._cycle()
            self._sample()
            if self.on_progress is not None:
                self.on_progress(arrived, total)
        end = self.now if self.until is None else max(self.now, self.until)
        return SimulationResult(
            workload=self.workload.name,
            policy=self.engine.profile.name,
            seed=self.seed,
            records=list(self.records.values()),
            timeline=self.timeline,
            gpu_capacity_milli=self.cluster.gpu_capacity_milli(),
            end_time=end,
            preemptions=self.preemptions,
            cycles=self.cycles,
            runs=self.runs.close(end),
            failed_jobs=dict(self.failed_jobs),
            jobs=self.jobs.jobs(),
            jobset_restarts=list(self.jobset_restarts),
            stalled_at=stalled_at,
        )

    def _handle(self, kind: int, uid: str) -> bool:
        """Handle one event of the current instant; whether it may change a decision."""
        if kind == _COMPLETE:
            self._complete(uid)
            return True
        if kind == _DEADLINE:
            if self.jobs.expire(uid, self.now):
                self._job_failed(uid)
                return True
            return False
        if kind == _GIVE_UP:
            return self._give_up(uid)
        if kind == _WAKE:
            self._wake_at = None
            return True
        if kind == _POD_DEADLINE:
            self._deadline_exceeded(uid.rpartition("#")[0])
            return True
        self._arrive(self.records[uid])
        return True

    def _deadline_exceeded(self, uid: str) -> None:
        """Pod ``uid`` still runs at its ``activeDeadlineSeconds``: the kubelet fails it
        (outcome ``deadline-exceeded``, its work lost). A Job counts the failure (no
        disruption rule of its pod failure policy matches it) and, unless that fails the Job
        or its index, creates its replacement, which waits now; another pod fails for good."""
        rec = self.records[uid]
        failing = self.jobs.evicted([uid], self.now, disruption=False)
        dropped = {u for u, _ in self.jobs.take_dropped()}
        for arrival in self.jobs.take_created():  # the place it left, to its Job's next pod
            self._add_arrival(arrival)
        if self.jobs.owns(uid) and not failing and uid not in dropped:
            # The controller's replacement waits, with claims made afresh from templates.
            self._requeue(rec.pod, DEADLINE_EXCEEDED, None, counted=False)
        else:
            self._end_run(rec, DEADLINE_EXCEEDED)
            rec.run += 1  # its end scheduled for this run is stale now
            deadline = rec.pod.active_deadline
            why = f"it ran its activeDeadlineSeconds ({deadline:g} s) and failed (DeadlineExceeded)"
            rec.reason, rec.failed_at = why, self.now
        for key in failing:
            self._job_failed(key)

    def _stalled(self, now: float) -> bool:
        """Whether a replay without ``until`` is over at ``now`` with pods still waiting:
        only wake-ups are left and none started or evicted a pod for :data:`STALL_SECONDS`."""
        if self.until is not None or now - self._progress_at <= STALL_SECONDS:
            return False
        return all(kind == _WAKE for _, kind, _, _ in self._events)


def unusable_gpu_milli(cluster: ClusterState, pending: list[PodInfo]) -> int:
    """Free GPU compute (milli) that none of the pending pods' GPU shapes could use.

    A device's free compute counts as usable when some pending shape fits on its node: a
    whole-GPU shape of ``k`` uses idle devices of nodes with at least ``k`` idle; a sharing
    shape uses devices with enough free compute and memory. With nothing pending, nothing is
    fragmented by this definition.
    """
    shapes = {p.gpu for p in pending if p.gpu.count}
    if not shapes:
        return 0
    n = cluster.size
    exists = cluster.device_exists[:n] & cluster.active[:n, None]
    free = np.where(exists, cluster.device_milli_free[:n], 0)
    idle = (
        exists
        & (cluster.device_milli_free[:n] >= 1000)
        & (cluster.device_memory_free[:n] >= cluster.device_memory_total[:n])
    )
    usable = np.zeros(free.shape, dtype=bool)
    for gpu in shapes:
        if gpu.is_whole:
            usable |= idle & (cluster.idle_devices[:n] >= gpu.count)[:, None]
        else:
            need_mem = gpu.memory_mib or (
                cluster.device_memory_total[:n] * gpu.memory_percent // 100
            )
            usable |= (
                exists
                & (cluster.device_milli_free[:n] >= gpu.milli)
                & (cluster.device_memory_free[:n] >= need_mem)
            )
    return int(free[~usable].sum())


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100) of ``values``, or None when empty."""
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def time_average(times: list[float], values: list[float], end: float) -> float:
    """Time-weighted mean of a step function sampled at ``times`` (held until the next sample)."""
    if not times:
        return 0.0
    t = np.asarray([*times, end], dtype=np.float64)
    widths = np.diff(t)
    total = widths.sum()
    if total <= 0 or not math.isfinite(total):
        return float(values[-1])
    return float(np.dot(np.asarray(values, dtype=np.float64), widths) / total)
