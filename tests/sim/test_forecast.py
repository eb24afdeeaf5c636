"""Forecasts: the engine run forward from a snapshot predicts what a replay does."""

from __future__ import annotations

import pickle

import numpy as np

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import Engine
from fairgpu.engine.gang import Reservation
from fairgpu.engine.policies import policy
from fairgpu.model.order import pod_identity
from fairgpu.model.pod import PodInfo
from fairgpu.sim.forecast import (
    Forecast,
    carry_state,
    forecast,
    predicted_against_actual,
    snapshot_cluster,
)
from fairgpu.sim.learner import RuntimeLearner, Runtimes
from fairgpu.sim.simulator import Simulation, SimulationResult
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.sim.workloads.synthetic import SyntheticSpec, generate
from tests.builders import cluster, node_info, pod_info


def _engine(workload: Workload | None = None) -> Engine:
    engine = Engine(seed=0)
    if workload is not None:
        engine.register_pod_groups(workload.pod_groups)
    return engine


def _declared(engine: Engine, learner: RuntimeLearner | None = None) -> Runtimes:
    return Runtimes(lambda p: engine.tenant(p).queue, learner)


def _snapshot_at(workload: Workload, at: float) -> tuple[ClusterState, Engine, list[PodInfo]]:
    """The replay of ``workload`` up to ``at`` as a forecast receives it: a snapshot of the
    cluster, a fresh engine given the replay's state, and the pending pods in order."""
    upto = Simulation(workload, _engine(workload), until=at)
    upto.run()
    pending = sorted(upto.pending.values(), key=pod_identity)
    assert len(pending) >= 5, "the instant should have a backlog"
    engine = _engine(workload)
    state = snapshot_cluster(upto.cluster)
    engine.state = carry_state(upto.engine.state, state)
    return state, engine, pending


def _differ(
    got: Forecast, pending: list[PodInfo], truth: SimulationResult, at: float
) -> dict[str, tuple[float | None, float | None]]:
    """The pending pods whose predicted start is not their first real start after ``at``."""
    first: dict[str, float] = {}
    for attempt in truth.runs:
        if attempt.start >= at:
            first[attempt.uid] = min(first.get(attempt.uid, attempt.start), attempt.start)
    differ = {p.key: (got.start(p.uid), first.get(p.uid)) for p in pending}
    return {k: v for k, v in differ.items() if v[0] != v[1]}


def test_running_pod_ends_then_pending_pods_start_in_order() -> None:
    running = pod_info("run", gpus=8, duration=100.0)
    state = cluster(node_info("n0", gpus=8), placed=[(running, "n0", 0.0)])
    a = pod_info("a", gpus=8, duration=50.0, created=1.0)
    b = pod_info("b", gpus=8, duration=30.0, created=2.0)
    engine = _engine()
    got = forecast(state, engine, [a, b], 10.0, _declared(engine))
    assert got.complete and not got.out_of_budget
    assert got.start(a.uid) == 100.0
    assert got.start(b.uid) == 150.0
    assert got.drain([a.uid, b.uid]) == 150.0


def test_a_pod_behind_one_with_no_known_run_time_gets_no_start() -> None:
    state = cluster(node_info("n0", gpus=8), placed=[(pod_info("run", gpus=8), "n0", 0.0)])
    waiting = pod_info("w", gpus=8, duration=30.0)
    fits = pod_info("small", gpus=0, duration=5.0)  # needs no GPU: starts at once
    engine = _engine()
    got = forecast(state, engine, [waiting, fits], 10.0, _declared(engine))
    assert got.start(waiting.uid) is None and not got.complete
    assert got.start(fits.uid) == 10.0
    assert got.drain([waiting.uid, fits.uid]) is None


def test_learned_run_times_predict_the_running_pods_end() -> None:
    learner = RuntimeLearner()
    for seconds in (100.0, 200.0, 300.0):
        learner.observe("default", seconds)
    running = pod_info("run", gpus=8)  # declares nothing; has run 150 s at now=150
    state = cluster(node_info("n0", gpus=8), placed=[(running, "n0", 0.0)])
    waiting = pod_info("w", gpus=8)
    engine = _engine()
    got = forecast(state, engine, [waiting], 150.0, _declared(engine, learner))
    # Of the runs longer than 150 s (200, 300) the mean is 250: 100 s left.
    assert got.start(waiting.uid) == 250.0


