"""Future arrivals in a forecast: learned from what arrived before the instant, nothing after."""

from __future__ import annotations

import numpy as np

from fairgpu.engine.engine import Engine
from fairgpu.model.pod import PodInfo
from fairgpu.sim.arrivals import ArrivalHistory, ArrivalModel
from fairgpu.sim.forecast import forecast, forecast_ensemble
from fairgpu.sim.learner import Runtimes
from fairgpu.tenancy.resolve import LABEL_POD_GROUP
from tests.builders import cluster, node_info, pod_info


def _group_of(engine: Engine):
    def group(pod: PodInfo) -> str | None:
        ref = engine.pod_group(pod)
        return None if ref is None else ref.key

    return group


def _past() -> list[tuple[PodInfo, float]]:
    """Six jobs in the hour before t=3600: four single pods and a gang of two."""
    singles = [(pod_info(f"s{i}", gpus=1, duration=60.0 * (i + 1)), 600.0 * i) for i in range(4)]
    gang = [
        (pod_info(f"g-{m}", gpus=8, group="g", min_member=2, duration=500.0), 3000.0 + m)
        for m in range(2)
    ]
    return singles + gang


def test_model_learns_jobs_and_rate_from_the_window_before_the_instant() -> None:
    engine = Engine(seed=0)
    model = ArrivalModel.learn(_past(), 3600.0, _group_of(engine), window=3600.0)
    assert len(model.jobs) == 5  # the gang is one job
    assert sorted(len(j) for j in model.jobs) == [1, 1, 1, 1, 2]
    assert model.rate == 5 / 3600.0
    # Out of the window: only the jobs of the last 1000 s count (the span is the window).
    recent = ArrivalModel.learn(_past(), 3600.0, _group_of(engine), window=1000.0)
    assert len(recent.jobs) == 1 and recent.span == 1000.0


def test_model_ignores_arrivals_at_or_after_the_instant() -> None:
    engine = Engine(seed=0)
    later = [(pod_info("late", gpus=4, duration=9.0), 3600.0), (pod_info("x"), 5000.0)]
    past = _past()
    known = ArrivalModel.learn(past, 3600.0, _group_of(engine))
    told = ArrivalModel.learn(past + later, 3600.0, _group_of(engine))
    assert told == known
    a = known.sample(3600.0, 20000.0, np.random.default_rng(7), "t")
    b = told.sample(3600.0, 20000.0, np.random.default_rng(7), "t")
    assert [(x.pod.uid, x.arrival) for x in a] == [(x.pod.uid, x.arrival) for x in b]


def test_samples_are_reproducible_copies_with_their_own_names_and_groups() -> None:
    engine = Engine(seed=0)
    model = ArrivalModel.learn(_past(), 3600.0, _group_of(engine))
    one = model.sample(3600.0, 3600.0 * 50, np.random.default_rng(1), "t")
    again = model.sample(3600.0, 3600.0 * 50, np.random.default_rng(1), "t")
    assert [(x.pod.uid, x.arrival) for x in one] == [(x.pod.uid, x.arrival) for x in again]
    assert all(3600.0 <= x.arrival < 3600.0 * 50 + 2 for x in one)
    assert all(x.pod.created == x.arrival and x.duration is None for x in one)
    uids = [x.pod.uid for x in one]
    assert len(set(uids)) == len(uids)
    originals = {p.uid for p, _ in _past()}
    assert not originals & set(uids)
    # About rate x time jobs (Poisson: 5 per hour for 49 hours).
    jobs = {x.pod.uid.rpartition("~")[2] for x in one}
    assert 180 <= len(jobs) <= 310
    # A gang arrives whole, under a group of its own (not the observed gang's).
    members = [x for x in one if x.pod.labels.get(LABEL_POD_GROUP, "").startswith("g~")]
    assert members and len(members) % 2 == 0
    groups = {_group_of(engine)(x.pod) for x in members}
    assert "default/g" not in groups and len(groups) == len(members) // 2


def test_history_keeps_first_sighting_and_prunes_the_old() -> None:
    history = ArrivalHistory(window=100.0)
    pod = pod_info("a")
    history.observe(pod, 10.0)
    history.observe(pod, 50.0)  # seen again (e.g. next snapshot): the first time stays
    history.observe(pod_info("b"), 150.0)
    assert [t for _, t in history.pairs()] == [10.0, 150.0]
    history.prune(200.0)
    assert [p.name for p, _ in history.pairs()] == ["b"]


def _scene():
    """One 8-GPU node busy until t=1000; a low-priority 8-GPU pod waits."""
    running = pod_info("run", gpus=8, duration=1000.0)
    waiting = pod_info("w", gpus=8, duration=50.0, created=1.0)

    def make():
        return cluster(node_info("n0", gpus=8), placed=[(running, "n0", 0.0)]), Engine(seed=0)

    return make, waiting


