"""A gang confined to one rack, replayed by ``fairgpu simulate`` from Kubernetes YAML: it
starts in the rack that holds it, waits (saying why) while none does, and ``explain`` says
what its members need."""

from __future__ import annotations

import csv
from pathlib import Path

import yaml
from typer.testing import CliRunner

from fairgpu.cli import app
from tests.sim.helpers import simulated_run

runner = CliRunner()
RACK = "example.com/rack"
HOSTNAME = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"


def node(name: str, rack: str) -> str:
    """An 8-GPU node in ``rack``, as YAML."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {RACK: rack, HOSTNAME: name}},
            "status": {"allocatable": {"cpu": "96", "memory": "768Gi", "pods": "110", GPU: "8"}},
        },
        explicit_start=True,
    )


def pod(
    name: str,
    gpus: int,
    notes: dict[str, str],
    labels: dict[str, str] | None = None,
    **spec: object,
) -> str:
    """A pod of ``team-a`` asking ``gpus`` GPUs, annotated ``notes``, as YAML."""
    container = {"name": "c", "image": "c", "resources": {"limits": {GPU: str(gpus)}}}
    meta = {"name": name, "namespace": "team-a", "labels": labels or {}, "annotations": notes}
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {"schedulerName": "fairgpu", "containers": [container], **spec},
        },
        explicit_start=True,
    )


def busy(on: str) -> str:
    """A 1-GPU pod pinned to node ``on`` for 10 000 s."""
    notes = {"fairgpu.io/arrival-seconds": "0", "fairgpu.io/duration-seconds": "10000"}
    return pod(f"busy-{on}", 1, notes, nodeSelector={HOSTNAME: on})


def member(i: int) -> str:
    """Member ``i`` of pod group ``g`` (2 x 8 GPUs, arriving at 10 s), which must share a
    rack."""
    notes = {
        "fairgpu.io/min-member": "2",
        "fairgpu.io/topology-required": RACK,
        "fairgpu.io/arrival-seconds": "10",
        "fairgpu.io/duration-seconds": "600",
    }
    return pod(f"g-{i}", 8, notes, labels={"fairgpu.io/pod-group": "g"})


def starts(out: Path) -> dict[str, tuple[str, float]]:
    with (out / "runs.csv").open() as f:
        return {row["name"]: (row["node"], float(row["start"])) for row in csv.DictReader(f)}


def test_the_gang_starts_in_the_rack_that_holds_it(tmp_path: Path) -> None:
    """Racks ``a`` (a1 empty, a2 busy), ``c`` (one node), ``b`` (two empty nodes)."""
    nodes = node("a1", "rack-a") + node("a2", "rack-a") + node("c1", "rack-c")
    nodes += node("b1", "rack-b") + node("b2", "rack-b")
    out = simulated_run(tmp_path, nodes + busy("a2") + member(0) + member(1))
    got = starts(out)
    assert sorted(got[f"g-{i}"][0] for i in range(2)) == ["b1", "b2"]
    assert got["g-0"][1] == 10.0


def test_a_gang_no_rack_holds_waits_and_explain_says_what_it_needs(tmp_path: Path) -> None:
    """Racks ``a`` and ``b`` each have a busy node beside an empty one, ``c`` one node: no
    rack holds two 8-GPU members until the busy pods end at 10 000 s."""
    nodes = node("a1", "rack-a") + node("a2", "rack-a") + node("c1", "rack-c")
    nodes += node("b1", "rack-b") + node("b2", "rack-b")
    out = simulated_run(tmp_path, nodes + busy("a2") + busy("b2") + member(0) + member(1))
    assert starts(out)["g-0"][1] == 10000.0
    said = runner.invoke(app, ["explain", "team-a/g-0", "--run", str(out), "--at", "100"])
    assert said.exit_code == 0, said.output
    lines = said.output.splitlines()
    assert (
        "Nodes: fits on c1 (this pod alone; its group needs 2 places together in one "
        "example.com/rack domain)"
    ) in lines, said.output
    assert (
        "Next cycle: stays pending: pod group team-a/g: no example.com/rack domain has room "
        "for its 2 members together, even with every pod it may preempt evicted"
    ) in lines, said.output


def test_the_topology_example_keeps_each_gang_in_one_rack(tmp_path: Path) -> None:
    """``examples/topology``: the 3-worker gang (annotation) in rack-b, the only rack that
    holds it; the 2-worker gang (pod affinity) in rack-a, the tightest that holds it."""
    example = Path(__file__).resolve().parents[2] / "examples" / "topology"
    out = tmp_path / "out"
    result = runner.invoke(app, ["simulate", "--workload", str(example), "--out", str(out)])
    assert result.exit_code == 0, result.output
    racks = {name: node.rpartition("-")[0] for name, (node, _) in starts(out).items()}
    assert {racks[f"llm-pretrain-{i}"] for i in range(3)} == {"rack-b"}
    assert {racks[f"vision-{i}"] for i in range(2)} == {"rack-a"}
