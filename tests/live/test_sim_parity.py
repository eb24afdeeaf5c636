"""The simulator replays a live snapshot and makes the live scheduler's decisions, pod by pod.

Identical nodes join a running scheduler in shuffled order, so the live cache holds them in
that order; a gang of pods created within about a second (the API stamps creationTimestamp
at 1 s resolution, so most of them tie) is placed in one cycle. The nodes and pods are then
dumped as YAML -- nodes in API list order, pods without the UIDs and bindings the API added --
and replayed by the simulator with the same policy and seed. Every pod must land on the same
node and the same GPU devices. Ties between nodes (fixed-rank) and between pods created in the
same second are exactly what parity depends on: ranks from node names, pods by creation time
then namespace/name.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from live_helpers import A100, bound, create_many, pod, pods, scheduler, wait_for

from fairgpu.devcluster import ControlPlane, KubeClient, NodeSpec, create_nodes, delete_nodes
from fairgpu.engine.engine import Engine
from fairgpu.engine.policies import policy as named_policy
from fairgpu.kube import RunConfig
from fairgpu.model.gpu import ANN_GPU_DEVICES, decode_gpu_devices
from fairgpu.model.node_pools import NodePoolConfig
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workloads.kube_yaml import load_kube_yaml

NODES = 12
PODS = 36
PARITY = "fairgpu.io/parity-test"
# What the API server and the scheduler add to a submitted pod; a replay starts without them.
SERVER_FIELDS = ("uid", "resourceVersion", "managedFields", "generation")
SCHEDULER_ANNOTATIONS = (ANN_GPU_DEVICES, "fairgpu.io/scheduled-by")


def _gang(ns: str) -> list[dict[str, Any]]:
    """A gang of PODS pods asking 1, 2 or 3 whole A100s, kept to the parity nodes."""
    out = []
    for i in range(PODS):
        p = pod(
            f"w-{i}",
            gpus=1 + i % 3,
            node_selector={PARITY: ns},
            labels={"fairgpu.io/pod-group": "parity"},
            annotations={"fairgpu.io/min-member": str(PODS)},
        )
        out.append(p)
    return out


def _submitted(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod as submitted: without status, binding, UID and the scheduler's annotations."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in SERVER_FIELDS}
    meta["annotations"] = {
        k: v for k, v in (meta.get("annotations") or {}).items() if k not in SCHEDULER_ANNOTATIONS
    }
    spec = {k: v for k, v in obj["spec"].items() if k != "nodeName"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _snapshot(admin: KubeClient, ns: str, path: Path) -> None:
    """Every node (as listed) and the namespace's pods (as submitted) in one YAML file."""
    docs: list[dict[str, Any]] = []
    for node in admin.get("/api/v1/nodes")["items"]:
        node.update(apiVersion="v1", kind="Node")
        docs.append(node)
    docs.extend(_submitted(p) for p in pods(admin, ns))
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


def _live_placements(admin: KubeClient, ns: str) -> dict[str, tuple[str, list[int]]]:
    out = {}
    for p in pods(admin, ns):
        ann = (p["metadata"].get("annotations") or {}).get(ANN_GPU_DEVICES, "")
        devices = sorted(d.index for d in decode_gpu_devices(ann))
        out[p["metadata"]["name"]] = (p["spec"].get("nodeName", ""), devices)
    return out


def _replay(path: Path, config: RunConfig) -> dict[str, tuple[str, list[int]]]:
    """The simulator's placements of the snapshot, with the live scheduler's policy and seed."""
    workload = load_kube_yaml([path], pools=NodePoolConfig(usage_key=config.node_pool_label))
    engine = Engine(named_policy(config.policy), config.seed, ordering=config.ordering)  # type: ignore[arg-type]
    result = Simulation(workload, engine).run()
    return {r.pod.name: (r.node, sorted(r.devices)) for r in result.records}


def test_simulated_replay_places_every_pod_as_live(
    live_cp: ControlPlane, admin: KubeClient, ns: str, tmp_path: Path
) -> None:
    specs = [
        NodeSpec(f"par-{ns}-{i}", pool="training", gpu_model=A100, gpus=8, labels={PARITY: ns})
        for i in range(1, NODES + 1)
    ]
    random.Random(7).shuffle(specs)
    names = [s.name for s in specs]
    try:
        with scheduler(live_cp) as s:
            for spec in specs:  # one at a time: the live cache adds them in this order
                create_nodes(admin, [spec])
                wait_for(lambda n=spec.name: n in s.cache.cluster.node_index)
            create_many(admin, ns, _gang(ns))
            wait_for(lambda: len(bound(admin, ns)) == PODS, timeout=60)
            config = s.config
            wait_for(lambda: all(d for _, d in _live_placements(admin, ns).values()))
        live = _live_placements(admin, ns)
        _snapshot(admin, ns, tmp_path / "snapshot.yaml")
    finally:
        delete_pods_and_nodes(admin, ns, names)
    seconds = Counter(p["metadata"]["creationTimestamp"] for p in pods_of(tmp_path))
    assert max(seconds.values()) >= PODS // 3, f"too few pods created in one second: {seconds}"
    simulated = _replay(tmp_path / "snapshot.yaml", config)
    differ = {k: (live[k], simulated.get(k)) for k in live if simulated.get(k) != live[k]}
    assert not differ, (
        f"{len(differ)} of {PODS} pods placed differently (live, simulated): {differ}"
    )
    assert len({node for node, _ in live.values()}) > 1  # the ties between nodes mattered


def pods_of(tmp_path: Path) -> list[dict[str, Any]]:
    """The pods of the snapshot file."""
    docs = yaml.safe_load_all((tmp_path / "snapshot.yaml").read_text())
    return [d for d in docs if d and d.get("kind") == "Pod"]


def delete_pods_and_nodes(admin: KubeClient, ns: str, names: list[str]) -> None:
    """Free the namespace's pods and remove the test's nodes (other tests count nodes)."""
    from live_helpers import delete_pods

    delete_pods(admin, ns)
    delete_nodes(admin, names)
