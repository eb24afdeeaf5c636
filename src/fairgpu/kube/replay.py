"""``explain`` and ``queues`` for a simulated run: the run replayed to an instant, as a snapshot.

The answers of :mod:`fairgpu.kube.explain` are computed over a :class:`Snapshot` -- fresh
copies of a scheduler cache and an engine. :class:`ReplaySnapshot` gives them the state of a
``fairgpu simulate --out`` run at simulated second ``at`` (:func:`fairgpu.sim.rerun.replay`):
its cluster, its pending pods, and its engine *with* what the engine kept between cycles
(usage history, reservations, timers) -- which a live snapshot cannot see. Each
:meth:`ReplaySnapshot.build` is an independent deep copy, so one question's trial cycle never
changes another's state. Times read as ``t=<seconds> s``.
"""

from __future__ import annotations

import copy
import csv
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fairgpu.engine.engine import Engine
from fairgpu.kube.cache import SchedulerCache
from fairgpu.kube.snapshot import FORECAST_BUDGET, ReadSettings, Snapshot
from fairgpu.model.pod import PodInfo
from fairgpu.sim.job_backlog import JobAhead
from fairgpu.sim.rerun import RunSpec, load_run, replay
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.statefulset_controller import SetAhead

__all__ = ["ReplaySnapshot", "RunPod", "find_pod", "replay_snapshot", "sim_label"]

#: The scheduler name a simulated run's pods are scheduled by.
SIM_SCHEDULER = "fairgpu"


#: Outcomes of run attempts ended by a preemption (the victim, or a gang torn down with it).
PREEMPTED_OUTCOMES = frozenset({"preempted", "gang-restart"})


def sim_label(t: float) -> str:
    """A simulated instant for people: ``t=1234 s``."""
    return f"t={t:.0f} s"


@dataclass(slots=True)
class ReplaySnapshot(Snapshot):
    """The state of a simulated run right after the cycle at (or last before) ``now``."""

    sim: Simulation | None = None

    def build(self) -> tuple[SchedulerCache, Engine]:
        """A deep copy of the replay's cluster, pending pods and engine, as a cache and an
        engine (the engine reports every pending pod, as the live one does)."""
        assert self.sim is not None
        cluster, engine, pending = copy.deepcopy(
            (self.sim.cluster, self.sim.engine, self.sim.pending)
        )
        engine.report_unchanged = True
        cache = SchedulerCache(self.settings.scheduler_name)
        cache.cluster = cluster
        cache.pending = dict(pending)
        # A pod the run stopped trying because no change can help (a malformed object, an
        # unknown queue) is still pending, as the live cache keeps it: the engine names why.
        for uid, pod in self.sim.given_up.items():
            if uid not in cache.pending and uid not in cluster.placements:
                cache.pending[uid] = pod
        for uid, placement in cluster.placements.items():
            name = cluster.node(placement.node).name
            cache.bound_on.setdefault(name, {})[uid] = cluster.pods[uid]
        return cache, engine

    def jobs_ahead(
        self, cache: SchedulerCache, runtime: Callable[[PodInfo], float | None]
    ) -> list[JobAhead]:
        """The run's active Jobs at this instant, from its own Job controller (``runtime``
        is not needed: the run knows its pods' run times)."""
        assert self.sim is not None
        present = set(cache.cluster.pods) | set(cache.pending)
        return self.sim.jobs.ahead(present, self.now)

    def sets_ahead(
        self, cache: SchedulerCache, runtime: Callable[[PodInfo], float | None]
    ) -> list[SetAhead]:
        """The pods the run's StatefulSet and LeaderWorkerSet controllers are still to
        create at this instant, from its own record of them."""
        assert self.sim is not None
        present = set(cache.cluster.pods) | set(cache.pending)
        return self.sim.ordered.ahead(present, self.now)


