"""StatefulSets replayed as their controller runs them: names, labels, claims, and pods
created one after another (OrderedReady) or at once (Parallel)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fairgpu.cli import app
from fairgpu.sim.statefulset_controller import OrderedCreation
from fairgpu.sim.workload import PodArrival
from fairgpu.sim.workloads.kube_yaml import WorkloadError, skipped_objects
from tests.builders import pod_info
from tests.sim.helpers import simulated_run
from tests.sim.test_kube_jobs import load, simulate

runner = CliRunner()

ONE_GPU_NODE = """\
apiVersion: v1
kind: Node
metadata: {name: gpu-0}
status:
  allocatable: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "1"}
"""


def statefulset(policy: str = "", claims: str = "") -> str:
    """StatefulSet ``vllm`` of namespace ``team-a``: 3 one-GPU replicas of 600 s."""
    return f"""\
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: vllm
  namespace: team-a
  annotations: {{fairgpu.io/duration-seconds: "600"}}
spec:
  replicas: 3
  serviceName: vllm-headless{policy}
  template:
    metadata: {{labels: {{app: vllm}}}}
    spec:
      schedulerName: fairgpu
      containers: [{{name: s, image: v, resources: {{limits: {{nvidia.com/gpu: "1"}}}}}}]{claims}
"""


OTHER = """\
---
apiVersion: v1
kind: Pod
metadata:
  name: other
  namespace: team-a
  annotations: {fairgpu.io/arrival-seconds: "300", fairgpu.io/duration-seconds: "600"}
spec:
  schedulerName: fairgpu
  containers: [{name: o, image: o, resources: {limits: {nvidia.com/gpu: "1"}}}]
