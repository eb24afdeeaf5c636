"""A cluster's own export as a workload (``kubectl get nodes,pods -A -o yaml``): pods that
already ended hold nothing, and pods bound to a node run there from the start."""

from __future__ import annotations

from pathlib import Path

from fairgpu.engine.engine import Engine
from fairgpu.engine.policies import DEFAULT_POLICY, policy
from fairgpu.sim.simulator import Simulation, SimulationResult
from fairgpu.sim.workloads.kube_yaml import load_kube_yaml, skipped_objects

NODES = "".join(
    f"""\
---
apiVersion: v1
kind: Node
metadata: {{name: {name}}}
status:
  allocatable: {{cpu: "32", memory: 128Gi, pods: "110", nvidia.com/gpu: "8"}}
"""
    for name in ("n1", "n2")
)


def pod(name: str, gpus: int, node: str = "", phase: str = "", duration: float = 600) -> str:
    """A pod asking ``gpus`` GPUs; bound to ``node`` and in ``phase`` as an export shows it."""
    bound = f"\n  nodeName: {node}" if node else ""
    status = f"\nstatus: {{phase: {phase}}}" if phase else ""
    return f"""\
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: a
  annotations: {{fairgpu.io/duration-seconds: "{duration}"}}
spec:{bound}
  containers: [{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: "{gpus}"}}}}}}]{status}
"""


def run(tmp_path: Path, text: str) -> tuple[SimulationResult, list[str]]:
    path = tmp_path / "export.yaml"
    path.write_text(text)
    workload = load_kube_yaml([path])
    engine = Engine(policy(DEFAULT_POLICY), 0)
    return Simulation(workload, engine).run(), skipped_objects(workload)


def test_pods_that_ended_are_left_out(tmp_path: Path) -> None:
    """A Succeeded pod "on" n1 would otherwise hold its 8 GPUs for the whole replay."""
    text = NODES + pod("done", 8, "n1", "Succeeded") + pod("failed", 8, "n2", "Failed")
    text += pod("new", 8) + pod("new2", 8)
    result, notes = run(tmp_path, text)
    assert {r.pod.name: r.start for r in result.records} == {"new": 0.0, "new2": 0.0}
    assert notes == ["skipped 2 pod(s) that already ended (status.phase Succeeded or Failed)"]


def test_a_bound_pod_runs_on_its_node_before_the_scheduler_places_others(
    tmp_path: Path,
) -> None:
    """``running`` (6 GPUs, bound to n2) and ``new`` (4 GPUs) arrive together, ``new``
    first in queue order. Bound pods are the kubelet's: ``running`` is on n2 before the
    cycle, so ``new`` goes to n1 -- not onto n2, pushing ``running`` off its own node."""
    result, _ = run(tmp_path, NODES + pod("new", 4) + pod("running", 6, "n2", "Running"))
    got = {r.pod.name: (r.node, r.start) for r in result.records}
    assert got == {"running": ("n2", 0.0), "new": ("n1", 0.0)}


def test_a_bound_pod_that_does_not_fit_waits_for_its_node(tmp_path: Path) -> None:
    """``first`` holds 6 of n1's GPUs until 600 s; ``pinned`` (4 GPUs, bound to n1) waits
    for n1 -- not for n2, which is free -- and starts there when ``first`` ends."""
    result, _ = run(tmp_path, NODES + pod("first", 6, "n1") + pod("pinned", 4, "n1"))
    got = {r.pod.name: (r.node, r.start) for r in result.records}
    assert got == {"first": ("n1", 0.0), "pinned": ("n1", 600.0)}


def test_a_bound_pod_this_scheduler_cannot_read_still_holds_its_node(tmp_path: Path) -> None:
    """``theirs`` runs on n1 (bound by another scheduler) with an annotation this one cannot
    read; it holds its 6 GPUs all the same, as the live scheduler counts it: of three 4-GPU
    pods, two start on n2 and the third waits for ``theirs`` to end."""
    theirs = pod("theirs", 6, "n1", "Running").replace(
        'annotations: {fairgpu.io/duration-seconds: "600"}',
        'annotations: {fairgpu.io/duration-seconds: "600", '
        'fairgpu.io/topology-required: "not a label!"}',
    )
    text = NODES + theirs + pod("a", 4) + pod("b", 4) + pod("c", 4)
    result, _ = run(tmp_path, text)
    got = {r.pod.name: (r.node, r.start) for r in result.records}
    assert got["theirs"] == ("n1", 0.0), got
    assert sorted((got[p][1], got[p][0]) for p in "abc")[:2] == [(0.0, "n2"), (0.0, "n2")]
    assert max(got[p][1] for p in "abc") == 600.0, got