@dataclass(slots=True)
class RunPod:
    """One pod of a recorded run, from its ``pods.csv`` and ``runs.csv`` rows."""

    key: str
    arrival: float
    starts: list[float] = field(default_factory=list)  # every run attempt's start

    def default_instant(self) -> float:
        """An instant worth explaining: midway through its first wait, else its arrival."""
        first = min(self.starts, default=math.inf)
        if math.isfinite(first) and first > self.arrival:
            return self.arrival + (first - self.arrival) / 2
        return self.arrival

    def next_start(self, at: float) -> float | None:
        """When it started next after ``at`` in the recorded run (None: never)."""
        return min((s for s in self.starts if s > at), default=None)


def find_pod(directory: Path, key: str) -> RunPod:
    """Pod ``namespace/name`` of the run in ``directory`` (``ValueError`` if absent)."""
    pods = directory / "pods.csv"
    if not pods.is_file():
        raise ValueError(f"{pods}: no such file (run `fairgpu simulate --out {directory}`)")
    found: RunPod | None = None
    with pods.open(newline="") as f:
        for row in csv.DictReader(f):
            if f"{row['namespace']}/{row['name']}" == key:
                found = RunPod(key, float(row["arrival"]))
                break
    if found is None:
        raise ValueError(f"pod {key} is not in {pods}")
    runs = directory / "runs.csv"
    if runs.is_file():
        with runs.open(newline="") as f:
            for row in csv.DictReader(f):
                if f"{row['namespace']}/{row['name']}" == key:
                    found.starts.append(float(row["start"]))
    return found


def _check_instant(at: float) -> float:
    if not math.isfinite(at) or at < 0:
        raise ValueError(f"--at must be a number of simulated seconds >= 0, not {at:g}")
    return at


def replay_snapshot(
    directory: Path, at: float, forecast_budget: float = FORECAST_BUDGET
) -> ReplaySnapshot:
    """The run recorded in ``directory`` at simulated second ``at`` (its forecasts may take
    ``forecast_budget`` wall seconds)."""
    _check_instant(at)
    spec: RunSpec = load_run(directory)
    sim = replay(spec, at)
    settings = ReadSettings(
        tenancy=spec.config,
        policy=spec.policy,
        ordering=spec.ordering,
        scheduler_name=SIM_SCHEDULER,
        seed=spec.seed,
    )
    snapshot = ReplaySnapshot(settings, at, [], [], [], label=sim_label, sim=sim)
    snapshot.forecast_budget = forecast_budget
    # The run's preemptions so far: run attempts ended to make room for another pod.
    snapshot.preemptions = [
        (a.end, sim.engine.tenant(sim.records[a.uid].pod).queue)
        for a in sim.runs.attempts
        if a.end is not None and a.outcome in PREEMPTED_OUTCOMES
    ]
    return snapshot


def pod_object(snapshot: ReplaySnapshot, key: str) -> dict[str, Any]:
    """Pod ``key`` at the snapshot's instant, as the API object ``explain`` reads: its node
    if it runs, else its last reason as the PodScheduled condition's message."""
    sim = snapshot.sim
    assert sim is not None
    rec = next((r for r in sim.records.values() if r.pod.key == key), None)
    if rec is None:
        return {}
    pod = rec.pod
    placement = sim.cluster.placements.get(pod.uid)
    spec: dict[str, Any] = {"schedulerName": SIM_SCHEDULER}
    status: dict[str, Any] = {"phase": "Running" if placement is not None else "Pending"}
    if placement is not None:
        spec["nodeName"] = sim.cluster.node(placement.node).name
    elif pod.uid not in sim.pending and rec.end is not None:
        status["phase"] = "Succeeded"
    if placement is None and rec.reason:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "message": rec.reason,
                "lastTransitionTime": sim_label(sim.now),
            }
        ]
    meta = {"uid": pod.uid, "annotations": dict(pod.annotations)}
    return {"metadata": meta, "spec": spec, "status": status}


