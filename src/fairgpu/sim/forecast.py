"""Predicted start times: the engine run forward in the simulator from a snapshot.

:func:`forecast` takes a cluster state (nodes and the pods running on them), an engine and the
pending pods, and replays what would happen with no new arrivals: running pods end when their
run time says (:class:`~fairgpu.sim.learner.Runtimes`: declared, else learned per queue), each
freed capacity triggers a cycle of the *same* engine, and a pending pod's predicted start is
the simulated time of its first bind. It stops when every pending pod has a start, when nothing
more can happen (pods waiting on run times nobody knows get no start), at the horizon, or when
the wall-clock budget is spent -- whichever comes first.

The live forecaster (:mod:`fairgpu.kube.forecaster`), ``fairgpu explain``/``queues`` and
``benchmarks/prediction`` all call this one function, each on its own fresh copy of the state
(the cluster and engine passed in are consumed).

:func:`forecast_ensemble` adds future arrivals learned from the past
(:class:`~fairgpu.sim.arrivals.ArrivalModel`): the median start over a few sampled futures.
Measured in ``benchmarks/prediction`` it removes part of the early bias for pods that later
work overtakes but widens the spread for the others and costs several times the wall time,
so the live forecaster leaves it off by default (``ARRIVAL_SAMPLES``).
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import Engine
from fairgpu.engine.gang import shorter
from fairgpu.engine.session import EngineState
from fairgpu.model.order import pod_identity
from fairgpu.model.pod import PodInfo
from fairgpu.sim.arrivals import ArrivalModel, future_copy
from fairgpu.sim.job_backlog import JobAhead
from fairgpu.sim.learner import Runtimes, deadline_end
from fairgpu.sim.simulator import _COMPLETE, _POD_DEADLINE, PodRecord, Simulation, SimulationResult
from fairgpu.sim.statefulset_controller import SetAhead
from fairgpu.sim.workload import PodArrival, Workload

__all__ = [
    "DEFAULT_HORIZON",
    "Forecast",
    "JobFailure",
    "PredictionSample",
    "carry_state",
    "forecast",
    "forecast_ensemble",
    "predicted_against_actual",
    "recent_repeat",
    "snapshot_cluster",
]

#: How far ahead a forecast looks by default (seconds of simulated time).
DEFAULT_HORIZON = 14 * 86400.0

#: Future arrivals are generated this far ahead of the simulated clock (seconds).
FUTURE_CHUNK = 3600.0

#: Future arrivals are simulated this far past the instant; later the backlog just drains.
#: Far-off arrivals matter less and cost the most (every cycle weighs all pending pods).
DEFAULT_ARRIVALS_FOR = 4 * 3600.0

#: Sampled future jobs arrive in batches this far apart (seconds), one cycle per batch.
ARRIVAL_STEP = 300.0

#: Sampled futures a forecast with an arrival model takes the median of.
DEFAULT_SAMPLES = 3

#: Future arrivals in ``[start, end)`` (see :mod:`fairgpu.sim.arrivals`).
FutureSource = Callable[[float, float], Sequence[PodArrival]]

#: When a terminating pod is assumed gone (the kubelet's default grace period).
TERMINATING_GRACE = 30.0


@dataclass(frozen=True, slots=True)
class JobFailure:
    """A Job predicted to fail ``at`` (``reason``: its Failed condition's, e.g.
    ``DeadlineExceeded``; ``why`` for people), ``succeeded`` more of its pods having
    succeeded in the forecast by then."""

    at: float
    reason: str
    why: str
    succeeded: int


@dataclass(slots=True)
class Forecast:
    """Predicted starts (``uid`` -> time on the clock of ``now``) of the pending pods asked.

    ``complete``: every pod asked got a start, or is predicted to be deleted first
    (:attr:`deleted`). ``out_of_budget``: the wall-clock budget ran out first.
    ``simulated_to``: the simulated time reached.
    """

    now: float
    starts: dict[str, float] = field(default_factory=dict)
    asked: int = 0
    complete: bool = False
    out_of_budget: bool = False
    wall_seconds: float = 0.0
    simulated_to: float = 0.0
    cycles: int = 0
    # Job key -> when its last pod is predicted to end (asked with ``job_ends``); a Job the
    # forecast did not see through has none.
    job_ends: dict[str, float] = field(default_factory=dict)
    # Job key -> when the last of its pods starts (its backlog drains), beside its end; for
    # a Job predicted to fail, when it fails (its pods still to come are never created).
    job_drains: dict[str, float] = field(default_factory=dict)
    # Job key -> how a Job the forecast followed is predicted to fail (it has no end then).
    job_failures: dict[str, JobFailure] = field(default_factory=dict)
    # uid -> why a pod asked is predicted to be deleted before it starts (its Job failed).
    deleted: dict[str, str] = field(default_factory=dict)
    # Controller key -> when the last of the pods it is still to create is predicted to
    # start (asked with ``set_drains``; :class:`~fairgpu.sim.statefulset_controller.SetAhead`).
    set_drains: dict[str, float] = field(default_factory=dict)

    def start(self, uid: str) -> float | None:
        """The pod's predicted start, or None when the forecast could not tell."""
        return self.starts.get(uid)

    def drain(self, uids: Sequence[str]) -> float | None:
        """When the last of ``uids`` is predicted to start (None if any has no start)."""
        times = [self.starts.get(u) for u in uids]
        if not times or any(t is None for t in times):
            return None
        return max(t for t in times if t is not None)


