"""In-place pod resize against a real kube-apiserver: a running pod resized down keeps its
room on its node until the kubelet has applied the resize, as kube-scheduler counts it; the
node's CPUs are audited from the API server's objects (what the kubelet admitted counts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fairgpu.devcluster import ControlPlane, FakeKubelet, KubeClient
from fairgpu.devcluster.client import STRATEGIC_MERGE_PATCH
from tests.live.auditor import Auditor
from tests.live.live_helpers import (
    CHURN_TENANCY,
    bound,
    condition,
    create,
    create_priority_classes,
    pod,
    scheduler,
    wait_for,
)

NODE = "lv-cpu-0"  # 32 CPUs


def cpu_pod(name: str, cpu: str) -> dict[str, Any]:
    manifest = pod(name, pool="hybrid", model=None, cpu=cpu)
    manifest["spec"]["nodeSelector"]["kubernetes.io/hostname"] = NODE
    return manifest


def get(client: KubeClient, ns: str, name: str) -> dict[str, Any]:
    return client.get(f"/api/v1/namespaces/{ns}/pods/{name}")


def shown_cpu(p: dict[str, Any]) -> str | None:
    statuses = p.get("status", {}).get("containerStatuses") or [{}]
    return statuses[0].get("allocatedResources", {}).get("cpu")


def test_a_pod_resized_down_keeps_its_room_until_the_kubelet_resizes_it(
    live_cp: ControlPlane, admin: KubeClient, kubelet: FakeKubelet, ns: str
) -> None:
    kubelet.actuate_resizes = False
    auditor = Auditor(admin, ns)  # the node's CPUs, as the API server's objects show them
    try:
        with auditor.watching(), scheduler(live_cp):
            create(admin, ns, cpu_pod("big", "24"))
            wait_for(lambda: shown_cpu(get(admin, ns, "big")) == "24")
            resp = admin.request(
                "PATCH",
                f"/api/v1/namespaces/{ns}/pods/big/resize",
                {
                    "spec": {
                        "containers": [{"name": "main", "resources": {"requests": {"cpu": "4"}}}]
                    }
                },
                content_type=STRATEGIC_MERGE_PATCH,
            )
            assert resp.ok, resp.body
            big = get(admin, ns, "big")
            assert big["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "4"
            assert shown_cpu(big) == "24"  # the kubelet has not resized it yet

            # 24 of the node's 32 CPUs are still taken: 16 more do not fit.
            create(admin, ns, cpu_pod("next", "16"))

            def refused() -> bool:
                cond = condition(get(admin, ns, "next")) or {}
                return "Insufficient cpu" in cond.get("message", "")

            wait_for(refused)
            assert "next" not in bound(admin, ns)

            kubelet.resume_resizes()
            wait_for(lambda: shown_cpu(get(admin, ns, "big")) == "4")
            wait_for(lambda: bound(admin, ns).get("next") == NODE)
        assert auditor.problems() == []
    finally:
        kubelet.actuate_resizes = True


def test_a_resized_pod_is_still_a_victim(
    live_cp: ControlPlane, admin: KubeClient, kubelet: FakeKubelet, ns: str, tmp_path: Path
) -> None:
    create_priority_classes(admin, {"rs-low": 1, "rs-high": 1000})
    tenancy = tmp_path / "tenancy.yaml"
    tenancy.write_text(CHURN_TENANCY + "queues:\n  - {name: " + ns + "}\n")
    with scheduler(live_cp, tenancy=tenancy):
        for k in range(4):
            create(admin, ns, pod(f"low-{k}", gpus=2, priority_class="rs-low"))
        wait_for(lambda: len(bound(admin, ns)) == 4)
        resp = admin.request(
            "PATCH",
            f"/api/v1/namespaces/{ns}/pods/low-0/resize",
            {"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "16"}}}]}},
            content_type=STRATEGIC_MERGE_PATCH,
        )
        assert resp.ok, resp.body
        wait_for(lambda: shown_cpu(get(admin, ns, "low-0")) == "16")
        create(admin, ns, pod("high", gpus=8, priority_class="rs-high"))
        wait_for(lambda: "high" in bound(admin, ns))
