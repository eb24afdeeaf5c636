"""batch/v1 Jobs in a simulated run: the pods their controller creates, when it creates them,
and the Jobs the API server would refuse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fairgpu.cli import app
from fairgpu.engine.engine import Engine
from fairgpu.engine.policies import DEFAULT_POLICY, policy
from fairgpu.model.job_failures import disruption_action
from fairgpu.sim.job_controller import JobController
from fairgpu.sim.simulator import Simulation, SimulationResult
from fairgpu.sim.workload import Workload
from fairgpu.sim.workloads.kube_yaml import WorkloadError, load_kube_yaml, skipped_objects

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

NODE = """\
apiVersion: v1
kind: Node
metadata: {name: gpu-0}
status:
  allocatable: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "8"}
"""


def job(
    name: str,
    spec: str,
    gpus: int = 2,
    duration: float = 600,
    arrival: float = 0,
    template_meta: str = "{}",
    restart: str = "Never",
    priority_class: str = "",
) -> str:
    """A Job of namespace ``team-a`` whose pods ask ``gpus`` GPUs each and run ``duration``
    seconds (annotations on the Job, as users write them once); ``spec``: its other spec
    fields, ``key: value`` separated by commas."""
    fields = "".join(f"\n  {item.strip()}" for item in spec.split(",") if item.strip())
    prio = f"\n      priorityClassName: {priority_class}" if priority_class else ""
    return f"""\
---
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: team-a
  annotations:
    fairgpu.io/arrival-seconds: "{arrival}"
    fairgpu.io/duration-seconds: "{duration}"
spec:{fields}
  template:
    metadata: {template_meta}
    spec:
      schedulerName: fairgpu
      restartPolicy: {restart}{prio}
      containers:
        - name: main
          image: trainer
          resources:
            limits: {{nvidia.com/gpu: "{gpus}"}}
