"""LeaderWorkerSets replayed as their controller runs them: groups of a leader and workers,
named and labelled as it does, and an evicted pod taking its whole group down under the
default restart policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fairgpu.cli import app
from fairgpu.engine.engine import Engine
from fairgpu.engine.leader_worker_groups import LABEL_GROUP_INDEX, LABEL_NAME
from fairgpu.sim.leader_worker_controller import GroupRestarts
from fairgpu.sim.simulator import Simulation, SimulationResult
from fairgpu.sim.workload import PodArrival, Workload
from fairgpu.sim.workloads.kube_yaml import WorkloadError, skipped_objects
from fairgpu.tenancy import parse_config
from tests.builders import node_info, pod_info
from tests.sim.helpers import simulated_run
from tests.sim.test_kube_jobs import NODE, load, simulate
from tests.sim.test_questions_in_run import pod

runner = CliRunner()


def lws(extra: str = "", replicas: int = 2) -> str:
    """LeaderWorkerSet ``vllm`` of namespace ``team-a``: groups of a leader and two workers,
    one GPU each."""
    return f"""\
---
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: vllm
  namespace: team-a
spec:
  replicas: {replicas}
  leaderWorkerTemplate:
    size: 3{extra}
    workerTemplate:
      metadata: {{labels: {{role: worker}}}}
      spec:
        schedulerName: fairgpu
        containers: [{{name: w, image: v, resources: {{limits: {{nvidia.com/gpu: "1"}}}}}}]
