"""Prediction benchmark: how close is the predicted start of a pending pod to its real start?

Each scenario is replayed once through the simulator (the "actual" run). At regular instants
of that run the state is copied as a live snapshot would hold it -- nodes, running pods with
their nodes, devices and start times, the pending pods, and the engine's between-cycle state
(usage history, reservations, timers) as the live scheduler hands it over -- into a fresh
engine, and
:func:`fairgpu.sim.forecast.forecast` (the function the live forecaster calls) predicts every
pending pod's start. After the run each prediction is compared with the pod's first real start.

Scenarios: the built-in demo (``fairgpu simulate``'s default workload) and a second mixed
workload (more gangs, five tenants, a heavier load), each twice:

* ``declared``: pods carry ``fairgpu.io/duration-seconds`` (their true run time), the forecast
  uses it;
* ``learned``: the annotation is removed from every pod (the engine's backfill does not see it
  either); the forecast uses run times learned per queue from the completions observed before
  the instant.

Per scenario: p50/p90 of ``|predicted - actual| / actual wait`` (``actual wait`` = start minus
arrival; pods that waited >= 60 s), also of the stricter ``/ wait remaining at the instant``,
coverage (share of such predictions the forecast could make) and the forecast's wall time --
beside a naive baseline measured in the same run: a pod's wait is the pods ahead of it in its
queue (FIFO) times the queue's mean run time, divided by the pods the queue has running.

Diagnostics, not forecasts anyone can make: ``--oracle`` tells the forecast the real
arrivals after the instant; ``--draws K`` tells it ``K`` futures drawn from the scenario's
own generator (other seeds) and scores quantiles of the ``K`` starts and their median blended
with the plain forecast -- how well a forecast could do that knew the true distribution of
future arrivals but not the arrivals themselves.

Usage: ``python benchmarks/prediction/run.py [--every 3600] [--budget 10] [--only NAME]
[--oracle] [--draws K] [--results FILE]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import Engine
from fairgpu.engine.gang import declared_runtime
from fairgpu.engine.policies import DEFAULT_POLICY, policy
from fairgpu.model.order import pod_identity
from fairgpu.model.pod import ANN_DURATION, PodInfo
from fairgpu.sim.arrivals import DEFAULT_WINDOW, ArrivalModel, future_copy
from fairgpu.sim.forecast import (
    DEFAULT_ARRIVALS_FOR,
    DEFAULT_SAMPLES,
    carry_state,
    forecast,
    forecast_ensemble,
    recent_repeat,
    snapshot_cluster,
)
from fairgpu.sim.learner import RuntimeLearner, Runtimes
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.sim.workloads.synthetic import SyntheticSpec, generate

MIN_WAIT = 60.0
TARGET = {"p50": 0.10, "p90": 0.35}


def demo(seed: int = 0) -> Workload:
    """The built-in demo, as ``fairgpu simulate`` runs it (seed 0)."""
    return generate(SyntheticSpec(), seed=seed)


def mixed(seed: int = 1) -> Workload:
    """Five tenants, a third of training as gangs, more inference, a heavier load."""
    spec = SyntheticSpec(
        tenants={"ml": 0.3, "vision": 0.2, "speech": 0.2, "search": 0.15, "ads": 0.15},
        jobs=350,
        mean_interarrival_s=60.0,
        training_fraction=0.5,
        gang_fraction=0.3,
        training_gpus={1: 0.3, 2: 0.3, 4: 0.2, 8: 0.2},
        training_median_s=1500.0,
        inference_median_s=2400.0,
    )
    return generate(spec, seed=seed)


# Each scenario's generator; called without a seed, the workload measured.
SCENARIOS: dict[str, Callable[..., Workload]] = {"demo": demo, "mixed": mixed}


def undeclared(workload: Workload) -> Workload:
    """The workload with no pod declaring its run time."""
    for arrival in workload.arrivals:
        ann = {k: v for k, v in arrival.pod.annotations.items() if k != ANN_DURATION}
        arrival.pod = replace(arrival.pod, annotations=ann)
    return workload


Row = tuple[float, str, dict[str, float | None]]


@dataclass(slots=True)
class Probe:
    """Predicts every pending pod's start at every ``every`` seconds of the actual run.

    Columns of each row: ``forecast`` (the live default: nothing arrives after the
    instant), ``arrival_model`` (if ``samples`` > 0: the median over ``samples`` futures
    drawn from the arrivals of the last ``model_window`` seconds), ``baseline`` and, with
    ``oracle``, ``oracle`` (a diagnostic told the real future; no forecast can know it).
    """

    sim: Simulation
    workload: Workload
    declared: bool
    every: float
    budget: float
    window: float
    oracle: bool = False
    draws: int = 0
    scenario: str = ""
    samples: int = DEFAULT_SAMPLES
    model_window: float = DEFAULT_WINDOW
    arrivals_for: float = DEFAULT_ARRIVALS_FOR
    tile: bool = False
    next_at: float = 0.0
    learner: RuntimeLearner = field(default_factory=RuntimeLearner)
    learned: set[str] = field(default_factory=set)
    rows: list[Row] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    walls_model: list[float] = field(default_factory=list)
    complete: list[bool] = field(default_factory=list)

    def __call__(self, _done: int, _total: int) -> None:
        sim = self.sim
        if sim.now < self.next_at or not sim.pending:
            return
        while self.next_at <= sim.now:
            self.next_at += self.every
        self._learn()
        pending = sorted(sim.pending.values(), key=pod_identity)
        engine = fresh_engine(self.workload)
        runtimes = Runtimes(lambda p: engine.tenant(p).queue, self.learner, self.declared)
        base = self._baseline(pending, engine, runtimes)
        # What a live scheduler has seen arrive by now (pod creation times).
        seen = [(a.pod, a.arrival) for a in self.workload.arrivals if a.arrival <= sim.now]
        model = ArrivalModel.learn(seen, sim.now, self._group_of(engine), self.model_window)
        # The forecast as the live scheduler makes it by default: nothing arrives later.
        cluster, fresh = self._fresh()
        future = []
        if self.window:
            recent = [(p, t) for p, t in seen if sim.now - self.window <= t < sim.now]
            future = recent_repeat(recent, sim.now, self.window, runtimes)
        got = forecast(
            cluster, fresh, pending, sim.now, runtimes, budget_s=self.budget, future=future
        )
        self.walls.append(got.wall_seconds)
        self.complete.append(got.complete)
        modelled: dict[str, float] = {}
        if self.samples:
            with_model = forecast_ensemble(
                self._fresh,
                pending,
                sim.now,
                runtimes,
                model,
                samples=self.samples,
                seed=int(sim.now),
                budget_s=self.budget,
                arrivals_for=self.arrivals_for,
                tile=self.tile,
            )
            self.walls_model.append(with_model.wall_seconds)
            modelled = with_model.starts
        told = self._oracle(pending, runtimes) if self.oracle else {}
        drawn = self._drawn_futures(pending, runtimes) if self.draws else {}
        plain = got.starts
        for pod in pending:
            cols = {
                "forecast": got.start(pod.uid),
                "arrival_model": modelled.get(pod.uid),
                "baseline": base.get(pod.uid),
                "oracle": told.get(pod.uid),
                **_drawn_columns(plain.get(pod.uid), drawn.get(pod.uid)),
            }
            self.rows.append((sim.now, pod.uid, cols))

    @staticmethod
    def _group_of(engine: Engine) -> Callable[[PodInfo], str | None]:
        def group(pod: PodInfo) -> str | None:
            ref = engine.pod_group(pod)
            return None if ref is None else ref.key

        return group

    def _fresh(self) -> tuple[ClusterState, Engine]:
        """The state as the live forecaster receives it, in a fresh engine."""
        engine = fresh_engine(self.workload)
        cluster = snapshot_cluster(self.sim.cluster)
        engine.state = carry_state(self.sim.engine.state, cluster)
        return cluster, engine

    def _oracle(self, pending: list[PodInfo], runtimes: Runtimes) -> dict[str, float]:
        """DIAGNOSTIC ONLY: the forecast told the real future arrivals (never available to
        a real forecast), to measure how much of the error they cause."""
        cluster, engine = self._fresh()
        future = [
            PodArrival(a.pod, a.arrival, runtimes.duration(a.pod))
            for a in self.workload.arrivals
            if a.arrival > self.sim.now
        ]
        got = forecast(
            cluster, engine, pending, self.sim.now, runtimes, budget_s=self.budget, future=future
        )
        return dict(got.starts)

    def _drawn_futures(self, pending: list[PodInfo], runtimes: Runtimes) -> dict[str, list[float]]:
        """DIAGNOSTIC ONLY: each pod's start in ``draws`` forecasts (inf: none), each told a
        future drawn from the scenario's own generator (another seed: the same Poisson
        arrivals and job mix, independent of the past) -- what a forecast that knew the true
        distribution of future arrivals, but not the arrivals themselves, could work from
        (see :func:`_drawn_columns`)."""
        now = self.sim.now
        runs = []
        for k in range(1, self.draws + 1):
            other = SCENARIOS[self.scenario](1000 + k)
            if not self.declared:
                other = undeclared(other)
            copies = (
                future_copy(a.pod, f"~d{k}", a.arrival) for a in other.arrivals if a.arrival > now
            )
            future = [PodArrival(c, c.created, runtimes.duration(c)) for c in copies]
            cluster, engine = self._fresh()
            runs.append(
                forecast(
                    cluster, engine, pending, now, runtimes, budget_s=self.budget, future=future
                )
            )
        return {p.uid: [r.starts.get(p.uid, np.inf) for r in runs] for p in pending}

    def _learn(self) -> None:
        """Completions seen so far (what a live scheduler has observed by now)."""
        for uid, rec in self.sim.records.items():
            if rec.end is not None and rec.start is not None and uid not in self.learned:
                self.learned.add(uid)
                self.learner.observe(rec.tenant, rec.end - rec.start)

    def _baseline(
        self, pending: list[PodInfo], engine: Engine, runtimes: Runtimes
    ) -> dict[str, float]:
        """Queue length x mean run time / running pods of the queue, FIFO per queue."""
        sim, now = self.sim, self.sim.now
        running: dict[str, list[PodInfo]] = {}
        for pod in sim.cluster.pods.values():
            running.setdefault(engine.tenant(pod).queue, []).append(pod)
        queued: dict[str, list[PodInfo]] = {}
        for pod in pending:
            queued.setdefault(engine.tenant(pod).queue, []).append(pod)
        out: dict[str, float] = {}
        for queue, pods in queued.items():
            mean = self._mean_runtime(queue, running.get(queue, []) + pods)
            if mean is None:
                continue
            slots = max(1, len(running.get(queue, [])))
            for i, pod in enumerate(pods):
                out[pod.uid] = now + (i + 1) * mean / slots
        return out

    def _mean_runtime(self, queue: str, pods: list[PodInfo]) -> float | None:
        if self.declared:
            values = [d for p in pods if (d := declared_runtime(p)) is not None]
            return float(np.mean(values)) if values else None
        return self.learner.mean(queue)


# Point estimates from the drawn futures' starts: quantiles, and the median blended half and
# half with the plain forecast (nothing arriving), which no later arrival can make later.
DRAWN_QUANTILES = (10, 25, 50)


def _drawn_columns(plain: float | None, starts: list[float] | None) -> dict[str, float | None]:
    """The drawn-futures diagnostic columns of one prediction (none without draws)."""
    if starts is None:
        return {}
    out: dict[str, float | None] = {}
    for q in DRAWN_QUANTILES:
        value = float(np.percentile(starts, q))
        out[f"drawn_q{q}"] = value if np.isfinite(value) else None
    mid = out["drawn_q50"]
    out["drawn_blend"] = None if plain is None or mid is None else (plain + mid) / 2
    return out


def fresh_engine(workload: Workload) -> Engine:
    """An engine as the forecasting process builds it (its state is carried over)."""
    engine = Engine(policy(DEFAULT_POLICY), 0)
    engine.register_pod_groups(workload.pod_groups)
    return engine


def next_start(attempts: dict[str, list[tuple[float, float | None]]], uid: str, at: float):
    """The pod's first real start at or after ``at``, and since when it was waiting then
    (its arrival, or the end of its last run before ``at`` if it was preempted)."""
    since, start = None, None
    for begin, end in attempts.get(uid, ()):
        if begin >= at:
            start = begin
            break
        if end is not None and end <= at:
            since = end
    return start, since


def errors(
    rows: list[Row],
    attempts: dict[str, list[tuple[float, float | None]]],
    arrival: dict[str, float],
    column: str,
) -> dict[str, Any]:
    """p50/p90 of the relative error of predictions in ``column``, and their coverage."""
    by_wait: list[float] = []
    by_left: list[float] = []
    eligible = covered = 0
    for row in rows:
        at, uid, predicted = row[0], row[1], row[2][column]
        actual, since = next_start(attempts, uid, at)
        waited_from = arrival[uid] if since is None else since
        if actual is None or actual - waited_from < MIN_WAIT:
            continue
        eligible += 1
        if predicted is None:
            continue
        covered += 1
        by_wait.append(abs(predicted - actual) / (actual - waited_from))
        if actual - at >= MIN_WAIT:
            by_left.append(abs(predicted - actual) / (actual - at))

    def pct(values: list[float], q: float) -> float | None:
        return round(float(np.percentile(values, q)), 3) if values else None

    return {
        "p50": pct(by_wait, 50),
        "p90": pct(by_wait, 90),
        "p50_of_remaining_wait": pct(by_left, 50),
        "p90_of_remaining_wait": pct(by_left, 90),
        "predictions": eligible,
        "coverage": round(covered / eligible, 3) if eligible else None,
    }


@dataclass(slots=True)
class Settings:
    """How one scenario is measured (see ``main``'s options)."""

    every: float = 3600.0
    budget: float = 10.0
    window: float = 0.0
    oracle: bool = False
    draws: int = 0
    samples: int = DEFAULT_SAMPLES
    model_window: float = DEFAULT_WINDOW
    arrivals_for: float = DEFAULT_ARRIVALS_FOR
    tile: bool = False


def _walls(walls: list[float]) -> dict[str, Any]:
    return {
        "wall_s_mean": round(float(np.mean(walls)), 3) if walls else None,
        "wall_s_max": round(float(np.max(walls)), 3) if walls else None,
    }


def measure(name: str, declared: bool, cfg: Settings) -> dict[str, Any]:
    """Replay scenario ``name`` once, predicting at every instant; the JSON entry."""
    workload = SCENARIOS[name]()
    if not declared:
        workload = undeclared(workload)
    sim = Simulation(workload, fresh_engine(workload), track_fragmentation=False)
    probe = Probe(sim, workload, declared, cfg.every, cfg.budget, cfg.window, cfg.oracle)
    probe.draws, probe.scenario = cfg.draws, name
    probe.samples, probe.model_window = cfg.samples, cfg.model_window
    probe.arrivals_for, probe.tile = cfg.arrivals_for, cfg.tile
    sim.on_progress = probe
    t0 = time.perf_counter()
    result = sim.run()
    replay_s = time.perf_counter() - t0 - sum(probe.walls) - sum(probe.walls_model)
    attempts: dict[str, list[tuple[float, float | None]]] = {}
    for attempt in sorted(result.runs, key=lambda a: a.start):
        attempts.setdefault(attempt.uid, []).append((attempt.start, attempt.end))
    arrival = {r.pod.uid: r.arrival for r in result.records}
    rows = probe.rows
    forecast_entry = errors(rows, attempts, arrival, "forecast")
    forecast_entry.update(
        _walls(probe.walls),
        forecasts=len(probe.walls),
        complete_forecasts=sum(probe.complete),
    )
    modelled = errors(rows, attempts, arrival, "arrival_model")
    modelled.update(_walls(probe.walls_model))
    entry: dict[str, Any] = {
        "scenario": name,
        "runtimes": "declared" if declared else "learned",
        "pods": len(result.records),
        "pods_waiting_60s": sum(
            1 for r in result.records if r.wait is not None and r.wait >= MIN_WAIT
        ),
        "every_s": cfg.every,
        "budget_s": cfg.budget,
        "arrival_model": {
            "samples": cfg.samples,
            "window_s": cfg.model_window,
            "arrivals_for_s": cfg.arrivals_for,
            "tile": cfg.tile,
        },
        "recent_window_s": cfg.window,
        "replay_wall_s": round(replay_s, 1),
        "forecast": forecast_entry,
        # With future arrivals drawn from the model (an option, off live by default).
        "forecast_with_arrival_model": modelled if cfg.samples else None,
        "baseline": errors(rows, attempts, arrival, "baseline"),
        # The baseline over the predictions the forecast made (the same pods and instants).
        "baseline_where_forecast": errors(
            [r for r in rows if r[2]["forecast"] is not None], attempts, arrival, "baseline"
        ),
    }
    if cfg.oracle:
        # DIAGNOSTIC: told the real future arrivals; not a forecast anyone can make.
        entry["oracle_future_arrivals"] = errors(rows, attempts, arrival, "oracle")
    if cfg.draws:
        # DIAGNOSTIC: the true arrival process known, its realisation not (see Probe).
        entry["drawn_futures"] = {
            "draws": cfg.draws,
            **{
                column: errors(rows, attempts, arrival, column)
                for column in [f"drawn_q{q}" for q in DRAWN_QUANTILES] + ["drawn_blend"]
            },
        }
    _verdict(entry, declared)
    return entry


def _verdict(entry: dict[str, Any], declared: bool) -> None:
    """Declared run times: does the forecast meet the target? Learned: beat the baseline?"""
    f = entry["forecast"]
    if declared:
        entry["target"] = TARGET
        entry["meets_target"] = bool(
            f["p50"] is not None
            and f["p50"] <= TARGET["p50"]
            and f["p90"] is not None
            and f["p90"] <= TARGET["p90"]
        )
    else:
        entry["beats_baseline"] = _beats(f, entry["baseline"])


def _beats(mine: dict[str, Any], base: dict[str, Any]) -> bool:
    """Lower p50 and p90 at no lower coverage."""
    keys = ("p50", "p90")
    if any(mine[k] is None for k in keys):
        return False
    if any(base[k] is None for k in keys):
        return True
    return (
        all(mine[k] < base[k] for k in keys)
        and (mine["coverage"] or 0) >= (base["coverage"] or 0) - 1e-9
    )


def main() -> None:
    """Run every scenario x run-time source; print one JSON object (and save it)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=float, default=3600.0, help="seconds between predictions")
    ap.add_argument("--budget", type=float, default=10.0, help="wall seconds per forecast")
    ap.add_argument(
        "--window", type=float, default=0.0, help="repeat the recent past this long (0: off)"
    )
    ap.add_argument(
        "--oracle", action="store_true", help="diagnostic: also forecast with the real future"
    )
    ap.add_argument(
        "--samples", type=int, default=DEFAULT_SAMPLES, help="sampled futures (0: none)"
    )
    ap.add_argument(
        "--model-window", type=float, default=DEFAULT_WINDOW, help="arrivals learned from (s)"
    )
    ap.add_argument(
        "--arrivals-for", type=float, default=DEFAULT_ARRIVALS_FOR, help="future arrivals (s)"
    )
    ap.add_argument("--tile", action="store_true", help="repeat the window (one future)")
    ap.add_argument(
        "--draws",
        type=int,
        default=0,
        help="diagnostic: forecasts told this many futures drawn from the scenario's generator",
    )
    ap.add_argument("--only", default="", help="one scenario name")
    ap.add_argument("--runtimes", default="declared,learned", help="which run-time sources")
    ap.add_argument("--results", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args()
    names = [args.only] if args.only else list(SCENARIOS)
    out: dict[str, Any] = {"benchmark": "prediction", "min_wait_s": MIN_WAIT, "scenarios": []}
    for name in names:
        for source in args.runtimes.split(","):
            declared = source.strip() == "declared"
            cfg = Settings(
                args.every,
                args.budget,
                args.window,
                args.oracle,
                args.draws,
                args.samples,
                args.model_window,
                args.arrivals_for,
                args.tile,
            )
            entry = measure(name, declared, cfg)
            print(json.dumps(entry), file=sys.stderr, flush=True)
            out["scenarios"].append(entry)
    text = json.dumps(out, indent=2)
    print(text)
    if args.results is not None:
        args.results.write_text(text + "\n")


if __name__ == "__main__":
    main()