"""


def load(tmp_path: Path, text: str) -> Workload:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    return load_kube_yaml([path])


def simulate(workload: Workload) -> SimulationResult:
    engine = Engine(policy(DEFAULT_POLICY), 0)
    engine.register_pod_groups(workload.pod_groups)
    return Simulation(workload, engine).run()


def test_pods_are_named_labelled_and_owned_as_the_controller_makes_them(tmp_path: Path) -> None:
    workload = load(
        tmp_path,
        NODE
        + job(
            "sweep",
            "parallelism: 2, completions: 3, completionMode: Indexed",
            template_meta="{labels: {fairgpu.io/user: alice}}",
        ),
    )
    pods = [a.pod for a in workload.arrivals]
    assert [p.name for p in pods] == ["sweep-0", "sweep-1", "sweep-2"]
    last = pods[2]
    assert last.labels["batch.kubernetes.io/job-name"] == "sweep"
    assert last.labels["job-name"] == "sweep"
    assert last.labels["batch.kubernetes.io/job-completion-index"] == "2"
    assert last.labels["fairgpu.io/user"] == "alice"
    assert last.owner_kind == "Job" and last.owner == "job/team-a/sweep"
    # The Job's timing annotations reach its pods.
    assert {a.duration for a in workload.arrivals} == {600.0}
    [pacing] = workload.jobs
    assert pacing.key == "team-a/sweep" and pacing.first == 2
    assert pacing.pods == tuple(p.uid for p in pods)


@pytest.mark.parametrize(
    ("spec", "pods", "first"),
    [
        ("parallelism: 2, completions: 5", 5, 2),
        ("parallelism: 4, completions: 2", 2, 2),  # never more pods than completions
        ("parallelism: 3", 3, 3),  # a work queue: parallelism pods, all at once
        ("completions: 2", 2, 1),  # parallelism defaults to 1
        ("parallelism: 0, completions: 2", 2, 0),  # paused: its controller creates none
    ],
)
def test_how_many_pods_and_how_many_at_once(
    tmp_path: Path, spec: str, pods: int, first: int
) -> None:
    workload = load(tmp_path, NODE + job("j", spec))
    assert len(workload.arrivals) == pods
    assert [(p.first, len(p.pods)) for p in workload.jobs] == [(first, pods)]


def test_a_job_of_no_completions_or_suspended_has_no_pods(tmp_path: Path) -> None:
    workload = load(
        tmp_path,
        NODE + job("none", "completions: 0") + job("held", "completions: 2, suspend: true"),
    )
    assert workload.arrivals == [] and workload.jobs == []
    assert skipped_objects(workload) == [
        "Job team-a/held is suspended (spec.suspend): it creates no pods"
    ]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (job("j", "parallelism: -1"), "Job team-a/j: spec.parallelism: must be a whole number"),
        (job("j", "completions: many"), "Job team-a/j: spec.completions: must be a whole number"),
        (
            job("j", "completionMode: Indexed"),
            "spec.completions: required when completionMode is Indexed",
        ),
        (job("j", "completionMode: Random"), "spec.completionMode: must be NonIndexed or"),
        (job("j", "completions: 1", restart="Always"), "spec.template.spec.restartPolicy"),
        ("kind: Job\nspec: {completions: 1}\n", "Job without metadata.name"),
    ],
    ids=["negative-parallelism", "bad-completions", "indexed-open", "mode", "restart", "name"],
)
def test_a_job_the_api_server_refuses_is_one_clear_error(
    tmp_path: Path, text: str, needle: str
) -> None:
    with pytest.raises(WorkloadError, match=needle):
        load(tmp_path, NODE + "---\n" + text)


def test_later_pods_are_created_as_earlier_ones_succeed(tmp_path: Path) -> None:
    """5 completions, 2 at a time, 600 s each, on a node with room for all of them: the
    controller, not the node, paces them -- 2, then 2 at 600 s, then the last at 1 200 s."""
    result = simulate(load(tmp_path, NODE + job("sweep", "parallelism: 2, completions: 5")))
    got = sorted((r.pod.name, r.arrival, r.start, r.end) for r in result.records)
    assert got == [
        ("sweep-0", 0.0, 0.0, 600.0),
        ("sweep-1", 0.0, 0.0, 600.0),
        ("sweep-2", 600.0, 600.0, 1200.0),
        ("sweep-3", 600.0, 600.0, 1200.0),
        ("sweep-4", 1200.0, 1200.0, 1800.0),
    ]
    # Created when they arrive: ordered among other pods from then on.
    later = next(r.pod for r in result.records if r.pod.name == "sweep-4")
    assert later.created == 1200.0


def test_a_preempted_pod_waits_again_and_no_extra_pod_is_created(tmp_path: Path) -> None:
    """A Job of 4-GPU pods (2 at a time, 3 completions) fills the node; at 100 s a pod of
    the same queue with a higher priority preempts one of them. The evicted pod waits
    again (the controller's replacement); the Job still has 3 pods, never more than 2 at
    once, and finishes all of them."""
    text = NODE + priority_class("urgent", 1000)
    text += job("low", "parallelism: 2, completions: 3", gpus=4)
    text += job(
        "urgent", "completions: 1", gpus=4, duration=300, arrival=100, priority_class="urgent"
    )
    result = simulate(load(tmp_path, text))
    low = [r for r in result.records if r.pod.name.startswith("low-")]
    assert len(low) == 3 and all(r.end is not None for r in low)
    assert sum(r.preempted for r in low) == 1
    spans = sorted((a.start, a.end) for a in result.runs if a.name.startswith("low-"))
    for t in {s for s, _ in spans}:
        assert sum(1 for s, e in spans if s <= t < e) <= 2


def test_the_same_workload_replays_the_same_twice(tmp_path: Path) -> None:
    """Pods created during a run are copies: the workload is left as it was."""
    workload = load(tmp_path, NODE + job("sweep", "parallelism: 1, completions: 3"))
    first = sorted((r.pod.name, r.start) for r in simulate(workload).records)
    assert [a.pod.created for a in workload.arrivals] == [0.0, 0.0, 0.0]
    assert sorted((r.pod.name, r.start) for r in simulate(workload).records) == first


def test_simulate_reports_each_job_and_what_it_skipped(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(
        NODE
        + job("sweep", "parallelism: 2, completions: 3")
        + "---\napiVersion: ray.io/v1\nkind: RayJob\nmetadata: {name: rj}\n"
    )
    out = tmp_path / "out"
    result = runner.invoke(app, ["simulate", "--workload", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "note: skipped (kinds the simulator does not replay): 1 RayJob" in result.output
    assert "team-a/sweep" in result.output.split("Jobs")[-1]
    jobs = json.loads((out / "summary.json").read_text())["jobs"]
    assert jobs == {
        "team-a/sweep": {
            "completions": 3,
            "pods_created": 3,
            "succeeded": 3,
            "arrival_s": 0.0,
            "first_start_s": 0.0,
            "finished_s": 1200.0,
            "failed_s": None,
            "failed_reason": None,
            "jobset": None,
            "jobset_restarts": None,
        }
    }
    # A run cut short says how far each Job got.
    cut = runner.invoke(
        app, ["simulate", "--workload", str(path), "--out", str(out), "--until", "700"]
    )
    assert cut.exit_code == 0, cut.output
    jobs = json.loads((out / "summary.json").read_text())["jobs"]
    assert jobs["team-a/sweep"]["succeeded"] == 2
    assert jobs["team-a/sweep"]["finished_s"] is None


def test_the_jobs_table_shows_each_job_s_whole_name(tmp_path: Path) -> None:
    """A name too long for its column folds onto the next line; it is never cut short."""
    path = tmp_path / "w.yaml"
    name = "nightly-evaluation-sweep-of-checkpoints"
    path.write_text(NODE + job(name, "parallelism: 1, completions: 1"))
    result = runner.invoke(app, ["simulate", "--workload", str(path)])
    assert result.exit_code == 0, result.output
    rows = result.output.split("Jobs")[-1].splitlines()
    cells = [r.split("│")[1].strip() for r in rows if r.startswith("│")]
    assert "".join(cells) == f"team-a/{name}", rows


def test_what_if_asks_for_the_pods_a_job_creates_first(tmp_path: Path) -> None:
    """The example training Job (4 workers of 8 GPUs, one pod group) in a run of one 8-GPU
    A100 node: all four members are asked about, together (one fits)."""
    workload = tmp_path / "w.yaml"
    a100 = "{example.com/node.usage: training, nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}"
    workload.write_text(NODE.replace("{name: gpu-0}", f"{{name: gpu-0, labels: {a100}}}"))
    out = tmp_path / "out"
    simulated = runner.invoke(app, ["simulate", "--workload", str(workload), "--out", str(out)])
    assert simulated.exit_code == 0, simulated.output
    example = ROOT / "deploy" / "examples" / "training-podgroup.yaml"
    result = runner.invoke(app, ["what-if", "-f", str(example), "--run", str(out)])
    assert result.exit_code == 0, result.output
    asked = [line.split(" ")[0] for line in result.output.splitlines() if "(queue" in line]
    assert asked == [f"team-a/resnet-train-{i}" for i in range(4)]
    assert "only 1 of 4 needed members fit together" in result.output
    # A Job with more completions than parallelism: only the first pods exist yet.
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(job("sweep", "parallelism: 2, completions: 5").removeprefix("---\n"))
    result = runner.invoke(app, ["what-if", "-f", str(sweep), "--run", str(out)])
    asked = [line.split(" ")[0] for line in result.output.splitlines() if "(queue" in line]
    assert asked == ["team-a/sweep-0", "team-a/sweep-1"]
    assert (
        "Job team-a/sweep: 2 of its 5 pods are created at first; its controller creates each "
        "other one when one of them succeeds"
    ) in result.output


def test_the_report_lists_the_jobs_and_leaves_unknown_cells_blank(tmp_path: Path) -> None:
    """A tenant never backlogged has no useful-to-fair ratio: its cell is blank, not the
    word None; a Job cut short by ``--until`` has a blank finish."""
    path = tmp_path / "w.yaml"
    path.write_text(NODE + job("sweep", "parallelism: 2, completions: 3"))
    report = tmp_path / "report.html"
    args = ["simulate", "--workload", str(path), "--until", "700", "--report", str(report)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    page = report.read_text()
    tenants = page.split("<h2>Tenants</h2>")[1].split("</table>")[0]
    assert "<td>team-a</td>" in tenants and "<td>None</td>" not in tenants
    jobs = page.split("<h2>Jobs</h2>")[1].split("</table>")[0]
    assert "<td>team-a/sweep</td><td>2 / 3</td><td>0.0</td><td>0.0</td><td></td><td></td>" in jobs


JOBSET = """\
---
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: llm
  namespace: team-a
  annotations: {fairgpu.io/duration-seconds: "600"}
spec:
  replicatedJobs:
    - name: workers
      replicas: 2
      template:
        spec:
          parallelism: 2
          completions: 2
          template:
            spec:
              schedulerName: fairgpu
              restartPolicy: Never
              containers: [{name: w, image: t, resources: {limits: {nvidia.com/gpu: "2"}}}]
    - name: driver
      template:
        spec:
          completions: 2
          template:
            spec:
              schedulerName: fairgpu
              restartPolicy: Never
              containers: [{name: d, image: t}]
"""


def test_a_jobset_runs_its_jobs_each_paced_by_its_own_parallelism(tmp_path: Path) -> None:
    """Two worker Jobs of 2 pods at once and a driver Job of 2 completions one at a time:
    the JobSet's labels reach every pod, the workers start at once, the driver's second
    pod when its first succeeded."""
    workload = load(tmp_path, NODE + JOBSET)
    assert sorted(p.key for p in workload.jobs) == [
        "team-a/llm-driver-0",
        "team-a/llm-workers-0",
        "team-a/llm-workers-1",
    ]
    worker = next(a.pod for a in workload.arrivals if a.pod.name == "llm-workers-1-0")
    assert worker.labels["jobset.sigs.k8s.io/jobset-name"] == "llm"
    assert worker.labels["jobset.sigs.k8s.io/replicatedjob-name"] == "workers"
    assert worker.labels["jobset.sigs.k8s.io/job-index"] == "1"
    assert worker.labels["batch.kubernetes.io/job-name"] == "llm-workers-1"
    starts = {r.pod.name: r.start for r in simulate(workload).records}
    assert starts == {
        "llm-workers-0-0": 0.0,
        "llm-workers-0-1": 0.0,
        "llm-workers-1-0": 0.0,
        "llm-workers-1-1": 0.0,
        "llm-driver-0-0": 0.0,
        "llm-driver-0-1": 600.0,
    }


def test_a_suspended_or_malformed_jobset(tmp_path: Path) -> None:
    held = JOBSET.replace("spec:\n  replicatedJobs:", "spec:\n  suspend: true\n  replicatedJobs:")
    workload = load(tmp_path, NODE + held)
    assert workload.arrivals == []
    assert skipped_objects(workload) == [
        "JobSet team-a/llm is suspended (spec.suspend): it creates no pods"
    ]
    bad = JOBSET.replace("replicas: 2", "replicas: -2")
    with pytest.raises(
        WorkloadError, match=r"JobSet team-a/llm: spec.replicatedJobs\[0\].replicas"
    ):
        load(tmp_path, NODE + bad)


PYTORCHJOB = """\
---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: bert
  namespace: team-a
  annotations: {fairgpu.io/duration-seconds: "600"}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 3
      template:
        spec:
          schedulerName: fairgpu
          containers: [{name: pytorch, image: t, resources: {limits: {nvidia.com/gpu: "2"}}}]
    Master:
      replicas: 1
      template:
        spec:
          schedulerName: fairgpu
          containers: [{name: pytorch, image: t, resources: {limits: {nvidia.com/gpu: "2"}}}]
"""


def test_a_pytorchjob_is_one_gang_of_all_its_replicas(tmp_path: Path) -> None:
    """Master and 3 workers of 2 GPUs on an 8-GPU node that already runs a 2-GPU pod: they
    wait together until that pod ends, then start together (alone, 3 would fit at once)."""
    blocker = job("first", "completions: 1", gpus=2, duration=300)
    later = PYTORCHJOB.replace(
        "{fairgpu.io/duration-seconds",
        "{fairgpu.io/arrival-seconds: '10', fairgpu.io/duration-seconds",
    )
    workload = load(tmp_path, NODE + blocker + later)
    pods = [a.pod for a in workload.arrivals if a.pod.name.startswith("bert")]
    assert [p.name for p in pods] == [
        "bert-master-0",
        "bert-worker-0",
        "bert-worker-1",
        "bert-worker-2",
    ]
    assert pods[0].labels["training.kubeflow.org/job-role"] == "master"
    assert pods[1].labels["training.kubeflow.org/replica-type"] == "worker"
    assert pods[3].labels["scheduling.x-k8s.io/pod-group"] == "bert"
    assert pods[0].owner_kind == "PyTorchJob"
    assert workload.pod_groups == {"team-a/bert": 4}
    starts = {r.pod.name: r.start for r in simulate(workload).records}
    assert {starts[p.name] for p in pods} == {300.0}


def test_a_pytorchjob_s_min_available_and_suspension(tmp_path: Path) -> None:
    some = PYTORCHJOB.replace(
        "spec:\n  pytorchReplicaSpecs:",
        "spec:\n  runPolicy: {schedulingPolicy: {minAvailable: 2}}\n  pytorchReplicaSpecs:",
    )
    assert load(tmp_path, NODE + some).pod_groups == {"team-a/bert": 2}
    held = PYTORCHJOB.replace(
        "spec:\n  pytorchReplicaSpecs:",
        "spec:\n  runPolicy: {suspend: true}\n  pytorchReplicaSpecs:",
    )
    workload = load(tmp_path, NODE + held)
    assert workload.arrivals == [] and workload.pod_groups == {}
    assert skipped_objects(workload) == [
        "PyTorchJob team-a/bert is suspended (spec.suspend): it creates no pods"
    ]
    bad = some.replace("minAvailable: 2", "minAvailable: 9")
    with pytest.raises(WorkloadError, match="minAvailable: must be a whole number from 1 to its 4"):
        load(tmp_path, NODE + bad)


IGNORE = """
  podFailurePolicy:
    rules:
      - {action: Ignore, onPodConditions: [{type: DisruptionTarget}]}"""


def priority_class(name: str, value: int) -> str:
    """A PriorityClass document."""
    head = "---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\n"
    return f"{head}metadata: {{name: {name}}}\nvalue: {value}\n"


def preempted_job_yaml(spec: str, policy: str = "", more: str = "") -> str:
    """Job ``low`` (3 completions, 2 at a time, 4 GPUs each) fills the node; at 100 s a
    higher-priority pod of the same queue preempts one of its pods; ``more``: other YAML."""
    text = NODE + priority_class("urgent", 1000)
    text += job("low", f"parallelism: 2, completions: 3, {spec}", gpus=4).replace(
        "\n  template:", f"{policy}\n  template:"
    )
    text += job(
        "urgent", "completions: 1", gpus=4, duration=300, arrival=100, priority_class="urgent"
    )
    return text + more


def preempted_job(tmp_path: Path, spec: str, policy: str = "", more: str = "") -> SimulationResult:
    """The replay of :func:`preempted_job_yaml`."""
    return simulate(load(tmp_path, preempted_job_yaml(spec, policy, more)))


def test_an_eviction_beyond_the_backoff_limit_fails_the_job(tmp_path: Path) -> None:
    """``backoffLimit: 0``: the eviction is the Job's one failure too many, so the urgent pod
    costs the whole Job -- the scheduler evicts its other pod too (the Job controller would
    delete it); neither runs again and its third pod is never created."""
    result = preempted_job(tmp_path, "backoffLimit: 0")
    low = {r.pod.name: r for r in result.records if r.pod.name.startswith("low-")}
    assert sorted(low) == ["low-0", "low-1"]
    assert all(r.end is None and r.failed_at == 100.0 for r in low.values())
    why = "Job team-a/low failed: 1 pod(s) evicted, more than its backoffLimit 0"
    assert result.failed_jobs == {"team-a/low": (100.0, why)}
    assert {r.reason for r in low.values()} == {why}
    outcomes = sorted(a.outcome for a in result.runs if a.name.startswith("low-"))
    assert outcomes == ["gang-restart", "preempted"]


def test_the_room_a_failed_job_leaves_is_taken_at_once(tmp_path: Path) -> None:
    """``waiting`` (same queue and priority as the Job: it may not preempt) waits from 50 s;
    when the Job fails at 100 s its deleted pod's GPUs go to ``waiting`` then, not at the
    next event (``urgent`` ending at 400 s)."""
    more = job("waiting", "completions: 1", gpus=4, arrival=50)
    result = preempted_job(tmp_path, "backoffLimit: 0", more=more)
    starts = {r.pod.name: r.start for r in result.records}
    assert starts["waiting-0"] == 100.0 and starts["urgent-0"] == 100.0


def test_a_job_that_ignores_disruptions_or_allows_failures_goes_on(tmp_path: Path) -> None:
    for spec, rules in (("backoffLimit: 0", IGNORE), ("backoffLimit: 1", "")):
        result = preempted_job(tmp_path, spec, rules)
        low = [r for r in result.records if r.pod.name.startswith("low-")]
        assert len(low) == 3 and all(r.end is not None for r in low), (spec, rules)
        assert result.failed_jobs == {}


def test_a_failjob_rule_on_the_killed_exit_code_fails_at_the_first_eviction(
    tmp_path: Path,
) -> None:
    policy = """
  podFailurePolicy:
    rules:
      - {action: FailJob, onExitCodes: {operator: In, values: [137]}}"""
    result = preempted_job(tmp_path, "backoffLimit: 6", policy)
    assert "a pod failure policy rule (FailJob)" in result.failed_jobs["team-a/low"][1]


@pytest.mark.parametrize(
    ("rules", "action"),
    [
        ([], "Count"),
        ([{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}], "Ignore"),
        # The first rule that matches decides.
        (
            [
                {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [0]}},
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            ],
            "Count",
        ),
        ([{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1, 2]}}], "Count"),
        ([{"action": "Ignore", "onPodConditions": [{"type": "ConfigIssue"}]}], "Count"),
    ],
)
def test_what_a_pod_failure_policy_does_with_an_eviction(
    rules: list[dict[str, object]], action: str
) -> None:
    assert disruption_action({"rules": rules}) == action


def test_simulate_says_which_job_failed_and_how_to_keep_it(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(preempted_job_yaml("backoffLimit: 0"))
    result = runner.invoke(app, ["simulate", "--workload", str(path)])
    assert result.exit_code == 0, result.output
    assert (
        "Job team-a/low failed: 1 pod(s) evicted, more than its backoffLimit 0 (at 100.0 s)"
        in result.output
    )
    assert "unless the Job's podFailurePolicy ignores pods with the DisruptionTarget" in (
        " ".join(result.output.split())
    )


def test_a_job_past_its_active_deadline_fails_waiting_included(tmp_path: Path) -> None:
    """``late`` (deadline 900 s) waits behind ``first`` until 600 s, then runs 600 s: its
    deadline counts from its creation, so it fails at 900 s, its pod deleted. ``quick``
    finishes in time and its deadline, later, does not move the end of the run."""
    text = NODE + job("first", "completions: 1", gpus=8, duration=600)
    text += job("late", "completions: 1, activeDeadlineSeconds: 900", gpus=8, arrival=10)
    text += job(
        "quick", "completions: 1, activeDeadlineSeconds: 99999", gpus=8, duration=60, arrival=20
    )
    result = simulate(load(tmp_path, text))
    why = "Job team-a/late failed: it was still active 900 s after it started"
    assert result.failed_jobs["team-a/late"][0] == 910.0
    assert result.failed_jobs["team-a/late"][1].startswith(why)
    assert "team-a/quick" not in result.failed_jobs
    assert [a.outcome for a in result.runs if a.name == "late-0"] == ["deleted"]
    assert result.end_time < 5000


def test_a_bad_active_deadline_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        WorkloadError, match=r"spec\.activeDeadlineSeconds: must be a whole number > 0"
    ):
        load(tmp_path, NODE + job("j", "completions: 1, activeDeadlineSeconds: 0"))


def test_the_scheduler_spares_a_job_one_eviction_would_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Job ``low`` (two 2-GPU pods, ``backoffLimit: 0``) and pod ``solo`` (3 GPUs) run from
    0 s; at 500 s an urgent 2-GPU pod of the same queue needs room. One pod of the Job
    (1 000 GPU-s run) looks cheaper than ``solo`` (1 500) -- but it fails the Job and loses
    both of its pods (2 000): ``solo`` goes, the Job finishes. Blind to that, the scheduler
    evicts the Job's pod and the Job fails."""
    text = NODE + priority_class("urgent", 1000)
    text += job("low", "parallelism: 2, completions: 2, backoffLimit: 0", gpus=2, duration=3600)
    text += job("solo", "completions: 1", gpus=3, duration=3600)
    text += job(
        "urgent", "completions: 1", gpus=2, duration=60, arrival=500, priority_class="urgent"
    )
    result = simulate(load(tmp_path, text))
    preempted = {a.name for a in result.runs if a.outcome == "preempted"}
    assert preempted == {"solo-0"} and result.failed_jobs == {}
    monkeypatch.setattr(JobController, "fragile", lambda self: frozenset())
    blind = simulate(load(tmp_path, text))
    assert set(blind.failed_jobs) == {"team-a/low"}


def test_explain_says_when_a_victim_s_job_fails_with_it(tmp_path: Path) -> None:
    """Queue b's pod waits for half of the node a strict Job holds: explain names the pod
    that would have to leave and that the Job's other pod would go with it -- why reclaim
    refuses."""
    text = NODE + job(
        "train", "parallelism: 2, completions: 2, backoffLimit: 0", gpus=4, duration=3600
    )
    text += job("b", "completions: 1", gpus=4, arrival=600).replace("team-a", "team-b")
    path, out = tmp_path / "w.yaml", tmp_path / "out"
    path.write_text(text)
    assert (
        runner.invoke(app, ["simulate", "--workload", str(path), "--out", str(out)]).exit_code == 0
    )
    said = runner.invoke(app, ["explain", "team-b/b-0", "--run", str(out), "--at", "700"])
    assert said.exit_code == 0, said.output
    line = next(x for x in said.output.splitlines() if "fits if these left" in x)
    assert "its Job fails with it, and its other pods go too: team-a/train-" in line
    got = json.loads(
        runner.invoke(
            app, ["explain", "team-b/b-0", "--run", str(out), "--at", "700", "-o", "json"]
        ).output
    )
    [victim] = got["if_freed"][0]["would_have_to_go"]
    assert len(victim["job_fails_with_it"]) == 1


def test_the_jobs_table_shows_failed_jobs_first_and_at_most_twenty(tmp_path: Path) -> None:
    """25 Jobs, one of them failing (listed last in the file): the table shows it among its
    20 rows and says how many more there are."""
    oks = "".join(job(f"ok-{i:02d}", "completions: 1", gpus=0, duration=10) for i in range(23))
    text = preempted_job_yaml("backoffLimit: 0").replace(NODE, NODE + oks, 1)
    path = tmp_path / "w.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["simulate", "--workload", str(path)])
    assert result.exit_code == 0, result.output
    table = result.output[result.output.index("\nJobs") :]
    assert "│ team-a/low " in table  # a row of the table
    assert "... and 5 more Jobs (all of them in summary.json)" in table


def test_per_index_limits_leave_the_job_wide_limit_unlimited(tmp_path: Path) -> None:
    """With ``backoffLimitPerIndex`` and no ``backoffLimit`` the API server sets the latter to
    the largest int32 (not the usual 6); a ``backoffLimit`` written out still counts."""
    indexed = "completionMode: Indexed, backoffLimitPerIndex: 1"
    workload = load(tmp_path, preempted_job_yaml(indexed))
    low = next(j for j in workload.jobs if j.key == "team-a/low")
    assert (low.backoff_limit, low.per_index, low.max_failed_indexes) == (2**31 - 1, 1, None)
    explicit = load(tmp_path, preempted_job_yaml(f"{indexed}, backoffLimit: 0"))
    assert next(j for j in explicit.jobs if j.key == "team-a/low").backoff_limit == 0


def low_pods(result: SimulationResult) -> dict[str, Any]:
    return {r.pod.name: r for r in result.records if r.pod.name.startswith("low-")}


def test_an_index_within_its_limit_is_retried(tmp_path: Path) -> None:
    result = preempted_job(tmp_path, "completionMode: Indexed, backoffLimitPerIndex: 1")
    assert result.failed_jobs == {}
    assert all(r.end is not None for r in low_pods(result).values())


def test_an_index_past_its_limit_fails_for_good_and_then_the_job(tmp_path: Path) -> None:
    """``backoffLimitPerIndex: 0``: the evicted pod's index fails at once and is not retried;
    its place goes to the third index at once; when that ends the Job fails (one index
    failed), as the Job controller's ``FailedIndexes``."""
    result = preempted_job(tmp_path, "completionMode: Indexed, backoffLimitPerIndex: 0")
    pods = low_pods(result)
    dropped = [r for r in pods.values() if r.failed_at is not None]
    assert len(dropped) == 1 and dropped[0].failed_at == 100.0 and dropped[0].end is None
    assert (
        "failed for good (1 eviction(s), more than its backoffLimitPerIndex 0)" in dropped[0].reason
    )
    third = pods["low-2"]
    assert third.arrival == 100.0 and third.end is not None
    when, why = result.failed_jobs["team-a/low"]
    assert when == max(r.end for r in pods.values() if r.end is not None)
    assert why == "Job team-a/low failed: 1 of its indexes failed"


def test_more_failed_indexes_than_allowed_fail_the_job_at_once(tmp_path: Path) -> None:
    """``maxFailedIndexes: 0``: one failed index fails the Job -- so the scheduler costs its
    pods as one (the urgent pod takes both) and the Job fails at 100 s."""
    spec = "completionMode: Indexed, backoffLimitPerIndex: 0, maxFailedIndexes: 0"
    result = preempted_job(tmp_path, spec)
    assert result.failed_jobs["team-a/low"] == (
        100.0,
        "Job team-a/low failed: 1 failed index(es), more than its maxFailedIndexes 0",
    )
    assert sorted(a.outcome for a in result.runs if a.name.startswith("low-")) == [
        "gang-restart",
        "preempted",
    ]
    assert "low-2" not in low_pods(result)  # never created


def test_a_failindex_rule_fails_the_index_at_once(tmp_path: Path) -> None:
    rule = (
        "\n  podFailurePolicy:\n    rules:\n      - {action: FailIndex, onPodConditions: "
        "[{type: DisruptionTarget}]}"
    )
    result = preempted_job(tmp_path, "completionMode: Indexed, backoffLimitPerIndex: 5", rule)
    dropped = [r for r in low_pods(result).values() if r.failed_at is not None]
    assert len(dropped) == 1 and "a FailIndex rule matched its eviction" in dropped[0].reason
    assert result.failed_jobs["team-a/low"][1] == "Job team-a/low failed: 1 of its indexes failed"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("backoffLimitPerIndex: 1", "spec.backoffLimitPerIndex: requires completionMode Indexed"),
        ("completionMode: Indexed, maxFailedIndexes: 1", "spec.maxFailedIndexes: requires"),
        (
            "completionMode: Indexed, backoffLimitPerIndex: 1, maxFailedIndexes: 9",
            "spec.maxFailedIndexes: must be at most completions",
        ),
    ],
)
def test_per_index_limits_the_api_server_refuses(tmp_path: Path, spec: str, field: str) -> None:
    with pytest.raises(WorkloadError, match=field):
        load(tmp_path, preempted_job_yaml(spec))


def test_a_failindex_rule_needs_per_index_limits(tmp_path: Path) -> None:
    rule = (
        "\n  podFailurePolicy:\n    rules:\n      - {action: FailIndex, onExitCodes: "
        "{operator: In, values: [137]}}"
    )
    with pytest.raises(WorkloadError, match="FailIndex action needs backoffLimitPerIndex"):
        load(tmp_path, preempted_job_yaml("completionMode: Indexed", rule))