"""


def starts(text: str, tmp_path: Path) -> dict[str, float | None]:
    result = simulate(load(tmp_path, text))
    return {r.pod.name: r.start for r in result.records}


def test_ordered_ready_creates_each_pod_once_the_one_before_runs(tmp_path: Path) -> None:
    """One GPU: vllm-1 is created when vllm-0 starts (0 s), vllm-2 only when vllm-1 starts
    (600 s) -- after ``other`` (300 s), which therefore goes first."""
    got = starts(ONE_GPU_NODE + statefulset() + OTHER, tmp_path)
    assert got == {"vllm-0": 0.0, "vllm-1": 600.0, "other": 1200.0, "vllm-2": 1800.0}


def test_parallel_creates_them_all_at_once(tmp_path: Path) -> None:
    text = ONE_GPU_NODE + statefulset("\n  podManagementPolicy: Parallel") + OTHER
    got = starts(text, tmp_path)
    assert got == {"vllm-0": 0.0, "vllm-1": 600.0, "vllm-2": 1200.0, "other": 1800.0}


def test_pods_are_named_labelled_and_given_their_claims(tmp_path: Path) -> None:
    claims = """
  volumeClaimTemplates:
    - metadata: {name: cache}
      spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 10Gi}}}"""
    workload = load(tmp_path, ONE_GPU_NODE + statefulset(claims=claims))
    pods = {a.pod.name: a.pod for a in workload.arrivals}
    assert sorted(pods) == ["vllm-0", "vllm-1", "vllm-2"]
    pod = pods["vllm-2"]
    assert pod.labels["statefulset.kubernetes.io/pod-name"] == "vllm-2"
    assert pod.labels["apps.kubernetes.io/pod-index"] == "2"
    assert pod.labels["app"] == "vllm"
    assert (pod.owner_kind, pod.claims) == ("StatefulSet", ("cache-vllm-2",))
    storage = workload.extra["storage"]
    assert sorted(o.name for o in storage) == ["cache-vllm-0", "cache-vllm-1", "cache-vllm-2"]
    assert workload.ordered == [tuple(a.pod.uid for a in workload.arrivals)]
    assert not skipped_objects(workload)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (("replicas: 3", "replicas: -1"), "spec.replicas"),
        (("serviceName: vllm-headless", "podManagementPolicy: Random"), "spec.podManagementPolicy"),
    ],
)
def test_a_statefulset_the_api_server_refuses(
    tmp_path: Path, change: tuple[str, str], field: str
) -> None:
    text = ONE_GPU_NODE + statefulset().replace(*change)
    with pytest.raises(WorkloadError, match=rf"StatefulSet team-a/vllm: {field}"):
        load(tmp_path, text)


def test_what_if_asks_for_the_first_pod_of_an_ordered_statefulset(tmp_path: Path) -> None:
    out = simulated_run(tmp_path, ONE_GPU_NODE + OTHER)
    sts = tmp_path / "sts.yaml"
    sts.write_text(statefulset())
    asked = runner.invoke(app, ["what-if", "-f", str(sts), "--run", str(out), "--at", "0"])
    assert asked.exit_code == 0, asked.output
    assert "team-a/vllm-0 (queue team-a" in asked.output
    assert "team-a/vllm-1 (" not in asked.output
    assert (
        "StatefulSet team-a/vllm: its pod vllm-0 is created first; each other one of its 3 "
        "once the one before it runs (podManagementPolicy OrderedReady)"
    ) in asked.output


def test_answers_in_a_run_count_the_pods_a_statefulset_is_still_to_create(
    tmp_path: Path,
) -> None:
    """At 400 s ``vllm-0`` runs, ``vllm-1`` waits and ``vllm-2`` is not created yet (it comes
    once ``vllm-1`` starts): explain says so and predicts the last start (1 800 s, as in the
    run, after ``other``), and ``queues`` counts it and drains after it -- not at 1 200 s."""
    out = simulated_run(tmp_path, ONE_GPU_NODE + statefulset() + OTHER)
    at = ["--run", str(out), "--at", "400"]
    said = runner.invoke(app, ["explain", "team-a/vllm-1", *at])
    assert (
        "StatefulSet team-a/vllm: 2 pod(s) in the cluster, 1 still to be created (once "
        "team-a/vllm-1 starts); the last one predicted to start t=1800 s (in 23m)"
    ) in said.output, said.output
    running = runner.invoke(app, ["explain", "team-a/vllm-0", *at])
    assert "the last one predicted to start t=1800 s" in running.output, running.output
    other = runner.invoke(app, ["explain", "team-a/other", *at])
    assert "StatefulSet" not in other.output and "Predicted start: t=1200 s" in other.output
    rows = json.loads(runner.invoke(app, ["queues", *at, "-o", "json"]).output)["queues"]
    (team,) = rows
    assert (team["pods_to_create"], team["drains_at"]) == (1, "t=1800 s"), team


def test_a_run_s_controller_says_which_pods_are_still_to_come() -> None:
    pods = [pod_info(f"vllm-{i}", gpus=1, duration=600.0) for i in range(3)]
    arrivals = [PodArrival(p, 0.0, 600.0) for p in pods]
    chain = OrderedCreation([tuple(p.uid for p in pods)], arrivals)
    (ahead,) = chain.ahead({pods[0].uid}, 50.0)
    assert ahead.gate == pods[0].uid and not ahead.fan
    assert [a.pod.name for a in ahead.future] == ["vllm-1", "vllm-2"]
    assert all(a.arrival == 50.0 for a in ahead.future)
    assert ahead.chain() == ((pods[0].uid, pods[1].uid, pods[2].uid), False)
    assert chain.ahead(set(), 50.0) == []  # its first pod is not created yet either
    chain.started(pods[0].uid, 60.0)
    (later,) = chain.ahead({pods[0].uid, pods[1].uid}, 70.0)
    assert later.gate == pods[1].uid and [a.pod.name for a in later.future] == ["vllm-2"]
    fan = OrderedCreation([], arrivals, [tuple(p.uid for p in pods)])
    (workers,) = fan.ahead({pods[0].uid}, 0.0)
    assert workers.fan and workers.chain() == ((pods[0].uid, pods[1].uid, pods[2].uid), True)
