"""Scheduling gates, topology spread, host ports and namespace selectors in a YAML replay."""

from __future__ import annotations

from pathlib import Path

from fairgpu.engine.engine import Engine
from fairgpu.engine.policies import policy
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workloads.kube_yaml import load_kube_yaml

NODES = "".join(
    f"""
---
apiVersion: v1
kind: Node
metadata:
  name: n{i}
  labels: {{kubernetes.io/hostname: n{i}, topology.kubernetes.io/zone: {zone}}}
status: {{allocatable: {{cpu: "16", memory: 64Gi, pods: "20"}}}}
"""
    for i, zone in enumerate("aabbcc")
)

WORKLOAD = """
---
apiVersion: v1
kind: Namespace
metadata: {name: db, labels: {tier: data}}
---
apiVersion: v1
kind: Pod
metadata: {name: store, namespace: db, labels: {app: store}}
spec:
  nodeSelector: {kubernetes.io/hostname: n5}
  containers: [{name: c, resources: {requests: {cpu: "1"}}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: near-store
  namespace: default
  annotations: {fairgpu.io/arrival-seconds: "5"}
spec:
  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector: {matchLabels: {app: store}}
        namespaceSelector: {matchLabels: {tier: data}}
        topologyKey: kubernetes.io/hostname
  containers: [{name: c, resources: {requests: {cpu: "1"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: held, namespace: default}
spec:
  schedulingGates: [{name: example.com/quota}]
  containers: [{name: c, resources: {requests: {cpu: "1"}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 6
  template:
    metadata: {labels: {app: web}}
    spec:
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: topology.kubernetes.io/zone
        whenUnsatisfiable: DoNotSchedule
        labelSelector: {matchLabels: {app: web}}
      containers: [{name: c, resources: {requests: {cpu: "1"}}}]
""" + "".join(
    f"""
---
apiVersion: v1
kind: Pod
metadata: {{name: port-{i}, namespace: default}}
spec:
  nodeSelector: {{kubernetes.io/hostname: n0}}
  containers: [{{name: c, ports: [{{containerPort: 80, hostPort: 9000}}]}}]
"""
    for i in (1, 2)
)


def test_yaml_replay_honours_gates_spread_ports_and_namespace_selectors(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(NODES + WORKLOAD)
    workload = load_kube_yaml([path])
    assert workload.extra["namespace_labels"]["db"] == {
        "tier": "data",
        "kubernetes.io/metadata.name": "db",
    }
    for name in ("spread", "fairgpu-frag-plan"):
        result = Simulation(workload, Engine(policy(name), seed=1), seed=1).run()
        recs = {r.pod.name: r for r in result.records}
        # The gate is never removed in this replay: the pod never runs, and says why.
        assert recs["held"].start is None
        assert recs["held"].reason == "waiting for scheduling gates: [example.com/quota]"
        # Only n5 runs a pod of a namespace labelled tier=data.
        assert recs["near-store"].node == "n5"
        # maxSkew 1 over three zones: two replicas per zone.
        zones = [int(recs[f"web-{i}"].node[1:]) // 2 for i in range(6)]
        assert sorted(zones) == [0, 0, 1, 1, 2, 2], (name, zones)
        # Host port 9000 on n0 is taken by the first pod.
        assert recs["port-1"].node == "n0" and recs["port-2"].start is None
        assert "didn't have free ports" in recs["port-2"].reason


SERVICE = """
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: default}
spec:
  selector: {app: api}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: headless, namespace: default}
spec: {clusterIP: None}
"""

BARE_API_PODS = "".join(
    f"""
---
apiVersion: v1
kind: Pod
metadata:
  name: api-{i}
  namespace: default
  labels: {{app: api}}
  annotations: {{fairgpu.io/arrival-seconds: "{i}"}}
spec:
  containers: [{{name: c, resources: {{requests: {{cpu: "1"}}}}}}]
"""
    for i in range(6)
)


def test_a_service_spreads_the_bare_pods_it_selects(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    nodes_used: dict[bool, set[str | None]] = {}
    for with_service in (False, True):
        path.write_text(NODES + (SERVICE if with_service else "") + BARE_API_PODS)
        workload = load_kube_yaml([path])
        result = Simulation(workload, Engine(policy("binpack"), seed=1), seed=1).run()
        nodes_used[with_service] = {r.node for r in result.records}
    # The Service without a selector selects nothing and is left out.
    assert workload.extra["service_selectors"] == {"default": [{"app": "api"}]}
    # Unowned and unselected, the pods get no default spread: binpack stacks them on one node.
    assert len(nodes_used[False]) == 1
    # Behind the Service, the default hostname and zone spread outweighs binpack.
    assert len(nodes_used[True]) == 6
