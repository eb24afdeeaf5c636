"""A Job's pods its controller has yet to create, in forecasts (fairgpu.sim.job_backlog)."""

from __future__ import annotations

from fairgpu.engine.engine import Engine
from fairgpu.model.pod import PodInfo
from fairgpu.sim.forecast import forecast
from fairgpu.sim.job_backlog import JobCounts, future_pod, job_ahead
from fairgpu.sim.learner import Runtimes
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workload import BatchJob, PodArrival, Workload
from tests.builders import cluster, node_info, pod_info

JOB_UID = "job-uid-1"


def _job_pod(name: str, created: float, priority: int = 10) -> PodInfo:
    return pod_info(
        name, gpus=1, duration=300.0, created=created, priority=priority,
        owner=JOB_UID, owner_kind="Job",
    )  # fmt: skip


def _counts(completions: int | None = 3, parallelism: int = 1, succeeded: int = 0, **kw: object):
    return JobCounts("default/train", JOB_UID, completions, parallelism, succeeded, **kw)  # type: ignore[arg-type]


def _300(_pod: PodInfo) -> float:
    return 300.0


def _runtimes(engine: Engine) -> Runtimes:
    return Runtimes(lambda p: engine.tenant(p).queue, None)


def test_a_job_runs_its_completions_one_after_another_in_the_forecast() -> None:
    """3 completions of 300 s, one at a time, the first started at 0: the Job ends at 900 s,
    and a lower-priority pod of the same user waits behind all of them -- not only behind
    the pod that exists now."""
    running = _job_pod("train-0", 0.0)
    state = cluster(node_info("n0", gpus=1), placed=[(running, "n0", 0.0)])
    low = pod_info("eval", gpus=1, duration=60.0, created=50.0, priority=0)
    engine = Engine(seed=0)
    ahead = job_ahead(_counts(), [running], None, 100.0, _300)
    assert ahead is not None and len(ahead.future) == 2 and ahead.job.first == 1
    got = forecast(state, engine, [low], 100.0, _runtimes(engine), jobs=[ahead], job_ends=True)
    assert got.job_ends == {"default/train": 900.0}
    assert got.start(low.uid) == 900.0

    blind = Engine(seed=0)
    state = cluster(node_info("n0", gpus=1), placed=[(_job_pod("train-0", 0.0), "n0", 0.0)])
    without = forecast(state, blind, [low], 100.0, _runtimes(blind))
    assert without.start(low.uid) == 300.0 and without.job_ends == {}


def test_missing_pods_are_created_at_once_up_to_parallelism() -> None:
    """parallelism 2, 5 completions, 1 succeeded, 1 pod in the cluster: the controller makes
    one more now; the other two come one per success."""
    pod = _job_pod("train-1", 10.0)
    ahead = job_ahead(_counts(5, 2, succeeded=1), [pod], None, 100.0, _300)
    assert ahead is not None
    assert len(ahead.future) == 3 and ahead.job.first == 2
    assert ahead.existing == (pod.uid,)
    assert [a.arrival for a in ahead.future] == [100.0] * 3


def test_future_pods_copy_the_newest_pod_and_drop_its_node() -> None:
    old = _job_pod("train-0", 1.0)
    new = _job_pod("train-1", 5.0)
    new.node_name = "n0"
    new.static_key()
    ahead = job_ahead(_counts(4, 2), [old, new], None, 100.0, _300)
    assert ahead is not None
    first = ahead.future[0].pod
    assert first.name == "train-next-0" and first.uid == f"{JOB_UID}/next-0"
    assert first.node_name == "" and first.static_key()[0] == ""
    assert first.created == 100.0 and first.owner == JOB_UID and first.priority == 10
    first.labels["x"] = "y"
    assert "x" not in new.labels  # a copy, not the same dict


def test_the_template_stands_in_when_no_pod_exists_and_nothing_without_one() -> None:
    template = _job_pod("template", 0.0)
    ahead = job_ahead(_counts(2, 1), [], template, 100.0, _300)
    assert ahead is not None and len(ahead.future) == 2 and ahead.job.first == 1
    assert job_ahead(_counts(2, 1), [], None, 100.0, _300) is None