"""


def test_groups_are_named_labelled_and_owned_as_the_controller_makes_them(
    tmp_path: Path,
) -> None:
    workload = load(tmp_path, NODE + lws())
    pods = {a.pod.name: a.pod for a in workload.arrivals}
    assert list(pods) == ["vllm-0", "vllm-0-1", "vllm-0-2", "vllm-1", "vllm-1-1", "vllm-1-2"]
    worker = pods["vllm-1-2"]
    assert worker.labels[LABEL_NAME] == "vllm" and worker.labels[LABEL_GROUP_INDEX] == "1"
    assert worker.labels["leaderworkerset.sigs.k8s.io/worker-index"] == "2"
    assert worker.labels["role"] == "worker"
    assert worker.annotations["leaderworkerset.sigs.k8s.io/size"] == "3"
    assert worker.annotations["leaderworkerset.sigs.k8s.io/leader-name"] == "vllm-1"
    assert worker.owner_kind == "StatefulSet"
    assert pods["vllm-1"].labels["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    uids = [a.pod.uid for a in workload.arrivals]
    assert workload.recreated_groups == [(tuple(uids[:3]), False), (tuple(uids[3:]), False)]
    assert not skipped_objects(workload)


def test_a_leader_template_makes_the_leaders(tmp_path: Path) -> None:
    leader = """
    leaderTemplate:
      metadata: {labels: {role: leader}}
      spec:
        schedulerName: fairgpu
        containers: [{name: l, image: v, resources: {limits: {nvidia.com/gpu: "2"}}}]"""
    workload = load(tmp_path, NODE + lws(leader, replicas=1))
    pods = {a.pod.name: a.pod for a in workload.arrivals}
    assert pods["vllm-0"].labels["role"] == "leader" and pods["vllm-0"].gpu.count == 2
    assert pods["vllm-0-1"].labels["role"] == "worker" and pods["vllm-0-1"].gpu.count == 1


@pytest.mark.parametrize(
    ("extra", "groups"),
    [
        ("\n    restartPolicy: None", []),
        ("\n    restartPolicy: RecreateGroupAfterStart", [True]),
    ],
)
def test_the_restart_policy_decides_which_groups_are_recreated(
    tmp_path: Path, extra: str, groups: list[bool]
) -> None:
    workload = load(tmp_path, NODE + lws(extra, replicas=1))
    assert [after_start for _, after_start in workload.recreated_groups] == groups


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (("replicas: 2", "replicas: -1"), "spec.replicas"),
        (("size: 3", "size: 0"), "spec.leaderWorkerTemplate.size"),
        (
            ("size: 3", "size: 3\n    restartPolicy: Sometimes"),
            "spec.leaderWorkerTemplate.restartPolicy",
        ),
        (("workerTemplate:", "otherTemplate:"), "spec.leaderWorkerTemplate.workerTemplate"),
        (("replicas: 2", "replicas: 2\n  startupPolicy: Eager"), "spec.startupPolicy"),
    ],
)
def test_a_leaderworkerset_the_api_server_refuses(
    tmp_path: Path, change: tuple[str, str], field: str
) -> None:
    with pytest.raises(WorkloadError, match=rf"LeaderWorkerSet team-a/vllm: {field}"):
        load(tmp_path, NODE + lws().replace(*change))


TENANCY = {"queues": [{"name": "q", "namespaces": ["q"]}], "preemption": {"enabled": True}}


def replay(labelled: bool, loose: bool = False) -> SimulationResult:
    """One 8-GPU node: ``solo`` (3 GPUs, from 0 s) and a group of ``vllm`` (a leader and a
    worker, 2 GPUs each, from 100 s) run on; at 500 s an urgent 3-GPU pod needs room. Alone,
    a pod of the group (400 s x 2 = 800 GPU-s, with the free GPU) is a cheaper victim than
    ``solo`` (1 500 GPU-s); the group as a whole (1 600) is not. The engine decides the
    victims, the group's controller what follows. ``loose``: the set's ``restartPolicy`` is
    None (each pod restarted alone)."""
    labels = {LABEL_NAME: "vllm", LABEL_GROUP_INDEX: "0"} if labelled else {}
    leader = pod_info("vllm-0", "q", gpus=2, labels=dict(labels), created=100.0)
    worker = pod_info("vllm-0-1", "q", gpus=2, labels=dict(labels), created=100.0)
    solo = pod_info("solo", "q", gpus=3, created=0.0)
    urgent = pod_info("urgent", "q", gpus=3, priority=1000, created=500.0)
    arrivals = [
        PodArrival(solo, 0.0, None),
        PodArrival(leader, 100.0, None),
        PodArrival(worker, 100.0, None),
        PodArrival(urgent, 500.0, 60.0),
    ]
    workload = Workload(
        "lws",
        [node_info("n1", gpus=8)],
        arrivals,
        recreated_groups=[] if loose else [((leader.uid, worker.uid), False)],
        loose_leader_worker_sets=frozenset({"q/vllm"} if loose else ()),
    )
    engine = Engine(tenancy=parse_config(TENANCY))
    return Simulation(workload, engine, until=550.0).run()


def _outcomes(result: SimulationResult) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for run in result.runs:
        out.setdefault(run.name, []).append(run.outcome)
    return out


def test_the_controller_recreates_the_group_an_evicted_pod_belongs_to() -> None:
    """Blind to the group (no labels), the scheduler evicts one pod of it; the controller
    takes the other down too."""
    got = _outcomes(replay(labelled=False))
    assert got["vllm-0"][0] in ("preempted", "gang-restart")
    assert got["vllm-0-1"][0] in ("preempted", "gang-restart")
    assert sorted([got["vllm-0"][0], got["vllm-0-1"][0]]) == ["gang-restart", "preempted"]
    assert got["solo"] == ["running"]


def test_a_scheduler_that_knows_the_group_spares_it() -> None:
    got = _outcomes(replay(labelled=True))
    assert got["solo"] == ["preempted"], got
    assert got["vllm-0"] == ["running"] and got["vllm-0-1"] == ["running"]


def test_a_set_whose_pods_restart_alone_loses_one_pod_not_the_group() -> None:
    """Under ``restartPolicy: None`` one pod of the group (800 GPU-s) is the cheapest victim:
    it alone goes, and the rest of the group and ``solo`` run on."""
    got = _outcomes(replay(labelled=True, loose=True))
    assert sorted([got["vllm-0"][0], got["vllm-0-1"][0]]) == ["preempted", "running"], got
    assert got["solo"] == ["running"], got


def test_the_restart_policy_of_a_workload_file_tells_the_engine(tmp_path: Path) -> None:
    restarting = load(tmp_path, NODE + lws())
    alone = load(tmp_path, NODE + lws("\n    restartPolicy: None"))
    assert restarting.loose_leader_worker_sets == frozenset()
    assert alone.loose_leader_worker_sets == frozenset({"team-a/vllm"})


def test_recreate_after_start_waits_until_every_pod_of_the_group_started() -> None:
    restarts = GroupRestarts([(("l", "w1", "w2"), True), (("m", "v"), False)])
    running = {"l", "w1", "w2", "m"}.__contains__
    assert restarts.taken_with("w1", running) == ["l", "w2"]
    assert restarts.taken_with("w1", running, gone={"w2"}) == ["l"]
    assert restarts.taken_with("w1", {"l", "w1"}.__contains__) == []  # w2 has not started
    assert restarts.taken_with("m", running) == []  # v has not started: nothing else runs
    assert restarts.taken_with("other", running) == []


def test_explain_names_the_group_that_restarts_with_a_victim(tmp_path: Path) -> None:
    """``big`` (team-b, 8 GPUs) waits for the node one group of ``vllm`` holds: explain lists
    both pods as the ones that would have to go, each with the group it restarts."""
    big = pod("big", 100, 86400, namespace="team-b")  # runs past the moment looked at
    one_group = lws(replicas=1).replace("size: 3", "size: 2").replace('gpu: "1"', 'gpu: "4"')
    out = simulated_run(tmp_path, NODE + one_group + big)
    said = runner.invoke(app, ["explain", "team-b/big", "--run", str(out), "--at", "200"])
    assert said.exit_code == 0, said.output
    line = next(x for x in said.output.splitlines() if x.strip().startswith("gpu-0:"))
    assert "team-a/vllm-0 (queue team-a, priority 0" in line, line
    assert "its LeaderWorkerSet group restarts with it: team-a/vllm-0-1)" in line
    assert "its LeaderWorkerSet group restarts with it: team-a/vllm-0)" in line
    leader = runner.invoke(app, ["explain", "team-a/vllm-0", "--run", str(out), "--at", "200"])
    assert (
        "LeaderWorkerSet team-a/vllm group 0: 2 of 2 pod(s) running, 0 pending; one evicted "
        "pod restarts the whole group"
    ) in leader.output, leader.output


def test_leader_ready_creates_the_workers_once_the_leader_runs(tmp_path: Path) -> None:
    """``blocker`` holds the node until 300 s; one group of ``vllm`` arrives at 10 s. Under
    the default LeaderCreated its workers are created with the leader; under LeaderReady
    only when the leader starts (300 s). All start at 300 s either way."""
    blocker = pod("blocker", 0, 300)
    group = lws(replicas=1).replace(
        "  namespace: team-a\n",
        '  namespace: team-a\n  annotations: {fairgpu.io/arrival-seconds: "10"}\n',
    )
    for policy, workers_created in (("", 10.0), ("\n  startupPolicy: LeaderReady", 300.0)):
        text = (
            NODE + blocker + group.replace("spec:\n  replicas: 1", f"spec:{policy}\n  replicas: 1")
        )
        result = simulate(load(tmp_path, text))
        got = {r.pod.name: (r.arrival, r.start) for r in result.records}
        assert got["vllm-0"] == (10.0, 300.0), (policy, got)
        assert got["vllm-0-1"] == got["vllm-0-2"] == (workers_created, 300.0), (policy, got)


def test_what_if_asks_for_the_leader_first_under_leader_ready(tmp_path: Path) -> None:
    out = simulated_run(tmp_path, NODE)
    asked_for = tmp_path / "lws.yaml"
    asked_for.write_text(
        lws(replicas=1).replace(
            "spec:\n  replicas: 1", "spec:\n  startupPolicy: LeaderReady\n  replicas: 1"
        )
    )
    said = runner.invoke(app, ["what-if", "-f", str(asked_for), "--run", str(out), "--at", "0"])
    assert said.exit_code == 0, said.output
    assert "team-a/vllm-0 (queue team-a" in said.output and "team-a/vllm-0-1 (" not in said.output
    assert (
        "LeaderWorkerSet group of team-a/vllm-0: its leader is created first; its 2 worker(s) "
        "once it runs (startupPolicy LeaderReady)"
    ) in said.output


@pytest.mark.parametrize(
    ("policy", "alone"),
    [
        (None, False),
        ("RecreateGroupOnPodRestart", False),
        ("RecreateGroupAfterStart", False),
        ("None", True),
        ("Default", True),
    ],
)
def test_the_live_scheduler_reads_which_sets_restart_pods_alone(
    policy: str | None, alone: bool
) -> None:
    from fairgpu.kube.leader_worker_progress import restarting_alone

    template: dict[str, object] = {"size": 2, "workerTemplate": {}}
    if policy is not None:
        template["restartPolicy"] = policy
    doc = {"metadata": {"name": "vllm", "namespace": "team-a"}, "spec": {}}
    doc["spec"] = {"leaderWorkerTemplate": template}
    assert restarting_alone(json.dumps(doc).encode()) == ("team-a/vllm" if alone else None)
    assert restarting_alone(b'{"metadata": {}}') is None  # unreadable: costed whole