class _Stop(Exception):
    """Ends a forecast run from its progress hook (done, or out of budget)."""


class _ForecastRun(Simulation):
    """A simulation that starts from a populated cluster instead of an empty one."""

    def seed_running(self, cluster: ClusterState, runtimes: Runtimes, now: float) -> None:
        """Take ``cluster`` as is; each running pod completes when ``runtimes`` predicts."""
        self.cluster = cluster
        for uid, placement in cluster.placements.items():
            pod = cluster.pods[uid]
            # Its full run time: preempted in the forecast, it starts over and runs that long.
            duration = runtimes.replayed(pod)
            rec = PodRecord(
                pod, self.tenant_of(pod), self.user_of(pod), placement.started, duration
            )
            rec.start = placement.started
            rec.node = cluster.node(placement.node).name
            rec.devices = placement.devices
            self.records[uid] = rec
            key = self._group_key(pod)
            if key:
                self.group_running.setdefault(key, set()).add(uid)
            if placement.terminating:
                end: float | None = now + TERMINATING_GRACE
            else:
                ends = runtimes.natural_end(pod, placement.started, now)
                cap = deadline_end(pod, placement.started, now)
                if cap is not None and ends is not None and ends > cap:
                    # Its deadline comes first: the kubelet fails it then.
                    self._push(cap, _POD_DEADLINE, f"{uid}#0")
                    continue
                end = shorter(ends, cap)
            if end is not None:
                self._push(max(now, end), _COMPLETE, f"{uid}#0")


@dataclass(slots=True)
class _Feed:
    """Adds ``more``'s arrivals to a forecast run one :data:`FUTURE_CHUNK` ahead of its
    clock, up to ``until`` (generating hours of future work up front would cost for
    nothing when the forecast ends early)."""

    more: FutureSource
    runtimes: Runtimes
    given: float  # arrivals are known up to here
    until: float

    def extend(self, run: Simulation) -> None:
        """Known arrivals reach one chunk past ``run``'s clock."""
        while self.given < min(self.until, run.now + FUTURE_CHUNK):
            end = min(self.until, self.given + FUTURE_CHUNK)
            for arrival in self.more(self.given, end):
                if arrival.duration is None:
                    arrival.duration = self.runtimes.replayed(arrival.pod)
                run._add_arrival(arrival)
            self.given = end


