"""Kubernetes YAML workloads: what is read, how it is expanded, and how bad input is reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairgpu.sim.workloads.kube_yaml import WorkloadError, load_kube_yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workloads"

NODE = """
apiVersion: v1
kind: Node
metadata: {name: n0, labels: {nvidia.com/gpu.product: A100}}
status: {allocatable: {cpu: "8", memory: 64Gi, pods: "10", nvidia.com/gpu: "2"}}
"""


def _write(tmp_path: Path, text: str, name: str = "w.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_example_directory_loads() -> None:
    workload = load_kube_yaml([EXAMPLES])
    assert {n.name for n in workload.nodes} == {"train-0", "train-1", "serve-0", "hybrid-0"}
    names = [a.pod.name for a in workload.arrivals]
    assert [n for n in names if n.startswith("chat-")] == [f"chat-{i}" for i in range(6)]
    assert workload.pod_groups == {"team-a/llm-pretrain": 2}
    chat = next(a for a in workload.arrivals if a.pod.name == "chat-0")
    assert chat.arrival == 30.0 and chat.duration == 7200.0
    assert chat.pod.gpu.milli == 300 and chat.pod.gpu.memory_mib == 6144
    assert chat.pod.owner == "deployment/chat"


def test_priority_class_resolves_priority(tmp_path: Path) -> None:
    text = (
        NODE
        + """
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: urgent}
value: 5000
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: a}
spec:
  priorityClassName: urgent
  containers: [{name: c, resources: {requests: {cpu: 100m}}}]
"""
    )
    workload = load_kube_yaml([_write(tmp_path, text)])
    assert workload.arrivals[0].pod.priority == 5000


def _pod_doc(name: str, **spec: object) -> str:
    fields = "".join(f"\n  {k}: {v}" for k, v in spec.items())
    return f"""
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: a}}
spec:{fields}
  containers: [{{name: c, resources: {{requests: {{cpu: 100m}}}}}}]
"""


def test_priority_is_admitted_as_the_api_server_admits_it(tmp_path: Path) -> None:
    classes = """
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: batch}
value: 100
globalDefault: true
preemptionPolicy: Never
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: urgent}
value: 5000
"""
    pods = [
        _pod_doc("plain"),  # the global default class: its value and its Never
        _pod_doc("urgent", priorityClassName="urgent"),
        _pod_doc("node", priorityClassName="system-node-critical"),  # always defined
        _pod_doc("missing", priorityClassName="nope"),  # the API server refuses it
        _pod_doc("contradicts", priorityClassName="urgent", priority=7),
    ]
    workload = load_kube_yaml([_write(tmp_path, NODE + classes + "".join(pods))])
    got = {a.pod.name: a.pod for a in workload.arrivals}
    assert (got["plain"].priority, got["plain"].preemption_policy) == (100, "Never")
    assert (got["urgent"].priority, got["urgent"].preemption_policy) == (
        5000,
        "PreemptLowerPriority",
    )
    assert got["node"].priority == 2_000_001_000 and got["node"].error is None
    assert "spec.priorityClassName" in (got["missing"].error or "")
    assert "spec.priority" in (got["contradicts"].error or "")


def test_workload_type_label_derives_pool_placement(tmp_path: Path) -> None:
    text = """
apiVersion: v1
kind: Pod
metadata:
  name: t
  labels: {fairgpu.io/workload-type: training, fairgpu.io/gpu-model: A100}
spec:
  containers: [{name: c, resources: {limits: {nvidia.com/gpu: "1"}}}]
"""
    pod = load_kube_yaml([_write(tmp_path, text)]).arrivals[0].pod
    assert pod.required_terms is not None
    keys = {(t.key, t.value) for t in pod.tolerations}
    assert ("example.com/node.usage", "training") in keys
    assert ("example.com/node.usage", "hybrid") in keys
    assert ("nvidia.com/gpu.product", "A100") in keys


def test_malformed_pod_is_kept_with_its_error(tmp_path: Path) -> None:
    text = (
        NODE
        + """
---
apiVersion: v1
kind: Pod
metadata: {name: bad, namespace: a}
spec:
  containers: [{name: c, resources: {requests: {cpu: lots}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: good, namespace: a}
spec:
  containers: [{name: c, resources: {requests: {cpu: "1"}}}]
"""
    )
    workload = load_kube_yaml([_write(tmp_path, text)])
    bad, good = workload.arrivals
    assert bad.pod.error is not None
    assert "Pod a/bad" in bad.pod.error and "requests.cpu" in bad.pod.error
    assert good.pod.error is None


def test_bad_timing_annotation_names_the_field(tmp_path: Path) -> None:
    text = """
apiVersion: v1
kind: Pod
metadata: {name: p, annotations: {fairgpu.io/arrival-seconds: soon}}
spec: {containers: [{name: c}]}
"""
    pod = load_kube_yaml([_write(tmp_path, text)]).arrivals[0].pod
    assert pod.error is not None and "fairgpu.io/arrival-seconds" in pod.error


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("kind: Pod\nmetadata: [unclosed", "invalid YAML"),
        ("- just\n- a list\n", "must be a mapping"),
        (NODE + "---\n" + NODE, "defined more than once"),
        (NODE.replace('cpu: "8"', "cpu: eight"), "status.allocatable.cpu"),
        ("kind: Deployment\nmetadata: {name: d}\nspec: {replicas: -1}\n", "spec.replicas"),
        ("kind: PodGroup\nmetadata: {name: g}\nspec: {minMember: many}\n", "minMember"),
    ],
    ids=[
        "yaml-syntax",
        "not-a-mapping",
        "duplicate-node",
        "bad-node-quantity",
        "negative-replicas",
        "bad-min-member",
    ],
)
def test_bad_files_raise_one_clear_error(tmp_path: Path, text: str, needle: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(WorkloadError) as info:
        load_kube_yaml([path])
    assert needle in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="no such file"):
        load_kube_yaml([tmp_path / "absent.yaml"])