def explain_in_run(
    directory: Path, key: str, at: float | None, forecast_budget: float = FORECAST_BUDGET
) -> dict[str, Any]:
    """:func:`~fairgpu.kube.explain.explain_pod` for pod ``key`` of the run recorded in
    ``directory`` at simulated second ``at`` (default: :meth:`RunPod.default_instant`), with
    ``simulated_run``, ``at``, ``at_label`` and ``started_in_run`` (when the recorded run
    started it next; None: never) added. ``ValueError`` for a pod, file or instant that does
    not fit the run."""
    from fairgpu.kube.explain import explain_pod

    pod = find_pod(directory, key)
    when = pod.default_instant() if at is None else _check_instant(at)
    if when < pod.arrival:
        raise ValueError(f"pod {key} arrives at {sim_label(pod.arrival)}, after --at {when:g}")
    snapshot = replay_snapshot(directory, when, forecast_budget)
    namespace, _, name = key.partition("/")
    report = explain_pod(snapshot, namespace, name, pod_object(snapshot, key))
    next_start = pod.next_start(when)
    report.update(
        simulated_run=str(directory),
        at=when,
        at_label=sim_label(when),
        started_in_run=None if next_start is None else sim_label(next_start),
        started_in_run_after_seconds=None if next_start is None else round(next_start - when),
    )
    return report


def busiest_instant(directory: Path) -> float:
    """When the most pods of the recorded run waited for their first start (``pods.csv``
    arrivals, ``runs.csv`` starts); 0 when none waited."""
    first: dict[str, float] = {}
    runs = directory / "runs.csv"
    if runs.is_file():
        with runs.open(newline="") as f:
            for row in csv.DictReader(f):
                key = f"{row['namespace']}/{row['name']}"
                first[key] = min(first.get(key, math.inf), float(row["start"]))
    events: list[tuple[float, int]] = []
    with (directory / "pods.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            arrival = float(row["arrival"])
            start = first.get(f"{row['namespace']}/{row['name']}", math.inf)
            if start > arrival:
                events.extend(((arrival, 1), (start, -1)))
    best, at, waiting = 0, 0.0, 0
    for t, step in sorted(events, key=lambda e: (e[0], e[1])):
        waiting += step
        if waiting > best:
            best, at = waiting, t
    return at


def jobs_in_run(
    directory: Path,
    at: float | None,
    namespace: str | None = None,
    forecast_budget: float = FORECAST_BUDGET,
) -> dict[str, Any]:
    """:func:`~fairgpu.kube.explain.job_rows` of the run recorded in ``directory`` at
    simulated second ``at`` (default: :func:`busiest_instant`): ``{"at", "at_label",
    "simulated_run", "jobs"}``."""
    from fairgpu.kube.explain import job_rows

    snapshot, head = _at_instant(directory, at, forecast_budget)
    return {**head, "jobs": job_rows(snapshot, namespace)}


def _at_instant(
    directory: Path, at: float | None, forecast_budget: float
) -> tuple[ReplaySnapshot, dict[str, Any]]:
    """The run recorded in ``directory`` replayed to ``at`` (default: :func:`busiest_instant`)
    and the head of an answer about it: ``{"simulated_run", "at", "at_label"}``."""
    if not (directory / "pods.csv").is_file():
        raise ValueError(f"{directory / 'pods.csv'}: no such file")
    when = busiest_instant(directory) if at is None else at
    head = {"simulated_run": str(directory), "at": when, "at_label": sim_label(when)}
    return replay_snapshot(directory, when, forecast_budget), head


def queues_in_run(
    directory: Path, at: float | None, forecast_budget: float = FORECAST_BUDGET
) -> dict[str, Any]:
    """:func:`~fairgpu.kube.explain.queue_rows` of the run recorded in ``directory`` at
    simulated second ``at`` (default: :func:`busiest_instant`): ``{"at", "at_label",
    "simulated_run", "queues"}``."""
    from fairgpu.kube.explain import queue_rows

    snapshot, head = _at_instant(directory, at, forecast_budget)
    return {**head, "queues": queue_rows(snapshot)}
