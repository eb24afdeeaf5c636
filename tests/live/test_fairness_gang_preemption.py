"""Fair order visible in binding order, gangs bound whole or not at all, preemption evicting the
planned victims (and others when a PodDisruptionBudget refuses), through the real API."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from live_helpers import (
    bound,
    condition,
    create,
    create_priority_classes,
    pod,
    pods,
    scheduler,
    wait_for,
)

from fairgpu.devcluster import ControlPlane, KubeClient

pytestmark = pytest.mark.integration

TRAINING_A100 = "lv-training-a100"


class BindOrder:
    """Records the order in which pods of a namespace get a node (etcd commit order)."""

    def __init__(self, admin: KubeClient, ns: str) -> None:
        path = f"/api/v1/namespaces/{ns}/pods"
        rv = admin.get(path)["metadata"]["resourceVersion"]
        self.stream = admin.watch(path, {"resourceVersion": rv}, timeout_seconds=120)
        self.order: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for ev in self.stream:
                obj = ev["object"]
                name = obj["metadata"]["name"]
                if obj["spec"].get("nodeName") and name not in self.order:
                    self.order.append(name)
        except Exception:
            pass

    def close(self) -> None:
        self.stream.close()


@pytest.mark.parametrize("ordering", ["fair", "kube-default"])
def test_fair_order_shows_in_binding_order(
    live_cp: ControlPlane, admin: KubeClient, ns: str, ordering: str
) -> None:
    # team-a submits twelve one-GPU pods first, team-b a second later; 8 GPUs fit.
    for i in range(12):
        create(admin, ns, pod(f"a-{i:02d}", gpus=1, labels={"fairgpu.io/queue": "team-a"}))
    time.sleep(1.1)  # creation timestamps have one-second resolution
    for i in range(12):
        create(admin, ns, pod(f"b-{i:02d}", gpus=1, labels={"fairgpu.io/queue": "team-b"}))
    order = BindOrder(admin, ns)
    try:
        with scheduler(live_cp, ordering=ordering, bind_workers=1):
            wait_for(lambda: len(bound(admin, ns)) == 8)
            wait_for(lambda: len(order.order) == 8)
    finally:
        order.close()
    teams = [name[0] for name in order.order]
    if ordering == "fair":
        # Equal weights: the queues alternate, so each holds half of the GPUs.
        assert teams.count("a") == teams.count("b") == 4
        for k in range(2, 9, 2):
            assert teams[:k].count("a") == k // 2, teams
    else:
        # kube-scheduler's order (priority, then age) gives everything to the first team.
        assert teams == ["a"] * 8


def _gang_pod(name: str, group: str, min_member: int, gpus: int) -> dict[str, Any]:
    return pod(
        name,
        gpus=gpus,
        labels={"fairgpu.io/pod-group": group},
        annotations={"fairgpu.io/min-member": str(min_member)},
    )


def test_gang_is_bound_whole_or_not_at_all(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    # Three 4-GPU members need 12 GPUs; the only matching node has 8.
    for i in range(3):
        create(admin, ns, _gang_pod(f"big-{i}", "big", 3, 4))
    for i in range(2):
        create(admin, ns, _gang_pod(f"small-{i}", "small", 2, 4))
    with scheduler(live_cp):
        wait_for(lambda: set(bound(admin, ns)) == {"small-0", "small-1"})

        def big_explained() -> list[str]:
            msgs = [
                c["message"]
                for p in pods(admin, ns)
                if p["metadata"]["name"].startswith("big-")
                and (c := condition(p))
                and c["status"] == "False"
            ]
            return msgs if len(msgs) == 3 else []

        msgs = wait_for(big_explained)
        time.sleep(1.5)  # several more cycles: still nothing of the big group is bound
    assert all("pod group" in m and "big" in m for m in msgs)
    assert not any(n.startswith("big-") for n in bound(admin, ns))


@pytest.fixture(scope="module")
def priority_classes(admin: KubeClient) -> Iterator[None]:
    """PriorityClasses lv-prio-1..8 (values 1..8) and lv-prio-high (1000)."""
    names = {f"lv-prio-{i}": i for i in range(1, 9)} | {"lv-prio-high": 1000}
    create_priority_classes(admin, names)
    yield
    for name in names:
        admin.request("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")


def _fill_node(live_cp: ControlPlane, admin: KubeClient, ns: str, labels: dict[int, dict]) -> None:
    for i in range(1, 9):
        create(
            admin,
            ns,
            pod(f"low-{i}", gpus=1, priority_class=f"lv-prio-{i}", labels=labels.get(i, {})),
        )


def _running(admin: KubeClient, ns: str, n: int) -> bool:
    return sum(1 for p in pods(admin, ns) if p["status"].get("phase") == "Running") == n


def test_preemption_evicts_the_planned_victims(
    live_cp: ControlPlane, admin: KubeClient, ns: str, priority_classes: None
) -> None:
    _fill_node(live_cp, admin, ns, {})
    with scheduler(live_cp) as s:
        wait_for(lambda: _running(admin, ns, 8))
        create(admin, ns, pod("urgent", gpus=2, priority_class="lv-prio-high"))
        wait_for(lambda: bound(admin, ns).get("urgent") == TRAINING_A100)
        names = wait_for(lambda: b if len(b := set(bound(admin, ns))) == 7 else None)
        assert s.metrics.evictions.labels("ok")._value.get() == 2
    # The two lowest-priority pods make room; nobody else is touched.
    assert names == {"urgent", *(f"low-{i}" for i in range(3, 9))}
    # While it waited for them, the preemptor's status named its node.
    urgent = next(p for p in pods(admin, ns) if p["metadata"]["name"] == "urgent")
    assert urgent["status"].get("nominatedNodeName") == TRAINING_A100


def test_eviction_refused_by_a_pdb_picks_other_victims(
    live_cp: ControlPlane, admin: KubeClient, ns: str, priority_classes: None
) -> None:
    protected = {i: {"protect": "yes"} for i in (1, 2)}
    _fill_node(live_cp, admin, ns, protected)
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"protect": "yes"}}},
    }
    admin.post(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", pdb)
    with scheduler(live_cp) as s:
        wait_for(lambda: _running(admin, ns, 8))
        create(admin, ns, pod("urgent", gpus=2, priority_class="lv-prio-high"))
        wait_for(lambda: bound(admin, ns).get("urgent") == TRAINING_A100, timeout=40)
        names = wait_for(lambda: b if len(b := set(bound(admin, ns))) == 7 else None)
        assert s.metrics.evictions.labels("blocked")._value.get() >= 1
    # low-1 and low-2 are protected: the next lowest go instead.
    assert names == {"urgent", "low-1", "low-2", *(f"low-{i}" for i in range(5, 9))}
