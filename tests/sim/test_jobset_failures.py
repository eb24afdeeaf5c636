"""What a failed child Job does to its JobSet in a replay: the JobSet fails, restarts (every
Job created again, all pods starting over) or recreates the one Job, by its failure policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fairgpu.cli import app
from fairgpu.sim.jobset_controller import FAIL, RECREATE, RESTART, jobset_action
from fairgpu.sim.simulator import SimulationResult
from fairgpu.sim.workload import JobSetPolicy
from fairgpu.sim.workloads.kube_yaml import WorkloadError
from tests.sim.test_kube_jobs import NODE, job, load, priority_class, simulate

URGENT = priority_class("urgent", 1000)


def jobset(policy: str = "") -> str:
    """JobSet ``llm``: a leader Job (one 4-GPU pod, ``backoffLimit: 0``: one eviction fails
    it) and a workers Job (one 2-GPU pod, the default limit), 600 s each, on one 8-GPU node;
    ``policy``: its ``failurePolicy`` block."""
    return f"""\
---
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: llm
  namespace: team-a
  annotations: {{fairgpu.io/duration-seconds: "600"}}
spec:{policy}
  replicatedJobs:
    - name: leader
      template:
        spec:
          backoffLimit: 0
          template:
            spec:
              schedulerName: fairgpu
              restartPolicy: Never
              containers: [{{name: l, image: t, resources: {{limits: {{nvidia.com/gpu: "4"}}}}}}]
    - name: workers
      template:
        spec:
          template:
            spec:
              schedulerName: fairgpu
              restartPolicy: Never
              containers: [{{name: w, image: t, resources: {{limits: {{nvidia.com/gpu: "2"}}}}}}]
"""


def preempted(tmp_path: Path, policy: str = "") -> SimulationResult:
    """At 100 s an urgent 6-GPU pod (300 s) of the same queue needs the leader's GPUs: the
    leader goes, and -- its Job failing with it -- the whole JobSet (the scheduler evicts the
    worker too)."""
    urgent = job("urgent", "completions: 1", gpus=6, duration=300, arrival=100)
    urgent = urgent.replace(
        "restartPolicy: Never", "restartPolicy: Never\n      priorityClassName: urgent"
    )
    return simulate(load(tmp_path, NODE + URGENT + jobset(policy) + urgent))


def starts(result: SimulationResult) -> dict[str, float | None]:
    """The JobSet's pods by name: their last start (None: evicted and never run again)."""
    return {r.pod.name: r.start for r in result.records if r.pod.name.startswith("llm-")}


def runs(result: SimulationResult) -> list[tuple[str, float, str]]:
    """The JobSet's run attempts: (pod, start, outcome)."""
    return sorted((a.name, a.start, a.outcome) for a in result.runs if a.name.startswith("llm-"))


def test_without_a_failure_policy_the_jobset_fails_whole(tmp_path: Path) -> None:
    result = preempted(tmp_path)
    assert set(result.failed_jobs) == {"team-a/llm-leader-0", "team-a/llm-workers-0"}
    assert result.failed_jobs["team-a/llm-workers-0"] == (
        100.0,
        "Job team-a/llm-workers-0 failed: its JobSet team-a/llm failed (it has no failurePolicy)",
    )
    assert starts(result) == {"llm-leader-0-0": None, "llm-workers-0-0": None}  # never again
    assert runs(result) == [
        ("llm-leader-0-0", 0.0, "preempted"),
        ("llm-workers-0-0", 0.0, "gang-restart"),
    ]
    assert result.jobset_restarts == []


def test_a_restart_creates_every_job_again_and_their_pods_start_over(tmp_path: Path) -> None:
    """maxRestarts 1: both Jobs are created again at 100 s with new pods; the new worker
    fits beside the urgent pod at once, the new leader when it ends (400 s)."""
    result = preempted(tmp_path, "\n  failurePolicy: {maxRestarts: 1}")
    assert result.failed_jobs == {}
    assert result.jobset_restarts == [
        (100.0, "team-a/llm", "no failurePolicy rule matched: restart 1 of 1")
    ]
    assert starts(result) == {
        "llm-leader-0-0": None,
        "llm-workers-0-0": None,
        "llm-leader-0-0-r1": 400.0,
        "llm-workers-0-0-r1": 100.0,
    }
    assert runs(result) == [
        ("llm-leader-0-0", 0.0, "preempted"),
        ("llm-leader-0-0-r1", 400.0, "completed"),
        ("llm-workers-0-0", 0.0, "gang-restart"),
        ("llm-workers-0-0-r1", 100.0, "completed"),
    ]
    ends = {r.pod.name: r.end for r in result.records}
    assert ends["llm-leader-0-0"] is None and ends["llm-leader-0-0-r1"] == 1000.0
    new = next(r.pod for r in result.records if r.pod.name == "llm-leader-0-0-r1")
    assert new.owner.endswith("-r1") and new.labels["jobset.sigs.k8s.io/jobset-name"] == "llm"