def test_jobs_that_create_nothing_more_are_left_out() -> None:
    pod = _job_pod("train-0", 0.0)
    assert job_ahead(_counts(done=True), [pod], None, 0.0, _300) is None
    assert job_ahead(_counts(None, 2), [pod], None, 0.0, _300) is None  # a work queue
    done = job_ahead(_counts(3, 1, succeeded=2), [pod], None, 0.0, _300)
    assert done is not None and done.future == ()


def test_the_failures_counted_so_far_leave_less_of_the_backoff_limit() -> None:
    pod = _job_pod("train-0", 0.0)
    ahead = job_ahead(_counts(backoff_limit=2, failed=2), [pod], None, 0.0, _300)
    assert ahead is not None and ahead.job.backoff_limit == 0


def test_a_failed_job_ends_the_forecast_of_its_end() -> None:
    """A Job that fails in the forecast has no end, and the forecast does not wait for
    one: with FailJob on eviction and its pod preempted by a higher-priority pod."""
    running = _job_pod("train-0", 0.0, priority=0)
    state = cluster(node_info("n0", gpus=1), placed=[(running, "n0", 0.0)])
    urgent = pod_info("urgent", gpus=1, duration=60.0, created=50.0, priority=100)
    engine = Engine(seed=0)
    ahead = job_ahead(_counts(on_disruption="FailJob"), [running], None, 100.0, _300)
    assert ahead is not None
    got = forecast(state, engine, [urgent], 100.0, _runtimes(engine), jobs=[ahead], job_ends=True)
    assert got.start(urgent.uid) == 100.0
    assert got.job_ends == {} and got.complete


def test_a_simulated_runs_jobs_continue_from_its_controller() -> None:
    """Half-way through a replayed Job, the forecast from the run's own controller state
    predicts the end the run reaches."""
    pods = [_job_pod(f"train-{i}", 0.0) for i in range(4)]
    job = BatchJob("default/train", 1, tuple(p.uid for p in pods), uid=JOB_UID)
    arrivals = [PodArrival(p, 0.0, 300.0) for p in pods]
    wl = Workload("w", [node_info("n0", gpus=1)], arrivals, jobs=[job])
    truth = Simulation(wl, Engine(seed=0)).run()
    assert max(r.end or 0 for r in truth.records) == 1200.0

    upto = Simulation(wl, Engine(seed=0), until=450.0)
    upto.run()
    ahead = upto.jobs.ahead(set(upto.cluster.pods) | set(upto.pending), 450.0)
    assert [a.succeeded for a in ahead] == [1] and len(ahead[0].future) == 2
    engine = Engine(seed=0)
    got = forecast(upto.cluster, engine, [], 450.0, _runtimes(engine), jobs=ahead, job_ends=True)
    assert got.job_ends == {"default/train": 1200.0}


def test_future_pod_keeps_the_request() -> None:
    model = _job_pod("train-0", 0.0)
    pod = future_pod(model, "x", "u", 7.0)
    assert pod.gpu == model.gpu and pod.requests == model.requests and pod.created == 7.0


def test_a_job_created_later_in_the_run_is_not_ahead_yet() -> None:
    pods = [_job_pod(f"later-{i}", 500.0) for i in range(2)]
    job = BatchJob("default/later", 1, tuple(p.uid for p in pods), uid="later-uid")
    arrivals = [PodArrival(p, 500.0, 300.0) for p in pods]
    wl = Workload("w", [node_info("n0", gpus=1)], arrivals, jobs=[job])
    upto = Simulation(wl, Engine(seed=0), until=100.0)
    upto.run()
    assert upto.jobs.ahead(set(upto.cluster.pods) | set(upto.pending), 100.0) == []
    assert len(upto.jobs.ahead(set(), 500.0)) == 1


