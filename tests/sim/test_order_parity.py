"""Orders that must not depend on how objects were loaded: node tie-break ranks, pods that
arrive together. The simulator and the live cache apply the same rule, so a replay of a live
snapshot decides as the live scheduler did (tests/live/test_sim_parity.py checks that end to
end against a real API server)."""

from __future__ import annotations

import random
from pathlib import Path

import msgspec

from fairgpu.engine.engine import Engine
from fairgpu.engine.policies import DEFAULT_POLICY
from fairgpu.engine.policies import policy as named_policy
from fairgpu.kube.cache import CacheChanges, SchedulerCache, decode_pod
from fairgpu.model.order import natural_key
from fairgpu.sim.simulator import Simulation
from fairgpu.sim.workloads.kube_yaml import load_kube_yaml

STAMP = "2026-01-05T10:00:00Z"


def _node(name: str, gpus: int = 8) -> str:
    return f"""---
apiVersion: v1
kind: Node
metadata: {{name: {name}, labels: {{nvidia.com/gpu.product: A100}}}}
status: {{allocatable: {{cpu: "64", memory: 256Gi, pods: "110", nvidia.com/gpu: "{gpus}"}}}}
"""


def _pod(name: str, gpus: int, stamp: str | None = STAMP, extra: str = "") -> str:
    created = f", creationTimestamp: '{stamp}'" if stamp else ""
    return f"""---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: team{created}{extra}}}
spec:
  containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: "{gpus}"}}}}}}]
"""


def _placements(path: Path, seed: int = 0) -> dict[str, tuple[str, tuple[int, ...]]]:
    engine = Engine(named_policy(DEFAULT_POLICY), seed)
    result = Simulation(load_kube_yaml([path]), engine).run()
    return {r.pod.name: (r.node, r.devices) for r in result.records}


def test_file_order_of_nodes_and_pods_does_not_change_any_placement(tmp_path: Path) -> None:
    nodes = [_node(f"n-{i}") for i in range(1, 13)]
    pods = [_pod(f"w-{i}", 1 + i % 3) for i in range(30)]
    (tmp_path / "a.yaml").write_text("".join(nodes + pods))
    rng = random.Random(3)
    rng.shuffle(nodes)
    rng.shuffle(pods)
    (tmp_path / "b.yaml").write_text("".join(pods + nodes))
    first = _placements(tmp_path / "a.yaml")
    assert first == _placements(tmp_path / "b.yaml")
    assert len({node for node, _ in first.values()}) > 1  # equal nodes: ties decided


def test_ranks_change_with_the_seed_not_with_the_file(tmp_path: Path) -> None:
    (tmp_path / "w.yaml").write_text("".join(_node(f"n-{i}") for i in range(12)) + _pod("p", 1))
    chosen = {seed: _placements(tmp_path / "w.yaml", seed)["p"][0] for seed in range(8)}
    assert len(set(chosen.values())) > 1


def test_pods_created_together_go_in_natural_name_order(tmp_path: Path) -> None:
    # One GPU for two pods created in the same second: p-9 comes before p-40, as live.
    (tmp_path / "w.yaml").write_text(_node("n", gpus=1) + _pod("p-40", 1) + _pod("p-9", 1))
    placed = _placements(tmp_path / "w.yaml")
    assert placed["p-9"][0] == "n" and placed["p-40"][0] == ""


def test_a_pod_without_creation_time_is_as_old_as_its_arrival(tmp_path: Path) -> None:
    # "z" arrives first and waits; "a" arrives later; when the GPU frees, the older goes first.
    late = ', annotations: {fairgpu.io/arrival-seconds: "5"}'
    first = ', annotations: {fairgpu.io/duration-seconds: "10"}'
    text = _node("n", gpus=1) + _pod("b", 1, None, first) + _pod("z", 1, None)
    text += _pod("a", 1, None, late)
    (tmp_path / "w.yaml").write_text(text)
    engine = Engine(named_policy(DEFAULT_POLICY), 0)
    records = {
        r.pod.name: r
        for r in Simulation(load_kube_yaml([tmp_path / "w.yaml"]), engine).run().records
    }
    assert records["z"].start == 10.0 and records["a"].start is None


def test_unquoted_creation_timestamp_is_read(tmp_path: Path) -> None:
    # YAML 1.1 would read it as a datetime, which no Kubernetes field is.
    (tmp_path / "w.yaml").write_text(_node("n") + _pod("p", 1).replace("'", ""))
    assert "creationTimestamp: 2026" in (tmp_path / "w.yaml").read_text()
    workload = load_kube_yaml([tmp_path / "w.yaml"])
    assert workload.arrivals[0].pod.created == 1767607200.0


def test_natural_key_orders_numbers_by_value() -> None:
    names = ["job-40", "job-9", "job-100", "job-09", "job", "job-9a", "a10b2", "a10b10"]
    assert sorted(names, key=natural_key) == [
        "a10b2",
        "a10b10",
        "job",
        "job-09",
        "job-9",
        "job-9a",
        "job-40",
        "job-100",
    ]


def test_live_cache_hands_pods_out_by_creation_then_name_not_by_watch_order() -> None:
    cache = SchedulerCache("fairgpu")
    out = CacheChanges()
    names = ["w-10", "w-2", "w-1", "old"]
    for i, name in enumerate(names):
        stamp = "2026-01-05T09:00:00Z" if name == "old" else STAMP
        raw = {
            "metadata": {
                "name": name,
                "namespace": "team",
                "uid": f"{9 - i}-uid",  # UIDs sort against creation and name
                "creationTimestamp": stamp,
            },
            "spec": {"schedulerName": "fairgpu", "containers": [{"name": "c"}]},
            "status": {"phase": "Pending"},
        }
        rec = decode_pod(msgspec.json.encode(raw), "fairgpu")
        cache.apply_pod("ADDED", rec, 0.0, out)
    assert [p.name for p in cache.schedulable()] == ["old", "w-1", "w-2", "w-10"]