def test_ensemble_without_a_model_is_the_plain_forecast() -> None:
    make, waiting = _scene()
    c, e = make()
    plain = forecast(c, e, [waiting], 10.0, Runtimes(lambda p: e.tenant(p).queue))
    ens = forecast_ensemble(make, [waiting], 10.0, Runtimes(lambda p: e.tenant(p).queue), None)
    assert plain.start(waiting.uid) == ens.start(waiting.uid) == 1000.0


def test_future_high_priority_work_delays_the_waiting_pod() -> None:
    make, waiting = _scene()
    engine = Engine(seed=0)
    runtimes = Runtimes(lambda p: engine.tenant(p).queue)
    # Before the instant, urgent 8-GPU jobs kept arriving every 20 s.
    past = [
        (pod_info(f"u{i}", gpus=8, priority=1000, duration=30.0), 10.0 - 20.0 * i)
        for i in range(1, 40)
    ]
    model = ArrivalModel.learn(past, 10.0, _group_of(engine))
    got = forecast_ensemble(
        make, [waiting], 10.0, runtimes, model, samples=3, seed=4, horizon_s=2000.0
    )
    start = got.start(waiting.uid)
    # Urgent work arriving after the instant goes first: the plain forecast's 1000 s is too
    # early; with the model the pod may even wait past the horizon (no start).
    assert start is None or start > 1000.0
    again = forecast_ensemble(
        make, [waiting], 10.0, runtimes, model, samples=3, seed=4, horizon_s=2000.0
    )
    assert again.start(waiting.uid) == start  # reproducible from the seed


def test_tile_repeats_the_window_after_the_instant() -> None:
    engine = Engine(seed=0)
    model = ArrivalModel.learn(_past(), 3600.0, _group_of(engine), window=3600.0)
    got = model.tile(3600.0, 3600.0 * 3, "t")
    # Each observed arrival again one and two windows later (the gang's members together).
    want = sorted([t + 3600.0 for _, t in _past()] + [t + 7200.0 for _, t in _past()])
    assert [a.arrival for a in got] == want
    assert model.tile(3600.0, 3600.0 * 3, "t")[0].pod.uid == got[0].pod.uid
    assert len({a.pod.uid for a in got}) == len(got)
    # Only the part asked for: in [5000, 6000) the first repeat of s3 (1800 + 3600).
    part = model.tile(5000.0, 6000.0, "t")
    assert [(a.pod.name.split("~")[0], a.arrival) for a in part] == [("s3", 5400.0)]


def test_live_forecaster_records_pods_by_creation_time_across_rounds() -> None:
    """The forecasting process keeps what it saw in earlier snapshots: a pod gone since (it
    completed) still counts as an arrival of the window."""
    from fairgpu.kube.cache import SchedulerCache
    from fairgpu.kube.forecaster import _arrival_model

    engine = Engine(seed=0)
    history = ArrivalHistory(window=3600.0)
    first = SchedulerCache("fairgpu")
    first.cluster = cluster(
        node_info("n0", gpus=8), placed=[(pod_info("done-soon", created=100.0), "n0", 120.0)]
    )
    first.pending = {"default/w": pod_info("w", created=900.0)}
    model = _arrival_model(history, first, engine, 1000.0)
    assert sorted(len(j) for j in model.jobs) == [1, 1]
    second = SchedulerCache("fairgpu")  # later: done-soon completed and is gone
    second.pending = {
        "default/w": pod_info("w", created=900.0),
        "default/n": pod_info("n", created=1500.0),
    }
    later = _arrival_model(history, second, engine, 2000.0)
    assert sorted(p.name for job in later.jobs for p, _ in job) == ["done-soon", "n", "w"]
    # A pod created after the snapshot's instant (clock skew) is not learned from.
    third = SchedulerCache("fairgpu")
    third.pending = {"default/f": pod_info("f", created=2500.0)}
    assert "f" not in {
        p.name for job in _arrival_model(history, third, engine, 2000.0).jobs for p, _ in job
    }


def test_step_batches_sampled_jobs_on_a_grid_after_the_instant() -> None:
    engine = Engine(seed=0)
    model = ArrivalModel.learn(_past(), 3600.0, _group_of(engine))
    free = model.sample(3600.0, 36000.0, np.random.default_rng(3), "t")
    batched = model.sample(3600.0, 36000.0, np.random.default_rng(3), "t", step=300.0)
    assert [a.pod.uid for a in free] == [a.pod.uid for a in batched]
    for a, b in zip(free, batched, strict=True):
        # Each job waits for the next grid point; a gang's members keep their offsets.
        assert a.arrival <= b.arrival < a.arrival + 300.0
        assert round((b.arrival - 3600.0) % 300.0, 3) in (0.0, 1.0, 300.0)
