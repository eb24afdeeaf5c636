"""Scheduling gates, topology spread, namespace selectors and Services, live."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from live_helpers import USAGE, bound, condition, create, pods, scheduler, wait_for

from fairgpu.devcluster import ControlPlane, KubeClient, ensure_namespace

HYBRID_NODES = {"lv-hybrid-a100", "lv-hybrid-t4", "lv-cpu-0"}


def _hybrid_pod(name: str, scheduler_name: str = "fairgpu", **spec: Any) -> dict[str, Any]:
    """A small pod that may run on the three hybrid nodes (GPU taints tolerated)."""
    labels = spec.pop("labels", {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "schedulerName": scheduler_name,
            "nodeSelector": {USAGE: "hybrid"},
            "tolerations": [
                {"key": USAGE, "operator": "Equal", "value": "hybrid"},
                {"key": "nvidia.com/gpu.product", "operator": "Exists"},
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/fake:1",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
            **spec,
        },
    }


def test_gated_pod_waits_for_its_gate_then_binds(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    create(admin, ns, _hybrid_pod("gated", schedulingGates=[{"name": "example.com/quota"}]))
    create(admin, ns, _hybrid_pod("free"))
    # No periodic resync: only the gate's removal may trigger the next attempt.
    with scheduler(live_cp, resync_seconds=300):
        wait_for(lambda: "free" in bound(admin, ns), 20)
        time.sleep(1.5)  # several cycles
        assert "gated" not in bound(admin, ns)
        gated = next(p for p in pods(admin, ns) if p["metadata"]["name"] == "gated")
        # The API server's condition stands: fairgpu reports nothing for a gated pod.
        assert (condition(gated) or {}).get("reason") == "SchedulingGated"
        admin.patch(f"/api/v1/namespaces/{ns}/pods/gated", {"spec": {"schedulingGates": None}})
        wait_for(lambda: "gated" in bound(admin, ns), 20)


def _replicas(prefix: str, scheduler_name: str) -> list[dict[str, Any]]:
    spread = {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    return [
        _hybrid_pod(
            f"{prefix}-{i}",
            scheduler_name,
            labels={"app": "web"},
            topologySpreadConstraints=[spread],
        )
        for i in range(6)
    ]


def _all_bound(admin: KubeClient, ns: str, count: int) -> dict[str, str] | None:
    placed = bound(admin, ns)
    return placed if len(placed) == count else None


def test_spread_replicas_land_as_kube_scheduler_places_them(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    # The same six replicas, once through fairgpu, once (another namespace) through the real
    # kube-scheduler: both must spread them 2/2/2 over the three hybrid nodes.
    other = f"lv-{uuid.uuid4().hex[:8]}"
    ensure_namespace(admin, other, ca_pem=Path(live_cp.ca_file).read_text())
    for manifest in _replicas("web", "fairgpu"):
        create(admin, ns, manifest)
    with scheduler(live_cp):
        ours = wait_for(lambda: _all_bound(admin, ns, 6), 30)
    for manifest in _replicas("web", "default-scheduler"):
        create(admin, other, manifest)
    live_cp.start_scheduler()
    try:
        theirs = wait_for(lambda: _all_bound(admin, other, 6), 60)
    finally:
        live_cp.stop_scheduler()
    for placed in (ours, theirs):
        assert set(placed.values()) == HYBRID_NODES
        assert sorted(Counter(placed.values()).values()) == [2, 2, 2]


def test_namespace_selector_follows_namespace_labels(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    data = f"lv-{uuid.uuid4().hex[:8]}"
    with scheduler(live_cp):
        # Created while the scheduler runs: the Namespace watch must deliver its labels.
        ensure_namespace(
            admin, data, labels={"team": "data"}, ca_pem=Path(live_cp.ca_file).read_text()
        )
        store = _hybrid_pod("store", labels={"app": "store"}, nodeName="lv-cpu-0")
        create(admin, data, store)
        term = {
            "labelSelector": {"matchLabels": {"app": "store"}},
            "namespaceSelector": {"matchLabels": {"team": "data"}},
            "topologyKey": "kubernetes.io/hostname",
        }
        near = _hybrid_pod(
            "near",
            affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
        )
        create(admin, ns, near)
        assert wait_for(lambda: bound(admin, ns).get("near"), 20) == "lv-cpu-0"


def test_service_watch_gives_the_bare_pods_it_selects_default_spread(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "api"},
        "spec": {"clusterIP": "None", "selector": {"app": "api"}, "ports": [{"port": 80}]},
    }
    with scheduler(live_cp, policy="binpack") as sched:
        cluster = sched.cache.cluster
        # Created while the scheduler runs: the Service watch must deliver its selector.
        admin.post(f"/api/v1/namespaces/{ns}/services", service)
        wait_for(lambda: cluster.service_selectors.get(ns) == [{"app": "api"}], 20)
        # Bare pods behind the Service get the default spread, which outweighs binpack.
        for i in range(3):
            create(admin, ns, _hybrid_pod(f"api-{i}", labels={"app": "api"}))
        placed = wait_for(lambda: _all_bound(admin, ns, 3), 20)
        assert len(set(placed.values())) > 1, placed
        admin.delete(f"/api/v1/namespaces/{ns}/services/api")
        wait_for(lambda: ns not in cluster.service_selectors, 20)
