"""A department's limit through the real API server: its queues together never hold more
than the limit -- terminating pods included, as the API server's state shows them -- and a
queue below its share there takes back from a sibling above its own, by eviction."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from auditor import holds
from live_helpers import CHURN_TENANCY, bound, condition, create, pod, pods, scheduler, wait_for

from fairgpu.devcluster import ControlPlane, KubeClient

pytestmark = pytest.mark.integration

LIMIT = 4
# research may hold 4 GPUs: team-a (weight 3) is owed 3 of them, team-b 1.
TENANCY = (
    CHURN_TENANCY
    + f"""queues:
  - {{name: research, limit: {{gpu: {LIMIT}}}}}
  - {{name: team-a, parent: research, weight: 3}}
  - {{name: team-b, parent: research}}
"""
)


class HeldGpus:
    """Follows the namespace's pods through a watch: the most GPUs its bound pods -- those
    terminating too, not those whose containers have stopped (Succeeded or Failed) -- held
    at once, in any state the API server went through."""

    def __init__(self, admin: KubeClient, ns: str) -> None:
        path = f"/api/v1/namespaces/{ns}/pods"
        rv = admin.get(path)["metadata"]["resourceVersion"]
        self.stream = admin.watch(path, {"resourceVersion": rv}, timeout_seconds=120)
        self.held: dict[str, int] = {}
        self.most = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for ev in self.stream:
                obj = ev["object"]
                name = obj["metadata"]["name"]
                if ev["type"] == "DELETED" or not holds(obj):
                    self.held.pop(name, None)
                else:
                    self.held[name] = _gpus(obj)
                self.most = max(self.most, sum(self.held.values()))
        except Exception:
            pass

    def close(self) -> None:
        self.stream.close()


def _gpus(p: dict[str, Any]) -> int:
    limits = p["spec"]["containers"][0]["resources"].get("limits") or {}
    return int(limits.get("nvidia.com/gpu", 0))


def _queue_pod(name: str, queue: str) -> dict[str, Any]:
    return pod(name, gpus=1, labels={"fairgpu.io/queue": queue})


def test_a_department_limit_holds_and_a_queue_below_its_share_takes_back(
    live_cp: ControlPlane, admin: KubeClient, ns: str, tmp_path: Path
) -> None:
    config = tmp_path / "tenancy.yaml"
    config.write_text(TENANCY)
    watch = HeldGpus(admin, ns)
    try:
        with scheduler(live_cp, tenancy=config):
            for i in range(LIMIT + 2):
                create(admin, ns, _queue_pod(f"b-{i}", "team-b"))
            # The node has 8 GPUs: team-b's pods beyond the limit wait with its reason.
            wait_for(lambda: len(bound(admin, ns)) == LIMIT)
            wait_for(lambda: "above its limit of 4 GPU" in _message(admin, ns, "b-5"))
            for i in range(LIMIT):
                create(admin, ns, _queue_pod(f"a-{i}", "team-a"))
            # team-a takes back 3 (its share), team-b keeps 1.
            wait_for(lambda: _by_queue(admin, ns) == {"a": 3, "b": 1})
            [pending] = {f"a-{i}" for i in range(LIMIT)} - set(bound(admin, ns))
            wait_for(lambda: "above its limit of 4 GPU" in _message(admin, ns, pending))
            names = {p["metadata"]["name"] for p in pods(admin, ns)}
            # The 3 evicted (no controller) are gone; the 2 pending were never evicted.
            assert len({f"b-{i}" for i in range(LIMIT + 2)} & names) == 3
            assert {"b-4", "b-5"} <= names
    finally:
        watch.close()
    assert watch.most == LIMIT


def _by_queue(admin: KubeClient, ns: str) -> dict[str, int]:
    """How many bound pods each queue (the pod name's first letter) has."""
    out: dict[str, int] = {}
    for name in bound(admin, ns):
        out[name[0]] = out.get(name[0], 0) + 1
    return out


def _message(admin: KubeClient, ns: str, name: str) -> str:
    """The PodScheduled message of pod ``name`` ("" when none)."""
    for p in pods(admin, ns):
        if p["metadata"]["name"] == name:
            c = condition(p)
            return str((c or {}).get("message") or "")
    return ""
