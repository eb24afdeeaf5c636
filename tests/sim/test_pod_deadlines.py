"""A pod's own ``activeDeadlineSeconds``: the kubelet fails it that long after it started, so
it runs at most that long -- a bound the engine and the forecasts use as a declared run time,
and a failure the simulator replays (a Job counts it and replaces the pod)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from fairgpu.cli import app
from fairgpu.engine.engine import Engine
from fairgpu.engine.gang import declared_runtime
from fairgpu.model.pod import ANN_DURATION
from fairgpu.sim.forecast import forecast
from fairgpu.sim.learner import Runtimes
from fairgpu.sim.workloads.kube_yaml import load_kube_yaml
from tests.builders import cluster, k8s_pod, node_info, pod_info
from tests.sim.helpers import simulated_run
from tests.sim.test_kube_jobs import IGNORE, NODE, job, load, simulate
from tests.sim.test_questions_in_run import pod

runner = CliRunner()


def bare(name: str, deadline: int | None, duration: float, arrival: float = 0) -> str:
    """A bare pod of ``team-a`` asking all 8 GPUs of ``NODE``, with ``deadline`` as its
    ``activeDeadlineSeconds`` (None: none)."""
    text = pod(name, arrival, duration)
    if deadline is None:
        return text
    return text.replace(
        "  schedulerName: fairgpu", f"  schedulerName: fairgpu\n  activeDeadlineSeconds: {deadline}"
    )


def test_the_deadline_is_read_and_a_bad_one_refused(tmp_path: Path) -> None:
    made = load(tmp_path, NODE + bare("p", 600, 1000)).arrivals[0].pod
    assert made.active_deadline == 600.0
    (tmp_path / "bad.yaml").write_text(NODE + bare("p", 0, 1000))
    bad = load_kube_yaml([tmp_path / "bad.yaml"]).arrivals[0].pod
    assert bad.error is not None and "spec.activeDeadlineSeconds" in bad.error


def test_a_declared_run_time_is_never_past_the_deadline() -> None:
    plain = pod_info("p", gpus=1, duration=1000.0)
    assert declared_runtime(plain) == 1000.0
    cut = pod_info("p", gpus=1, duration=1000.0)
    cut.active_deadline = 600.0
    assert declared_runtime(cut) == 600.0
    bound_only = pod_info("q", gpus=1)
    bound_only.active_deadline = 600.0
    assert ANN_DURATION not in bound_only.annotations and declared_runtime(bound_only) == 600.0


def test_a_pod_past_its_deadline_fails_and_frees_its_gpus(tmp_path: Path) -> None:
    """``long`` would run 1 000 s but fails at its 600 s deadline; ``next`` starts then."""
    result = simulate(load(tmp_path, NODE + bare("long", 600, 1000) + bare("next", None, 60)))
    runs = {(r.name, r.outcome): (r.start, r.end) for r in result.runs}
    assert runs[("long", "deadline-exceeded")] == (0.0, 600.0)
    assert runs[("next", "completed")] == (600.0, 660.0)
    failed = next(r for r in result.records if r.pod.name == "long")
    assert failed.failed_at == 600.0 and "activeDeadlineSeconds (600 s)" in failed.reason
    assert (failed.start, failed.node) == (0.0, "gpu-0")  # it did run


def test_a_pod_that_ends_in_time_completes(tmp_path: Path) -> None:
    result = simulate(load(tmp_path, NODE + bare("quick", 600, 300)))
    assert [(r.name, r.outcome, r.end) for r in result.runs] == [("quick", "completed", 300.0)]


def test_a_job_counts_the_failure_and_replaces_the_pod_until_its_backoff_limit(
    tmp_path: Path,
) -> None:
    """One completion of a 1 000 s pod with a 600 s deadline, ``backoffLimit: 1``: the pod
    fails at 600 s, its replacement at 1 200 s -- two failures, more than the limit: the Job
    fails. A pod failure policy that ignores disruptions does not apply: this is no
    disruption."""
    text = job("train", "backoffLimit: 1", gpus=8, duration=1000)
    text = text.replace("  backoffLimit: 1\n", f"  backoffLimit: 1{IGNORE}\n")
    text = text.replace(
        "restartPolicy: Never", "restartPolicy: Never\n      activeDeadlineSeconds: 600"
    )
    result = simulate(load(tmp_path, NODE + text))
    outcomes = [(r.outcome, r.start, r.end) for r in result.runs]
    assert outcomes == [("deadline-exceeded", 0.0, 600.0), ("deadline-exceeded", 600.0, 1200.0)]
    when, why = result.failed_jobs["team-a/train"]
    assert when == 1200.0 and "2 pod(s) failed, more than its backoffLimit 1" in why


def test_forecasts_end_a_running_pod_at_its_deadline() -> None:
    """``long`` declares 3 600 s but its deadline is 600 s after its start at 0: ``next``
    is predicted at 600 s, not 3 600 s."""
    long = k8s_pod("long", "a", gpus="8", cpu="1", duration=3600.0)
    long.active_deadline = 600.0
    state = cluster(node_info("n0", gpus=8), placed=[(long, "n0", 0.0)])
    waiting = pod_info("next", "a", gpus=8, duration=60.0, created=100.0)
    engine = Engine(seed=0)
    runtimes = Runtimes(lambda p: engine.tenant(p).queue, None)
    got = forecast(state, engine, [waiting], 100.0, runtimes)
    assert got.start(waiting.uid) == 600.0


def test_the_summary_counts_the_failed_pod(tmp_path: Path) -> None:
    workload = tmp_path / "w.yaml"
    workload.write_text(NODE + bare("long", 600, 1000) + bare("next", None, 60))
    out = tmp_path / "out"
    said = CliRunner().invoke(app, ["simulate", "--workload", str(workload), "--out", str(out)])
    assert said.exit_code == 0, said.output
    assert any(
        x.split() == ["│", "pods", "failed", "│", "1", "│"] for x in said.output.splitlines()
    )


def test_explain_says_when_the_deadline_ends_a_running_pod(tmp_path: Path) -> None:
    out = simulated_run(
        tmp_path, NODE + bare("long", 600, 1000) + bare("next", None, 60, arrival=10)
    )
    said = runner.invoke(app, ["explain", "team-a/long", "--run", str(out), "--at", "100"])
    assert (
        "is bound to node gpu-0; phase Running. The kubelet fails it at t=600 s if it still "
        "runs then (activeDeadlineSeconds)."
    ) in said.output, said.output
    waiting = runner.invoke(app, ["explain", "team-a/next", "--run", str(out), "--at", "100"])
    assert "Predicted start: t=600 s (in 8m)" in waiting.output, waiting.output