def forecast(
    cluster: ClusterState,
    engine: Engine,
    pending: Sequence[PodInfo],
    now: float,
    runtimes: Runtimes,
    *,
    budget_s: float = 5.0,
    horizon_s: float = DEFAULT_HORIZON,
    future: Sequence[PodArrival] = (),
    more: FutureSource | None = None,
    jobs: Sequence[JobAhead] = (),
    job_ends: bool = False,
    sets: Sequence[SetAhead] = (),
    set_drains: bool = False,
) -> Forecast:
    """Predict when each of ``pending`` starts, by running ``engine`` forward over ``cluster``.

    ``cluster`` and ``engine`` are consumed (pass copies). Pods are simulated to arrive at
    ``now`` in their creation order; ``future`` pods (see :func:`recent_repeat`) arrive when
    they say and compete for capacity but are not predicted. ``jobs``: the Jobs whose
    controller creates more pods as theirs succeed (:mod:`fairgpu.sim.job_backlog`; their
    pods in ``pending`` or ``cluster`` named by uid): those pods compete too, created as the
    controller would; with ``job_ends`` the forecast also runs on until each such Job's last
    pod ends, or it stops (:attr:`Forecast.job_ends`). ``sets``: pods controllers create
    once another pod starts (StatefulSets' ordered pods, LeaderWorkerSets' workers), created
    as they would be; with ``set_drains`` it runs on until the last of each has started
    (:attr:`Forecast.set_drains`). See the module docstring for when it stops; a pod not
    started by then has no predicted start.
    """
    t0 = time.perf_counter()
    deadline = t0 + budget_s
    result = Forecast(now=now, asked=len(pending))
    waiting = {p.uid for p in pending}
    arrivals = [PodArrival(p, now, runtimes.replayed(p)) for p in pending]
    arrivals.extend(future)
    arrivals.extend(a for j in jobs for a in j.future)
    arrivals.extend(a for c in sets for a in c.future)
    unfinished = {j.job.key: j.job.pods for j in jobs} if job_ends else {}
    unstarted = {c.key: [a.pod.uid for a in c.future] for c in sets} if set_drains else {}
    run: _ForecastRun | None = None
    until = now + horizon_s
    feed = None if more is None else _Feed(more, runtimes, now, until)

    def progress(_done: int, _total: int) -> None:
        assert run is not None
        if feed is not None:
            feed.extend(run)
        for uid in [u for u in waiting if run.records[u].start is not None]:
            start = run.records[uid].start
            assert start is not None
            result.starts[uid] = start
            waiting.discard(uid)
        for uid in [u for u in waiting if run.records[u].failed_at is not None]:
            result.deleted[uid] = run.records[uid].reason  # its Job failed first
            waiting.discard(uid)
        for key in [k for k, uids in unfinished.items() if _ended(run, uids, result, k)]:
            del unfinished[key]
        for key in [k for k, uids in unstarted.items() if _all_started(run, uids, result, k)]:
            del unstarted[key]
        if not waiting and not unfinished and not unstarted:
            raise _Stop
        if time.perf_counter() > deadline:
            result.out_of_budget = True
            raise _Stop

    chains = [c.chain() for c in sets]
    run = _ForecastRun(
        Workload(
            "forecast",
            [],
            arrivals,
            jobs=[j.job for j in jobs],
            ordered=[uids for uids, fan in chains if uids and not fan],
            fanned=[uids for uids, fan in chains if uids and fan],
        ),
        engine,
        until=until,
        on_progress=progress,
        track_fragmentation=False,
    )
    run.seed_running(cluster, runtimes, now)
    with contextlib.suppress(_Stop):
        run.run()
    result.complete = not waiting
    result.wall_seconds = time.perf_counter() - t0
    result.simulated_to = run.now
    result.cycles = run.cycles
    return result


def _all_started(run: Simulation, uids: Sequence[str], result: Forecast, key: str) -> bool:
    """Whether every pod of ``uids`` (a controller's, ``key``) started in ``run``; the last
    start goes to ``result``. A pod deleted first counts as done, with no start."""
    starts = []
    for uid in uids:
        rec = run.records.get(uid)
        if rec is None or (rec.start is None and rec.failed_at is None):
            return False
        if rec.start is not None:
            starts.append(rec.start)
    if starts:
        result.set_drains[key] = max(starts)
    return True


def _ended(run: Simulation, uids: Sequence[str], result: Forecast, key: str) -> bool:
    """Whether Job ``key`` is over in ``run``: every pod of it (``uids``) completed -- its
    end and its last start go to ``result`` -- or it failed (how, to ``result``)."""
    if key in run.jobs.failed:
        at, why = run.failed_jobs.get(key, (run.now, run.jobs.failed[key]))
        why = why.removeprefix(f"Job {key} failed: ")
        reason, succeeded = run.jobs.reason(key), run.jobs.succeeded_count(key)
        result.job_failures[key] = JobFailure(at, reason, why, succeeded)
        result.job_drains[key] = at
        return True
    ends, starts = [], []
    for uid in uids:
        rec = run.records.get(uid)
        if rec is None or rec.end is None or rec.start is None:
            return False
        ends.append(rec.end)
        starts.append(rec.start)
    result.job_ends[key] = max(ends)
    result.job_drains[key] = max(starts)
    return True