def test_learner_falls_back_to_every_queue_and_says_unknown_without_samples() -> None:
    learner = RuntimeLearner(min_samples=2)
    assert learner.mean("q") is None and learner.remaining("q", 10.0) is None
    learner.observe("other", 60.0)
    learner.observe("other", 120.0)
    assert learner.mean("q") == 90.0  # pooled
    learner.observe("q", 10.0)
    learner.observe("q", 30.0)
    assert learner.mean("q") == 20.0  # its own, once it has enough
    assert learner.remaining("q", 20.0) == 10.0
    assert learner.remaining("q", 1000.0) == 2.0  # outlived every sample: ends soon


def test_declared_run_time_wins_and_can_be_ignored() -> None:
    learner = RuntimeLearner(min_samples=1)
    learner.observe("default", 500.0)
    pod = pod_info("p", gpus=1, duration=60.0)
    engine = _engine()
    assert _declared(engine, learner).duration(pod) == 60.0
    ignoring = Runtimes(lambda p: engine.tenant(p).queue, learner, use_declared=False)
    assert ignoring.duration(pod) == 500.0
    # A running pod past its declared time ends now at the earliest, never in the past.
    assert _declared(engine).end(pod, started=0.0, now=100.0) == 100.0


def test_forecast_from_a_snapshot_is_the_replay_without_later_arrivals() -> None:
    """At instant T, the forecast must predict exactly what the simulator does when nothing
    arrives after T: same engine, same state, same decisions."""
    spec = SyntheticSpec(jobs=80, mean_interarrival_s=20.0)
    at = 900.0
    # The replay up to T, and the state a snapshot of it holds.
    state, engine, pending = _snapshot_at(generate(spec, seed=5), at)
    got = forecast(state, engine, pending, at, _declared(engine))
    assert got.complete
    # The same workload with nothing arriving after T, replayed to the end.
    cut = generate(spec, seed=5)
    cut.arrivals = [a for a in cut.arrivals if a.arrival <= at]
    truth = Simulation(cut, _engine(cut)).run()
    differ = _differ(got, pending, truth, at)
    assert not differ, differ


def test_budget_stops_the_forecast() -> None:
    workload = generate(SyntheticSpec(jobs=80, mean_interarrival_s=20.0), seed=5)
    state, engine, pending = _snapshot_at(workload, 900.0)
    got = forecast(state, engine, pending, 900.0, _declared(engine), budget_s=0.0)
    assert got.out_of_budget and not got.complete
    assert len(got.starts) < len(pending)


def test_report_sample_lists_pending_pods_with_predicted_and_actual_start() -> None:
    spec = SyntheticSpec(jobs=80, mean_interarrival_s=20.0)
    workload = generate(spec, seed=5)
    result = Simulation(workload, _engine(workload)).run()
    sample = predicted_against_actual(generate(spec, seed=5), lambda: _engine(workload), result)
    assert sample is not None and sample.rows and sample.pending >= len(sample.rows)
    assert all(r.arrival <= sample.at for r in sample.rows)
    assert all(r.actual is not None and r.actual >= sample.at for r in sample.rows)
    assert any(r.predicted is not None for r in sample.rows)


def test_a_running_pod_preempted_in_the_forecast_runs_its_full_time_again() -> None:
    low = pod_info("low", gpus=8, duration=1000.0, priority=0)
    state = cluster(node_info("n0", gpus=8), placed=[(low, "n0", 0.0)])
    high = pod_info("high", gpus=8, duration=100.0, priority=1000, created=5.0)
    after = pod_info("after", gpus=8, duration=50.0, priority=0, created=6.0)
    engine = _engine()
    got = forecast(state, engine, [high, after], 10.0, _declared(engine))
    # high preempts low at once; low starts over when high ends (110) and runs 1000 s more.
    assert got.start(high.uid) == 10.0
    assert got.start(after.uid) == 1110.0