def test_a_jobs_deadline_counts_from_its_start_and_one_already_past_is_now() -> None:
    pod = _job_pod("train-0", 0.0)
    ahead = job_ahead(_counts(active_deadline=1000.0, started=50.0), [pod], None, 100.0, _300)
    assert ahead is not None
    assert (ahead.job.active_deadline, ahead.job.created) == (1000.0, 50.0)
    past = job_ahead(_counts(active_deadline=60.0, started=0.0), [pod], None, 100.0, _300)
    assert past is not None and past.job.created == 40.0  # its deadline: now, not before
    unset = job_ahead(_counts(active_deadline=60.0), [pod], None, 100.0, _300)
    assert unset is not None and unset.job.created == 100.0
    assert job_ahead(_counts(), [pod], None, 100.0, _300).job.created is None  # type: ignore[union-attr]


def test_a_job_past_its_deadline_is_predicted_to_fail_then() -> None:
    """3 completions of 300 s, one at a time, started at 0 with activeDeadlineSeconds 700:
    the third pod still runs at 700 s, so the Job is predicted to fail then
    (DeadlineExceeded, 2 completions by then) and has no end; ``eval`` behind it starts
    when the controller deletes that pod, not at 900 s."""
    running = _job_pod("train-0", 0.0)
    state = cluster(node_info("n0", gpus=1), placed=[(running, "n0", 0.0)])
    low = pod_info("eval", gpus=1, duration=60.0, created=50.0, priority=0)
    engine = Engine(seed=0)
    counts = _counts(active_deadline=700.0, started=0.0)
    ahead = job_ahead(counts, [running], None, 100.0, _300)
    assert ahead is not None
    got = forecast(state, engine, [low], 100.0, _runtimes(engine), jobs=[ahead], job_ends=True)
    assert got.job_ends == {}
    failure = got.job_failures["default/train"]
    assert (failure.at, failure.reason, failure.succeeded) == (700.0, "DeadlineExceeded", 2)
    assert got.start(low.uid) == 700.0 and got.job_drains["default/train"] == 700.0


def test_a_pending_pod_of_a_job_failing_first_is_predicted_deleted_not_unknown() -> None:
    """parallelism 2 on one GPU: train-1 waits behind train-0 (300 s); the deadline at 200 s
    comes first, so train-1 is never started: the forecast says it is deleted, and is
    complete without running to its horizon."""
    running = _job_pod("train-0", 0.0)
    waiting = _job_pod("train-1", 0.0)
    state = cluster(node_info("n0", gpus=1), placed=[(running, "n0", 0.0)])
    engine = Engine(seed=0)
    ahead = job_ahead(
        _counts(2, 2, active_deadline=200.0, started=0.0), [running, waiting], None, 100.0, _300
    )
    assert ahead is not None and ahead.future == ()
    got = forecast(state, engine, [waiting], 100.0, _runtimes(engine), jobs=[ahead], job_ends=True)
    assert got.start(waiting.uid) is None and got.complete
    assert "activeDeadlineSeconds" in got.deleted[waiting.uid]
    assert got.simulated_to == 200.0


def test_a_runs_job_keeps_its_deadline_in_forecasts_from_the_run() -> None:
    """A replayed Job of four 300 s pods one at a time, activeDeadlineSeconds 1000: the run
    fails it at 1 000 s; the forecast from its controller at 450 s says so too."""
    pods = [_job_pod(f"train-{i}", 0.0) for i in range(4)]
    job = BatchJob("default/train", 1, tuple(p.uid for p in pods), active_deadline=1000.0)
    arrivals = [PodArrival(p, 0.0, 300.0) for p in pods]
    wl = Workload("w", [node_info("n0", gpus=1)], arrivals, jobs=[job])
    truth = Simulation(wl, Engine(seed=0)).run()
    assert truth.failed_jobs["default/train"][0] == 1000.0

    upto = Simulation(wl, Engine(seed=0), until=450.0)
    upto.run()
    (ahead,) = upto.jobs.ahead(set(upto.cluster.pods) | set(upto.pending), 450.0)
    assert (ahead.job.active_deadline, ahead.job.created) == (1000.0, 0.0)
    engine = Engine(seed=0)
    got = forecast(upto.cluster, engine, [], 450.0, _runtimes(engine), jobs=[ahead], job_ends=True)
    assert got.job_failures["default/train"].at == 1000.0 and got.job_ends == {}