def forecast_ensemble(
    make: Callable[[], tuple[ClusterState, Engine]],
    pending: Sequence[PodInfo],
    now: float,
    runtimes: Runtimes,
    model: ArrivalModel | None,
    *,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    budget_s: float = 5.0,
    horizon_s: float = DEFAULT_HORIZON,
    arrivals_for: float = DEFAULT_ARRIVALS_FOR,
    tile: bool = False,
) -> Forecast:
    """:func:`forecast` over ``samples`` futures drawn from ``model`` (arrivals learned before
    ``now``); a pod's predicted start is the median of its starts in them, a sample that did
    not start it counting as "later than all" (no median there: no start). ``make`` returns a
    fresh cluster and engine for each sample. Without a model (or with nothing learned) it is
    one forecast with no future arrivals. The budget is shared: each sample gets what is left
    divided by the samples still to run.
    """
    t0 = time.perf_counter()
    if model is None or not model.jobs or samples < 1:
        cluster, engine = make()
        return forecast(cluster, engine, pending, now, runtimes, budget_s=budget_s)
    rng = np.random.default_rng(seed)
    runs: list[Forecast] = []
    samples = 1 if tile else samples
    for i in range(samples):
        left = budget_s - (time.perf_counter() - t0)
        sample_rng = None if tile else np.random.default_rng(rng.integers(2**63))
        more = _sampler(model, sample_rng, f"s{i}", now + arrivals_for)
        cluster, engine = make()
        got = forecast(
            cluster,
            engine,
            pending,
            now,
            runtimes,
            budget_s=max(0.0, left / (samples - i)),
            horizon_s=horizon_s,
            more=more,
        )
        runs.append(got)
    return _median(runs, pending, now, time.perf_counter() - t0)


def _sampler(
    model: ArrivalModel, rng: np.random.Generator | None, tag: str, stop: float
) -> FutureSource:
    """``model``'s arrivals before ``stop``, drawn interval by interval from ``rng`` (names
    unique by ``tag``), or its periodic extension without ``rng``."""
    calls = [0]

    def more(start: float, end: float) -> Sequence[PodArrival]:
        calls[0] += 1
        end = min(end, stop)
        if rng is None:
            return model.tile(start, end, tag)
        return model.sample(start, end, rng, f"{tag}.{calls[0]}", ARRIVAL_STEP)

    return more


def _median(runs: list[Forecast], pending: Sequence[PodInfo], now: float, wall: float) -> Forecast:
    """One forecast from several: per pod the median start (a missing start is +inf)."""
    out = Forecast(now=now, asked=len(pending))
    for pod in pending:
        times = [r.starts.get(pod.uid, float("inf")) for r in runs]
        mid = float(np.median(times))
        if np.isfinite(mid):
            out.starts[pod.uid] = mid
    out.complete = len(out.starts) == len(pending)
    out.out_of_budget = any(r.out_of_budget for r in runs)
    out.wall_seconds = wall
    out.simulated_to = max(r.simulated_to for r in runs)
    out.cycles = sum(r.cycles for r in runs)
    return out


def carry_state(state: EngineState, cluster: ClusterState) -> EngineState:
    """A copy of an engine's between-cycle state (usage history, reservations, gang and
    starvation timers, reclaim cooldowns, what its plugins learned: typical pod shapes, the
    packing plan) for a fresh engine over ``cluster``, a snapshot of the same nodes: each
    reservation's node slots are found again by node name. The engine that is given it
    adopts the learning (:attr:`~fairgpu.engine.engine.Engine.state`).

    Without it a forecast orders queues without their usage history, forgets the nodes held
    for starving jobs and scores nodes with shapes learned from the snapshot alone, and
    predicts a different order and other nodes than the scheduler will choose.
    """
    out = copy.deepcopy(state)
    for res in out.reservations.values():
        # ``slots`` (members per node) runs beside ``nodes``: a node not found drops both.
        counts = res.slots.tolist() if res.slots is not None else [0] * len(res.node_names)
        found = [
            (cluster.node_index[n], k)
            for n, k in zip(res.node_names, counts, strict=True)
            if n in cluster.node_index
        ]
        res.nodes = np.asarray([i for i, _ in found], dtype=res.nodes.dtype)
        if res.slots is not None:
            res.slots = np.asarray([k for _, k in found], dtype=res.slots.dtype)
        res.room = {}  # computed on the other cluster
    return out