def test_a_forecast_told_the_real_future_reproduces_the_run() -> None:
    """The engine's learning travels with its state: a forecast from a snapshot of the
    built-in demo at T, told the arrivals that really came after T, predicts every pending
    pod's real start. The fragmentation score weighs nodes by the typical pod shapes the
    scheduler learned from every pod it saw; an engine that starts afresh learns them from
    the snapshot alone, and at this instant places a pod on another node, from which the
    runs part (three members of a gang then start 3 h early)."""
    at = 21_600.0
    whole = generate(SyntheticSpec(), seed=0)
    truth = Simulation(whole, _engine(whole)).run()
    state, engine, pending = _snapshot_at(generate(SyntheticSpec(), seed=0), at)
    runtimes = _declared(engine)
    later = [
        PodArrival(a.pod, a.arrival, runtimes.duration(a.pod))
        for a in generate(SyntheticSpec(), seed=0).arrivals
        if a.arrival > at
    ]
    got = forecast(state, engine, pending, at, runtimes, budget_s=60.0, future=later)
    differ = _differ(got, pending, truth, at)
    assert not differ, differ


def test_carried_learning_is_a_copy_and_only_for_the_same_policy() -> None:
    workload = generate(SyntheticSpec(jobs=60, mean_interarrival_s=20.0), seed=3)
    source = Simulation(workload, _engine(workload), until=1200.0)
    source.run()
    learned = dict(source.engine.state.learned)["FragmentationAware"]
    assert isinstance(learned, tuple) and learned[0].seen, "the scheduler learned shapes"
    state = snapshot_cluster(source.cluster)
    same = _engine(workload)
    same.state = carry_state(source.engine.state, state)
    mine = dict(same.state.learned)["FragmentationAware"]
    assert isinstance(mine, tuple)
    assert mine[0] is not learned[0] and mine[0].seen == learned[0].seen
    assert same.scheduler.learned() == same.state.learned  # the plugins use the copy
    other = Engine(policy("best-fit"), seed=0)
    other.state = carry_state(source.engine.state, state)  # other plugins: nothing adopted
    assert [n for n, _ in other.state.learned] == [p.name for p in other.scheduler.plugins]
    assert all(x is None for _, x in other.state.learned)


def test_learning_survives_the_trip_to_the_forecasting_process() -> None:
    """Live, the scheduler pickles its engine's state for the forecasting process, which
    gives it to a fresh engine: the typical shapes and the packing plan arrive, the plan
    tier without the old cluster's device contents."""
    workload = generate(SyntheticSpec(jobs=60, mean_interarrival_s=20.0), seed=3)
    source = Simulation(workload, _engine(workload), until=1200.0)
    source.run()
    shipped = pickle.loads(pickle.dumps(source.engine.state))
    state = snapshot_cluster(source.cluster)
    engine = _engine(workload)
    engine.state = carry_state(shipped, state)
    theirs = dict(source.engine.state.learned)["FragmentationAware"]
    mine = dict(engine.scheduler.learned())["FragmentationAware"]
    assert isinstance(theirs, tuple) and isinstance(mine, tuple)
    assert mine[0].seen == theirs[0].seen
    assert mine[0].typical.to_args() == theirs[0].typical.to_args()
    assert theirs[1]._plan is not None, "the workload's shares were planned"
    assert mine[1]._plan is not None and mine[1]._plan.patterns == theirs[1]._plan.patterns
    assert mine[1].contents.contents == [()]  # only the idle device's code


def test_a_carried_reservation_keeps_each_node_with_its_members() -> None:
    """A reservation's nodes are found again by name in the snapshot; the members each is
    to hold (``slots``, beside ``nodes``) stay with their node when one is gone."""
    source = _engine()
    source.state.reservations["q/job"] = Reservation(
        "q/job",
        "q",
        np.array([0, 1]),
        0.0,
        node_names=["n1", "n2"],
        member=pod_info("m", "q", gpus=4),
        slots=np.array([2, 1]),
    )
    snapshot = cluster(node_info("n0", gpus=8), node_info("n2", gpus=8))
    res = carry_state(source.state, snapshot).reservations["q/job"]
    assert res.nodes.tolist() == [1] and res.slots is not None and res.slots.tolist() == [1]
