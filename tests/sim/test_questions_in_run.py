"""``fairgpu explain --run`` and ``fairgpu queues --run``: the answers for a simulated run,
replayed from what ``fairgpu simulate --out`` recorded, as a user reads them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fairgpu.cli import app
from fairgpu.engine.engine import Engine
from fairgpu.kube.explain import _order
from fairgpu.kube.replay import busiest_instant, find_pod
from fairgpu.sim.rerun import RunSpec, load_run
from tests.builders import cluster, k8s_pod, node_info
from tests.sim.helpers import simulated_run

runner = CliRunner()

NODE = """\
apiVersion: v1
kind: Node
metadata:
  name: gpu-0
  labels: {nvidia.com/gpu.count: "8", nvidia.com/gpu.memory: "81920"}
status:
  allocatable: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "8"}
"""


def pod(
    name: str,
    arrival: float,
    duration: float,
    gpus: int = 8,
    namespace: str = "team-a",
    model: str | None = None,
) -> str:
    """A pod (8 GPUs of namespace ``team-a`` by default) with a declared arrival and run
    time; ``model`` pins it to nodes labelled ``gpu: <model>``."""
    selector = f"\n  nodeSelector: {{gpu: {model}}}" if model else ""
    return f"""\
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {namespace}
  annotations:
    fairgpu.io/arrival-seconds: "{arrival}"
    fairgpu.io/duration-seconds: "{duration}"