def snapshot_cluster(source: ClusterState) -> ClusterState:
    """A fresh cluster with ``source``'s nodes, namespaces and running pods (where, which
    devices, since when): what a live snapshot of the same moment holds. Storage and DRA
    objects are not copied (the built-in workloads use none)."""
    out = ClusterState(max_devices=source.max_devices, capacity=max(64, source.size))
    out.namespace_labels = dict(source.namespace_labels)
    out.service_selectors = source.service_selectors
    slots: dict[int, int] = {}
    for idx, node in source.active_nodes():
        slots[idx] = out.add_node(node)
    for uid, placement in source.placements.items():
        pod = source.pods[uid]
        copy = out.assign(pod, slots[placement.node], placement.devices, placement.started)
        copy.bound, copy.terminating = placement.bound, placement.terminating
    return out


def recent_repeat(
    recent: Sequence[tuple[PodInfo, float]], now: float, window: float, runtimes: Runtimes
) -> list[PodArrival]:
    """The pods that arrived in the last ``window`` seconds (``(pod, arrival)``), arriving
    again ``window`` seconds later: the guess that the near future looks like the recent past.

    Work that arrives later under a fair order can go ahead of a waiting pod (a queue below
    its share); leaving it out predicts starts too early. Each copy gets its own UID and, for
    a gang, its own group name, so it never joins the real pod's group.
    """
    out: list[PodArrival] = []
    for pod, arrival in recent:
        if not now - window <= arrival < now:
            continue
        copy = future_copy(pod, "~next", arrival + window)
        out.append(PodArrival(copy, arrival + window, runtimes.replayed(pod)))
    return out


@dataclass(slots=True)
class PredictedRow:
    """One pending pod at the instant ``at`` of a finished run: predicted against actual."""

    pod: str
    queue: str
    arrival: float
    predicted: float | None
    actual: float | None


@dataclass(slots=True)
class PredictionSample:
    """Predicted against actual starts of a few pods pending at ``at`` (for the report)."""

    at: float
    pending: int
    rows: list[PredictedRow]
    wall_seconds: float


def _first_start_after(result: SimulationResult, at: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for attempt in result.runs:
        if attempt.start >= at and attempt.start < out.get(attempt.uid, float("inf")):
            out[attempt.uid] = attempt.start
    return out


def predicted_against_actual(
    workload: Workload,
    make_engine: Callable[[], Engine],
    result: SimulationResult,
    at: float | None = None,
    limit: int = 8,
    budget_s: float = 10.0,
) -> PredictionSample | None:
    """Replay ``workload`` to ``at`` (default: when the most pods were pending), forecast the
    pending pods there as the live scheduler would (a fresh engine given the replay's engine
    state, declared run times) and put
    the predictions beside their starts in ``result``; ``limit`` pods, taken in turn from each
    queue. None when nothing was pending then."""
    tl = result.timeline
    if at is None:
        if not tl.pending or max(tl.pending) == 0:
            return None
        at = tl.time[int(np.argmax(tl.pending))]
    replay = Simulation(workload, make_engine(), until=at, track_fragmentation=False)
    replay.run()
    pending = sorted(replay.pending.values(), key=pod_identity)
    if not pending:
        return None
    engine = make_engine()
    cluster = snapshot_cluster(replay.cluster)
    engine.state = carry_state(replay.engine.state, cluster)
    runtimes = Runtimes(lambda p: engine.tenant(p).queue)
    queue_of = {p.uid: engine.tenant(p).queue for p in pending}
    got = forecast(cluster, engine, pending, at, runtimes, budget_s=budget_s)
    actual = _first_start_after(result, at)
    by_queue: dict[str, list[PodInfo]] = {}
    groups: set[str] = set()
    for pod in pending:  # one pod per job: gang members start together
        ref = engine.pod_group(pod)
        if ref is None or ref.key not in groups:
            groups.add("" if ref is None else ref.key)
            by_queue.setdefault(queue_of[pod.uid], []).append(pod)
    chosen: list[PodInfo] = []
    while len(chosen) < limit and any(by_queue.values()):
        for pods in by_queue.values():
            if pods and len(chosen) < limit:
                chosen.append(pods.pop(0))
    rows = [
        PredictedRow(
            p.key,
            queue_of[p.uid],
            replay.records[p.uid].arrival,
            got.start(p.uid),
            actual.get(p.uid),
        )
        for p in sorted(chosen, key=lambda p: got.start(p.uid) or float("inf"))
    ]
    return PredictionSample(at, len(pending), rows, got.wall_seconds)