def test_no_restart_left_or_a_failjobset_rule_fails_it(tmp_path: Path) -> None:
    none_left = preempted(tmp_path, "\n  failurePolicy: {maxRestarts: 0}")
    assert set(none_left.failed_jobs) == {"team-a/llm-leader-0", "team-a/llm-workers-0"}
    assert "maxRestarts (0)" in none_left.failed_jobs["team-a/llm-workers-0"][1]
    rule = (
        "\n  failurePolicy:\n    maxRestarts: 3\n    rules:"
        "\n      - {action: FailJobSet, targetReplicatedJobs: [leader]}"
    )
    failed = preempted(tmp_path, rule)
    assert "failurePolicy rule 0 (FailJobSet)" in failed.failed_jobs["team-a/llm-workers-0"][1]
    assert failed.jobset_restarts == []


def test_a_recreatejob_rule_creates_the_failed_job_alone_again(tmp_path: Path) -> None:
    rule = "\n  failurePolicy:\n    rules:\n      - {action: RecreateJob}"
    result = preempted(tmp_path, rule)
    assert result.failed_jobs == {}
    got = starts(result)
    assert got["llm-leader-0-0-r1"] == 400.0
    assert "llm-workers-0-0-r1" not in got  # the worker waits again as itself
    assert got["llm-workers-0-0"] is not None


def test_jobset_action_follows_the_first_matching_rule() -> None:
    policy = JobSetPolicy(
        "ns/js",
        True,
        2,
        (
            ("FailJobSet", frozenset({"DeadlineExceeded"}), frozenset()),
            ("RestartJobSetAndIgnoreMaxRestarts", frozenset(), frozenset({"workers"})),
        ),
    )
    assert jobset_action(policy, 0, "DeadlineExceeded", "workers")[0] == FAIL
    assert jobset_action(policy, 5, "BackoffLimitExceeded", "workers")[:2] == (RESTART, False)
    assert jobset_action(policy, 1, "BackoffLimitExceeded", "leader")[:2] == (RESTART, True)
    assert jobset_action(policy, 2, "BackoffLimitExceeded", "leader")[0] == FAIL
    assert jobset_action(JobSetPolicy("ns/js"), 0, "BackoffLimitExceeded", "x")[0] == FAIL
    recreate = JobSetPolicy("ns/js", True, 0, (("RecreateJob", frozenset(), frozenset()),))
    assert jobset_action(recreate, 9, "PodFailurePolicy", "x")[0] == RECREATE


def test_a_bad_failure_policy_is_refused_naming_the_field(tmp_path: Path) -> None:
    bad = jobset("\n  failurePolicy:\n    rules:\n      - {action: Retry}")
    with pytest.raises(
        WorkloadError, match=r"JobSet team-a/llm: spec.failurePolicy.rules\[0\].action"
    ):
        load(tmp_path, NODE + bad)
    bad = jobset("\n  failurePolicy: {maxRestarts: -1}")
    with pytest.raises(WorkloadError, match=r"spec.failurePolicy.maxRestarts"):
        load(tmp_path, NODE + bad)


def test_simulate_reports_jobset_restarts(tmp_path: Path) -> None:
    urgent = job("urgent", "completions: 1", gpus=6, duration=300, arrival=100)
    urgent = urgent.replace(
        "restartPolicy: Never", "restartPolicy: Never\n      priorityClassName: urgent"
    )
    path = tmp_path / "w.yaml"
    path.write_text(NODE + URGENT + jobset("\n  failurePolicy: {maxRestarts: 1}") + urgent)
    out, report = tmp_path / "out", tmp_path / "report.html"
    args = ["simulate", "--workload", str(path), "--out", str(out), "--report", str(report)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "JobSet team-a/llm restarted at 100.0 s: no failurePolicy rule matched" in result.output
    summary = json.loads((out / "summary.json").read_text())
    leader = summary["jobs"]["team-a/llm-leader-0"]
    assert (leader["succeeded"], leader["jobset"], leader["jobset_restarts"]) == (
        1,
        "team-a/llm",
        1,
    )
    assert summary["jobset_restarts"] == [
        {
            "at_s": 100.0,
            "jobset": "team-a/llm",
            "why": "no failurePolicy rule matched: restart 1 of 1",
        }
    ]
    page = report.read_text()
    assert (
        "<li>JobSet team-a/llm restarted at 100.0 s: no failurePolicy rule matched: restart 1 "
        "of 1</li>"
    ) in page


def test_jobs_failing_in_one_cycle_restart_their_jobset_once(tmp_path: Path) -> None:
    """The workers too fail at their first eviction: the urgent pod takes the whole JobSet,
    both Jobs fail in the same cycle, and the JobSet restarts once (not once per Job)."""
    strict = jobset("\n  failurePolicy: {maxRestarts: 1}").replace(
        "    - name: workers\n      template:\n        spec:\n",
        "    - name: workers\n      template:\n        spec:\n          backoffLimit: 0\n",
    )
    urgent = job("urgent", "completions: 1", gpus=8, duration=300, arrival=100)
    urgent = urgent.replace(
        "restartPolicy: Never", "restartPolicy: Never\n      priorityClassName: urgent"
    )
    result = simulate(load(tmp_path, NODE + URGENT + strict + urgent))
    assert [r[:2] for r in result.jobset_restarts] == [(100.0, "team-a/llm")]
    assert result.failed_jobs == {}
    got = starts(result)
    assert got["llm-leader-0-0-r1"] == 400.0 and got["llm-workers-0-0-r1"] == 400.0