spec:
  schedulerName: fairgpu{selector}
  containers:
    - name: main
      image: trainer
      resources:
        limits: {{nvidia.com/gpu: "{gpus}"}}
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One 8-GPU node; ``first`` holds it from 0 s to 600 s, ``second`` arrives at 100 s
    and waits for it (same queue and priority: nothing to preempt), ``third`` at 700 s."""
    tmp = tmp_path_factory.mktemp("run")
    workload = tmp / "workload.yaml"
    workload.write_text(
        NODE + pod("first", 0, 600) + pod("second", 100, 300) + pod("third", 2000, 60)
    )
    out = tmp / "out"
    result = runner.invoke(app, ["simulate", "--workload", str(workload), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"why did a pod wait? fairgpu explain NAMESPACE/POD --run {out}" in result.output
    return out


def test_the_run_records_how_to_replay_it(run_dir: Path) -> None:
    spec = load_run(run_dir)
    assert spec.workload.endswith("workload.yaml") and Path(spec.workload).is_absolute()
    assert spec == RunSpec(workload=spec.workload, seed=0, ordering="fair")


def test_explain_says_why_a_pod_waits_and_when_it_started(run_dir: Path) -> None:
    result = runner.invoke(app, ["explain", "team-a/second", "--run", str(run_dir), "--at", "300"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"Simulated run {run_dir} at t=300 s:"
    assert lines[1] == "Pod team-a/second (queue team-a, user team-a) is pending."
    assert "Nodes: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu." in lines
    assert any(line.startswith("  gpu-0: fits if these left: team-a/first") for line in lines)
    assert "Predicted start: t=600 s (in 5m)" in result.output
    assert lines[-1] == "In the run: started at t=600 s (5m later)"


def test_explain_defaults_to_midway_through_the_first_wait(run_dir: Path) -> None:
    assert find_pod(run_dir, "team-a/second").default_instant() == 350.0
    result = runner.invoke(app, ["explain", "team-a/second", "--run", str(run_dir), "-o", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["at"] == 350.0 and report["state"] == "pending"
    assert report["predicted_start"] == "t=600 s" and report["started_in_run"] == "t=600 s"
    assert report["queue_state"]["allocated_gpus"] == 8


def test_explain_a_running_a_finished_and_a_future_pod(run_dir: Path) -> None:
    running = runner.invoke(app, ["explain", "team-a/second", "--run", str(run_dir), "--at", "700"])
    assert "is bound to node gpu-0; phase Running." in running.output
    finished = runner.invoke(app, ["explain", "team-a/first", "--run", str(run_dir), "--at", "700"])
    assert "Pod team-a/first had finished by then." in finished.output
    early = runner.invoke(app, ["explain", "team-a/third", "--run", str(run_dir), "--at", "700"])
    assert early.exit_code == 2
    assert "pod team-a/third arrives at t=2000 s, after --at 700" in early.output


def test_queues_at_the_busiest_instant(run_dir: Path) -> None:
    assert busiest_instant(run_dir) == 100.0
    result = runner.invoke(app, ["queues", "--run", str(run_dir)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"Simulated run {run_dir} at t=100 s:"
    row = lines[2].split()
    assert row[0] == "team-a" and row[3] == "8" and row[4] == "1"
    assert lines[2].endswith("t=600 s")  # its one pending pod starts when first ends


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["explain", "team-a/nobody"], "pod team-a/nobody is not in"),
        (["explain", "team-a/second", "--at", "-5"], "--at must be a number"),
        (["queues", "-o", "yaml"], "--output must be 'text' or 'json'"),
    ],
)
def test_bad_questions_get_one_message(run_dir: Path, args: list[str], needle: str) -> None:
    result = runner.invoke(app, [*args, "--run", str(run_dir)])
    assert result.exit_code == 2 and needle in result.output


def test_a_directory_without_a_recorded_run(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"parameters": {"workload": "x"}}))
    (tmp_path / "pods.csv").write_text("namespace,name,arrival\nns,p,0\n")
    result = runner.invoke(app, ["explain", "ns/p", "--run", str(tmp_path)])
    assert result.exit_code == 2
    assert "parameters.workload_source is missing" in result.output


def test_a_replay_makes_the_recorded_runs_decisions(tmp_path: Path) -> None:
    """The answers are only true if replaying the recorded parameters gives the recorded run:
    every pod starts at the same time on the same node (built-in workload with gangs,
    fractional GPUs and preemptions)."""
    import csv

    from fairgpu.sim.rerun import replay

    out = tmp_path / "out"
    args = ["simulate", "--jobs", "80", "--seed", "3", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["preemptions"] > 0  # the replay has to reproduce those too
    recorded = {
        f"{r['namespace']}/{r['name']}": (round(float(r["start"] or -1), 3), r["node"])
        for r in csv.DictReader((out / "pods.csv").open())
    }
    sim = replay(load_run(out), summary["simulated_seconds"])
    again = {
        r.pod.key: (round(-1 if r.start is None else r.start, 3), r.node)
        for r in sim.records.values()
    }
    assert again == recorded


def test_explain_judges_by_the_pool_aware_fair_share(tmp_path: Path) -> None:
    """Queue ``train`` can use only the A100 node, ``serve`` only the L4 node. Over the whole
    cluster ``train`` would be owed 12 of 16 GPUs (``serve`` wants 4); its work can use 8, and
    8 is the share the engine's reclaim rule judges it by -- so explain says 8, at its share."""
    nodes = "".join(
        NODE.replace("gpu-0", name).replace("labels: {", f"labels: {{gpu: {model}, ")
        + ("---\n" if name == "a100" else "")
        for name, model in (("a100", "a100"), ("l4", "l4"))
    )
    workload = tmp_path / "pools.yaml"
    workload.write_text(
        nodes
        + pod("t1", 0, 1000, namespace="train", model="a100")
        + pod("t2", 0, 1000, namespace="train", model="a100")
        + pod("s1", 0, 1000, gpus=4, namespace="serve", model="l4")
    )
    out = tmp_path / "out"
    result = runner.invoke(app, ["simulate", "--workload", str(workload), "--out", str(out)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["explain", "train/t2", "--run", str(out), "--at", "500"])
    assert result.exit_code == 0, result.output
    assert "Queue train: weight 1, holds 8 GPUs, fair share 8 GPUs (at its fair share)" in (
        result.output
    )


def _run_with_config(tmp_path: Path, workload: str, config: str) -> Path:
    """``fairgpu simulate --out`` of the YAML ``workload`` under the tenancy ``config``; the
    run's output directory."""
    (tmp_path / "w.yaml").write_text(workload)
    (tmp_path / "tenancy.yaml").write_text(config)
    out = tmp_path / "out"
    args = ["simulate", "--workload", str(tmp_path / "w.yaml"), "--out", str(out)]
    result = runner.invoke(app, [*args, "--config", str(tmp_path / "tenancy.yaml")])
    assert result.exit_code == 0, result.output
    return out


#: Queues ``train`` and ``serve`` of department ``d`` (which the config names first).
D_QUEUES = (
    "  - {name: train, parent: d, namespaces: [train]}\n"
    "  - {name: serve, parent: d, namespaces: [serve]}\n"
)


def test_explain_names_the_department_a_queue_shares_within(tmp_path: Path) -> None:
    """``train`` and ``serve`` share department ``d``: explain names it beside the queue, and
    the fair share it prints is the one departments share first by."""
    out = _run_with_config(
        tmp_path,
        NODE
        + pod("t1", 0, 1000, gpus=8, namespace="train")
        + pod("t2", 0, 1000, namespace="train"),
        "queues:\n  - {name: d}\n" + D_QUEUES,
    )
    result = runner.invoke(app, ["explain", "train/t2", "--run", str(out), "--at", "500"])
    assert result.exit_code == 0, result.output
    assert "Queue train (department d): weight 1, holds 8 GPUs" in result.output


def test_what_if_in_a_run(run_dir: Path, tmp_path: Path) -> None:
    """At 300 s ``first`` holds the node until 600 s and ``second`` has waited for it since
    100 s: a 4-GPU pod of another queue would wait (killing ``first`` loses more than
    waiting) and start when ``second`` has run too, at 900 s. At 950 s the node is free."""
    job = tmp_path / "job.yaml"
    job.write_text(pod("probe", 0, 60, gpus=4, namespace="team-b").removeprefix("---\n"))
    args = ["what-if", "-f", str(job), "--run", str(run_dir), "--at", "300"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("team-b/probe (queue team-b, user team-b): would stay pending: ")
    assert "waiting is cheaper" in lines[0]
    assert lines[1].startswith("  Predicted start: t=900 s (in 10m)")
    later = runner.invoke(app, ["what-if", "-f", str(job), "--run", str(run_dir), "--at", "950"])
    assert "team-b/probe (queue team-b, user team-b): would start on gpu-0 now" in later.output


def test_what_if_says_a_pod_that_fits_no_empty_node_will_not_start(
    run_dir: Path, tmp_path: Path
) -> None:
    """A pod pinned to a GPU model no node has fits nowhere even once every pod has ended:
    ``what-if`` says so instead of blaming run times it does not know; a pod beside it that
    fits the node when empty still gets its forecast."""
    job = tmp_path / "job.yaml"
    pinned = pod("pinned", 0, 60, gpus=4, namespace="team-b", model="H100")
    job.write_text(pinned + pod("probe", 0, 60, gpus=4, namespace="team-b"))
    args = ["what-if", "-f", str(job), "--run", str(run_dir), "--at", "300"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("team-b/pinned (queue team-b, user team-b): would stay pending: ")
    assert "didn't match Pod's node affinity/selector" in lines[0]
    assert lines[1] == "  Predicted start: unknown: it fits on no node, even an empty one"
    assert lines[3].startswith("  Predicted start: t=900 s (in 10m)")
    rows = json.loads(runner.invoke(app, [*args, "-o", "json"]).output)
    assert [r["fits_on_empty_nodes"] for r in rows] == [[], ["gpu-0"]]
    assert rows[0]["predicted_start"] is None


def test_explain_in_a_run_names_the_field_of_a_malformed_pod(tmp_path: Path) -> None:
    """The run stopped trying a pod whose arrival cannot be read; explain still finds it
    pending, as the live cache keeps such a pod, and names the field (it said the pod was
    not pending for this scheduler)."""
    workload = tmp_path / "workload.yaml"
    bad = pod("bad", 0, 60).replace('arrival-seconds: "0"', 'arrival-seconds: "-5"')
    workload.write_text(NODE + bad + pod("fine", 0, 60))
    out = tmp_path / "out"
    result = runner.invoke(app, ["simulate", "--workload", str(workload), "--out", str(out)])
    assert result.exit_code == 0, result.output
    said = runner.invoke(app, ["explain", "team-a/bad", "--run", str(out), "--at", "10"])
    assert said.exit_code == 0, said.output
    lines = said.output.splitlines()
    assert lines[1] == (
        "Pod team-a/bad (queue team-a, user team-a) is pending and will stay so: Pod "
        "team-a/bad: field metadata.annotations[fairgpu.io/arrival-seconds]: '-5' is not a "
        "non-negative number of seconds"
    ), said.output


def test_explain_in_a_run_finds_a_pod_of_an_unknown_queue(tmp_path: Path) -> None:
    """The run stopped trying a pod whose queue label names no queue; explain still finds it
    pending and says it has no queue (it said the pod was not pending for this scheduler),
    and the summary owes that queue no fair share."""
    workload = tmp_path / "workload.yaml"
    lost = pod("lost", 0, 60).replace(
        "  annotations:", "  labels: {fairgpu.io/queue: nope}\n  annotations:"
    )
    workload.write_text(NODE + lost)
    config = tmp_path / "tenancy.yaml"
    config.write_text("queues:\n  - {name: team-a, namespaces: [team-a]}\n")
    out = tmp_path / "out"
    args = ["simulate", "--workload", str(workload), "--config", str(config), "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    # Never tried, it is owed nothing: no fair share for a queue that does not exist.
    tenants = json.loads((out / "summary.json").read_text())["tenants"]
    assert tenants["nope"].get("fair_share_pct") is None
    said = runner.invoke(app, ["explain", "team-a/lost", "--run", str(out), "--at", "10"])
    assert said.exit_code == 0, said.output
    assert said.output.splitlines()[1] == (
        "Pod team-a/lost is pending and not tried: it has no queue: queue 'nope' (label "
        "fairgpu.io/queue) does not exist; known queues: team-a"
    ), said.output


def test_what_if_answers_a_pod_that_could_not_be_made_with_why(
    run_dir: Path, tmp_path: Path
) -> None:
    """A pod named as one the run has (the API server would refuse it) and a malformed one
    are answered with what is wrong with them -- the first was 'not handed to the engine',
    the second got a note that its schedulerName was not fairgpu's."""
    job = tmp_path / "job.yaml"
    broken = pod("broken", 0, 60, namespace="team-b").replace(
        'arrival-seconds: "0"', 'arrival-seconds: "-5"'
    )
    job.write_text(pod("first", 0, 60) + broken)
    args = ["what-if", "-f", str(job), "--run", str(run_dir), "--at", "300"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "team-a/first (queue team-a, user team-a): would stay pending: Pod team-a/first: a "
        "pod of that name exists already (it would not be made)",
        "team-b/broken (queue team-b, user team-b): would stay pending: Pod team-b/broken: "
        "field metadata.annotations[fairgpu.io/arrival-seconds]: '-5' is not a non-negative "
        "number of seconds",
    ]


def test_queues_count_a_queues_pods_preempted_in_the_last_hour(tmp_path: Path) -> None:
    """team-a fills the node with four long 2-GPU pods; team-b (below its share) reclaims one
    at 100 s. ``queues`` counts that preemption for team-a for an hour, then no more."""
    workload = tmp_path / "workload.yaml"
    team_a = "".join(pod(f"long-{i}", 0, 20000, gpus=2) for i in range(4))
    workload.write_text(NODE + team_a + pod("claim", 100, 600, gpus=2, namespace="team-b"))
    out = tmp_path / "out"
    result = runner.invoke(app, ["simulate", "--workload", str(workload), "--out", str(out)])
    assert result.exit_code == 0, result.output
    runs = (out / "runs.csv").read_text()
    assert "preempted" in runs  # the run did reclaim

    def counts(at: float) -> dict[str, int | None]:
        got = runner.invoke(app, ["queues", "--run", str(out), "--at", str(at), "-o", "json"])
        assert got.exit_code == 0, got.output
        rows = json.loads(got.output)["queues"]
        return {r["queue"]: r["preemptions_last_hour"] for r in rows}

    assert counts(1000) == {"team-a": 1, "team-b": 0}
    assert counts(5000) == {"team-a": 0, "team-b": 0}
    text = runner.invoke(app, ["queues", "--run", str(out), "--at", "1000"]).output
    header, team_a = text.splitlines()[1], text.splitlines()[2]
    assert "PREEMPTED-1H" in header
    assert team_a.split()[header.split().index("PREEMPTED-1H")] == "1"


def test_the_forecast_budget_is_an_option(run_dir: Path) -> None:
    """``--forecast-budget`` bounds the start-time forecast: one too short to simulate
    anything says so instead of a time; zero is refused."""
    args = ["explain", "team-a/second", "--run", str(run_dir), "--at", "200"]
    assert "Predicted start: t=600 s" in runner.invoke(app, args).output
    short = runner.invoke(app, [*args, "--forecast-budget", "1e-9"])
    assert short.exit_code == 0, short.output
    assert "Predicted start: unknown: the forecast ran out of time" in short.output
    queues = runner.invoke(app, ["queues", "--run", str(run_dir), "--forecast-budget", "1e-9"])
    assert queues.output.splitlines()[2].endswith("unknown")
    refused = runner.invoke(app, [*args, "--forecast-budget", "0"])
    assert refused.exit_code == 2 and "--forecast-budget must be > 0 seconds" in refused.output


def test_explain_says_when_a_pod_may_go_alone_but_not_with_its_neighbours(
    tmp_path: Path,
) -> None:
    """``team-c`` (weight 3, owed 8 GPUs) waits for 8 GPUs at 105 s. On ``gpu-0`` it would
    need ``a1`` (queue ``team-a``, far above its share: allowed alone) and ``b1`` (queue
    ``team-b``, at its share: refused) to leave together; ``gpu-1``'s pod is too young. The
    line for ``a1`` says the move is refused because of what must go with it, not as if
    ``team-a``'s own share were the reason."""
    pods = [
        pod("a1", 0, 5000, gpus=4),
        pod("b1", 0, 5000, gpus=4, namespace="team-b"),
        pod("a2", 50, 5000),
        pod("c1", 100, 1000, namespace="team-c"),
    ]
    weights = "queues:\n  - {name: team-a}\n  - {name: team-b}\n  - {name: team-c, weight: 3}\n"
    lines = _if_freed(tmp_path, pods, weights, "team-c/c1", 105)
    a1, b1 = lines["gpu-0"].split("team-b/b1")
    assert (
        "team-a/a1 (queue team-a, priority 0; no preemption: the reclaim rule refuses this "
        "node's move as a whole: queue 'team-b' is not above its fair share" in a1
    )
    # team-c holds nothing of its share: no band shelters team-b, which is simply at its own.
    assert "no preemption: queue team-b is not above its fair share (it holds 25%" in b1


def test_explain_names_the_time_rule_that_holds_a_victim_back(tmp_path: Path) -> None:
    """Pods a queue may reclaim from are held back by one of three time rules, and explain
    names the one that applies. ``b2`` (queue ``team-b``, which may not reclaim) waits for
    ``gpu-0``; the event at 400 s finds it waiting past ``reserveAfterSeconds``, so it gets a
    reservation and starts from it at 1000 s, protected for its declared 5000 s. At 1600 s
    ``team-c`` waits for a node: ``b2`` is protected; ``af`` is allowed alone but the move
    would put ``team-c`` above its share."""
    pods = [
        pod("a1", 0, 1000),
        pod("af", 0, 9000),
        pod("b2", 10, 5000, namespace="team-b"),
        pod("tick", 400, 10, gpus=0),
        pod("c1", 1500, 600, namespace="team-c"),
    ]
    no_reclaim = "queues:\n  - {name: team-b, preemption: {reclaim: false}}\n"
    lines = _if_freed(tmp_path / "protected", pods, no_reclaim, "team-c/c1", 1600)
    assert (
        "team-b/b2 (queue team-b, priority 0; no preemption: it started from a reservation "
        "and is protected from preemption until t=6000 s" in lines["gpu-0"]
    )
    assert "the reclaim rule refuses this node's move as a whole" in lines["gpu-1"]
    # ``team-b`` reclaims ``gpu-0`` from ``team-a`` at 100 s (``a1`` ran its minimum 60 s);
    # at 300 s its GPUs are cooling down when ``team-c`` wants them.
    pods = [
        pod("a1", 0, 5000, model="m0"),
        pod("af", 0, 9000, model="m1"),
        pod("b1", 100, 5000, namespace="team-b", model="m0"),
        pod("c1", 200, 600, namespace="team-c", model="m0"),
    ]
    lines = _if_freed(tmp_path / "cooling", pods, None, "team-c/c1", 300, models=True)
    assert (
        "team-b/b1 (queue team-b, priority 0; no preemption: it sits on GPUs that changed "
        "tenant at t=100 s, within reclaimCooldownSeconds (600))" in lines["gpu-0"]
    )


def _if_freed(
    tmp: Path, pods: list[str], config: str | None, key: str, at: float, models: bool = False
) -> dict[str, str]:
    """Simulate ``pods`` on two 8-GPU nodes (labelled ``gpu: m0``/``m1`` with ``models``)
    with tenancy ``config``, then explain ``key`` at ``at``: its "fits if these left" line
    per node."""
    tmp.mkdir(parents=True, exist_ok=True)
    nodes = [NODE, NODE.replace("gpu-0", "gpu-1")]
    if models:
        nodes = [n.replace("labels: {", f"labels: {{gpu: m{i}, ") for i, n in enumerate(nodes)]
    workload = tmp / "w.yaml"
    workload.write_text("---\n".join(nodes) + "".join(pods))
    out = tmp / "out"
    args = ["simulate", "--workload", str(workload), "--out", str(out)]
    if config is not None:
        (tmp / "tenancy.yaml").write_text(config)
        args += ["--config", str(tmp / "tenancy.yaml")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["explain", key, "--run", str(out), "--at", str(at)])
    assert result.exit_code == 0, result.output
    lines = [x.strip() for x in result.output.splitlines() if x.strip().startswith("gpu-")]
    return {x.split(":")[0]: x for x in lines}


def test_explain_judges_a_gang_members_move_with_the_members_its_group_needs() -> None:
    """Queues a, b, c share two 8-GPU nodes; a holds n0 (two 4-GPU pods), b holds n1. c's
    gang of two 4-GPU members is owed a third of 16 GPUs: one member alone would fit in
    that, the group does not. The cycle judges each member with its sibling (the reclaim
    rule's end state), and so does explain: taking a's pods on n0 is refused for c's
    member, not allowed as if the member ran alone."""
    engine = Engine()
    state = cluster(node_info("n0", gpus=8), node_info("n1", gpus=8))
    for i in range(2):
        for q, n in (("a", 0), ("b", 1)):
            p = k8s_pod(f"{q}{i}", q, gpus="4", cpu="1")
            state.assign(p, n, tuple(range(4 * i, 4 * i + 4)), 0.0).bound = True
    gang = [k8s_pod(f"c{i}", "c", gpus="4", cpu="1", group="g", min_member=2) for i in range(2)]
    engine.register_pod_groups({"c/g": 2})
    more = [k8s_pod(f"{q}9", q, gpus="4", cpu="1") for q in "ab"]
    _, rules = _order(engine, state, [*gang, *more], gang[0], 1000.0)
    victims = [state.pods["a/a0"]]
    why = rules.veto(victims, frozenset())
    assert why is not None and "would exceed its fair share after the move" in why, why
    # The cycle refuses the same move for the same reason.
    res = engine.cycle(state, [*gang, *more], 1000.0)
    assert not res.evictions
    reason = next(u.reason for u in res.unschedulable if u.pod.name == "c0")
    assert "would exceed its fair share after the move" in reason, reason


def test_explain_names_a_reclaim_that_would_reverse_another() -> None:
    """Queue b reclaimed node n0 from queue a at 900 s and holds all of it (8 GPUs, its fair
    share 4). At 1 000 s a's pod may reclaim from b by the shares, but taking b's pods on n0
    back within the cooldown would reverse that reclaim: explain names that rule (b's GPUs
    did not change tenant through a reclaim: the cooling rule does not apply)."""
    engine = Engine()
    state = cluster(node_info("n0", gpus=8))
    for i in range(2):
        b = k8s_pod(f"b{i}", "b", gpus="4", cpu="1")
        state.assign(b, 0, tuple(range(4 * i, 4 * i + 4)), 0.0).bound = True
    engine.state.reclaimed[("n0", "b", "a")] = 900.0
    a1 = k8s_pod("a1", "a", gpus="4", cpu="1")
    _, rules = _order(engine, state, [a1], a1, 1000.0)
    assert rules.why_not("b/b0") == (
        "queue b reclaimed node n0 from queue a at t=900 s; taking it back within "
        "reclaimCooldownSeconds (600) would reverse that"
    )


JOB_RUN = """\
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 100
---
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: team-a
  annotations: {fairgpu.io/duration-seconds: "600"}
spec:
  completions: 3
  parallelism: 1
  template:
    spec:
      schedulerName: fairgpu
      priorityClassName: high
      restartPolicy: Never
      containers:
        - name: main
          image: trainer
          resources:
            limits: {nvidia.com/gpu: "8"}
"""


def test_answers_in_a_run_follow_a_job_to_its_end(tmp_path: Path) -> None:
    """A Job of three 600 s completions, one at a time, at priority 100, and ``eval``
    (priority 0, same queue and user) from 100 s: at 300 s the Job's controller has made one
    pod, yet ``eval`` is predicted to start when the whole Job ends (1 800 s, as it did),
    ``explain`` on the Job's pod says so, and ``queues`` counts the 2 pods to come."""
    out = simulated_run(tmp_path, NODE + JOB_RUN + pod("eval", 100, 60))
    at = ["--run", str(out), "--at", "300"]

    waiting = runner.invoke(app, ["explain", "team-a/eval", *at])
    assert "Predicted start: t=1800 s (in 25m)" in waiting.output, waiting.output
    assert "In the run: started at t=1800 s" in waiting.output

    running = runner.invoke(app, ["explain", "team-a/train-0", *at])
    assert "is bound to node gpu-0; phase Running." in running.output, running.output
    assert (
        "Job team-a/train: 0 of 3 completions succeeded, 1 pod(s) in the cluster, 2 still to "
        "be created; predicted to end t=1800 s (in 25m), if pods run as declared"
    ) in running.output

    rows = json.loads(runner.invoke(app, ["queues", *at, "-o", "json"]).output)["queues"]
    team = next(r for r in rows if r["queue"] == "team-a")
    assert team["pods_to_create"] == 2 and team["drains_at"] == "t=1800 s", team

    listed = runner.invoke(app, ["jobs", *at])
    assert listed.output.splitlines()[1:] == [
        "JOB            QUEUE    SUCCEEDED   RUNNING   PENDING   TO-CREATE   ENDS",
        "team-a/train   team-a   0/3         1         0         2           t=1800 s",
    ], listed.output
    later = json.loads(
        runner.invoke(app, ["jobs", "--run", str(out), "--at", "1000", "-o", "json"]).output
    )
    (row,) = later["jobs"]
    assert (row["succeeded"], row["running"], row["pods_to_create"]) == (1, 1, 1)
    assert row["predicted_end"] == "t=1800 s"
    done = runner.invoke(app, ["jobs", "--run", str(out), "--at", "1900"])
    assert done.output.splitlines()[1] == "No Job is running or waiting to run."
    other = runner.invoke(app, ["jobs", *at, "-n", "team-b"])
    assert other.output.splitlines()[1] == "No Job is running or waiting to run."

    more = tmp_path / "more.yaml"
    more.write_text(pod("later", 0, 60))
    asked = runner.invoke(app, ["what-if", "-f", str(more), *at])
    assert "Predicted start: t=1860 s" in asked.output, asked.output  # after the Job, then eval


def test_a_pod_that_fits_nowhere_is_not_said_to_wait_on_run_times(tmp_path: Path) -> None:
    """Its predicted start is unknown because no node takes it even empty -- not because of
    run times nobody declared (every pod here declares one)."""
    workload = tmp_path / "workload.yaml"
    workload.write_text(NODE + pod("first", 0, 600) + pod("lost", 100, 60, model="H100"))
    out = tmp_path / "out"
    result = runner.invoke(app, ["simulate", "--workload", str(workload), "--out", str(out)])
    assert result.exit_code == 0, result.output
    said = runner.invoke(app, ["explain", "team-a/lost", "--run", str(out), "--at", "300"])
    assert "Even on empty nodes: 0/1 nodes are available" in said.output, said.output
    assert (
        "Predicted start: unknown: it fits on no node, even an empty one "
        "(see 'Even on empty nodes')"
    ) in said.output


def test_a_queue_whose_pods_fit_no_node_is_owed_nothing(tmp_path: Path) -> None:
    """The only pods waiting ask a GPU model no node has: their queue's pool-aware share is
    0 GPUs, not a share of a cluster none of its pods can use."""
    workload = tmp_path / "workload.yaml"
    workload.write_text(NODE + pod("lost", 0, 60, model="H100") + pod("lost2", 0, 60, model="H100"))
    out = tmp_path / "out"
    result = runner.invoke(app, ["simulate", "--workload", str(workload), "--out", str(out)])
    assert result.exit_code == 0, result.output
    said = runner.invoke(app, ["explain", "team-a/lost", "--run", str(out), "--at", "0"])
    assert "Queue team-a: weight 1, holds 0 GPUs, fair share 0 GPUs" in said.output, said.output


def test_answers_in_a_run_say_a_job_misses_its_deadline(tmp_path: Path) -> None:
    """The same Job with activeDeadlineSeconds 1500: its third pod still runs then, so the
    run fails it at 1 500 s. Asked at 300 s, ``explain`` and ``jobs`` predict that failure
    (with 2 of 3 completions) instead of an end, and ``eval`` starts at 1 500 s."""
    timed = JOB_RUN.replace(
        "  parallelism: 1\n", "  parallelism: 1\n  activeDeadlineSeconds: 1500\n"
    )
    out = simulated_run(tmp_path, NODE + timed + pod("eval", 100, 60))
    at = ["--run", str(out), "--at", "300"]

    running = runner.invoke(app, ["explain", "team-a/train-0", *at])
    assert (
        "predicted to FAIL t=1500 s (in 20m), 2 of 3 completions succeeded by then: it was "
        "still active 1500 s after it started (activeDeadlineSeconds; DeadlineExceeded)"
    ) in running.output, running.output
    waiting = runner.invoke(app, ["explain", "team-a/eval", *at])
    assert "Predicted start: t=1500 s (in 20m)" in waiting.output, waiting.output
    assert "In the run: started at t=1500 s" in waiting.output

    listed = runner.invoke(app, ["jobs", *at])
    row_line = listed.output.splitlines()[2]
    assert row_line.endswith("   2           FAILS t=1500 s (DeadlineExceeded)"), row_line
    (row,) = json.loads(runner.invoke(app, ["jobs", *at, "-o", "json"]).output)["jobs"]
    assert row["predicted_end"] is None and row["deadline"] == "t=1500 s"
    assert row["predicted_failure"]["reason"] == "DeadlineExceeded"


def test_queues_name_each_queue_s_department(tmp_path: Path) -> None:
    """With departments, ``queues`` says which one each queue is in: its weight counts only
    there."""
    out = _run_with_config(
        tmp_path,
        NODE
        + pod("a", 0, 600, namespace="team-a")
        + pod("b", 0, 600, namespace="team-b")
        + pod("c", 0, 600, namespace="team-c"),
        "queues:\n"
        "  - {name: research, weight: 2}\n"
        "  - {name: team-a, parent: research, namespaces: [team-a]}\n"
        "  - {name: team-b, parent: research, namespaces: [team-b]}\n"
        "  - {name: team-c, namespaces: [team-c]}\n",
    )
    result = runner.invoke(app, ["queues", "--run", str(out), "--at", "100"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1].split()[:3] == ["QUEUE", "DEPARTMENT", "WEIGHT"]
    rows = {line.split()[0]: line.split()[1:3] for line in lines[2:]}
    assert rows == {"team-a": ["research", "1"], "team-b": ["research", "1"], "team-c": ["-", "1"]}


def test_a_department_limit_holds_its_queues_and_the_answers_say_so(tmp_path: Path) -> None:
    """Department ``d`` may hold 4 GPUs: ``t1`` and ``t2`` (2 GPUs each) run on the 8-GPU
    node, ``t3`` waits beside 4 free GPUs until one ends; explain says why, queues shows the
    limit, and the report's fair share of ``train`` is 4 GPUs while all three wait or run
    (not the 6 they ask), 2 once only ``t3`` is left: 41.7% of the node over the run."""
    out = _run_with_config(
        tmp_path,
        NODE
        + pod("t1", 0, 1000, gpus=2, namespace="train")
        + pod("t2", 0, 1000, gpus=2, namespace="train")
        + pod("t3", 0, 500, gpus=2, namespace="train"),
        "queues:\n  - {name: d, limit: {gpu: 4}}\n" + D_QUEUES,
    )
    result = runner.invoke(app, ["explain", "train/t3", "--run", str(out), "--at", "500"])
    assert result.exit_code == 0, result.output
    assert (
        "department 'd' would hold 6 GPU, above its limit of 4 GPU (its queues together)"
        in result.output
    )
    assert "department d may hold 4 GPUs together (holds 4)" in result.output
    table = runner.invoke(app, ["queues", "--run", str(out), "--at", "500"]).output
    header, serve, train = table.splitlines()[1:4]  # after the line naming the run
    assert header.split()[:5] == ["QUEUE", "DEPARTMENT", "DEPT-MAX", "WEIGHT", "FAIR-SHARE"]
    assert serve.split()[:5] == ["serve", "d", "4", "1", "0"]
    assert train.split()[:5] == ["train", "d", "4", "1", "4"]
    summary = json.loads((out / "summary.json").read_text())
    # (1000 s x 4 GPUs + 500 s x 2 GPUs) / 1500 s / 8 GPUs.
    assert summary["tenants"]["train"]["fair_share_pct"] == pytest.approx(41.67, abs=0.1)
    with (out / "runs.csv").open() as f:
        starts = {r["name"]: float(r["start"]) for r in csv.DictReader(f)}
    assert starts["t3"] == pytest.approx(1000.0)
