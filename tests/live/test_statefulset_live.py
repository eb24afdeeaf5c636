"""A StatefulSet's pods still to come, in the answers, with the real StatefulSet controller.

With ``podManagementPolicy: OrderedReady`` the controller creates ``vllm-1`` only once
``vllm-0`` runs and is ready, and ``vllm-2`` only once ``vllm-1`` is: while ``vllm-1`` waits
for the node ``vllm-0`` holds (600 s), ``vllm-2`` does not exist. The answers read the
StatefulSet and continue it as its controller will: ``vllm-2`` comes once ``vllm-1``
starts, and starts itself when ``vllm-1`` ends -- about 20 minutes from now.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live_helpers import ask_cli, bound, controller_manager, pod, pods, scheduler, wait_for
from test_jobs_live import NODE, TENANCY

from fairgpu.devcluster import ControlPlane, KubeClient

pytestmark = pytest.mark.integration

STATEFULSETS = "/apis/apps/v1/namespaces/{ns}/statefulsets"


@pytest.fixture
def statefulset_controller(live_cp: ControlPlane, kubelet: Any) -> Iterator[None]:
    """The real kube-controller-manager running only the StatefulSet controller."""
    with controller_manager(live_cp, "statefulset-controller"):
        yield


def test_answers_count_the_pods_a_statefulset_is_still_to_create(
    live_cp: ControlPlane,
    admin: KubeClient,
    ns: str,
    statefulset_controller: None,
    tmp_path: Path,
) -> None:
    config = tmp_path / "tenancy.yaml"
    config.write_text(TENANCY)
    member = pod(
        "template",
        gpus=8,
        labels={"fairgpu.io/queue": "a", "app": "vllm"},
        annotations={"fairgpu.io/duration-seconds": "600"},
        node_selector={"kubernetes.io/hostname": NODE},
    )
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "vllm"},
        "spec": {
            "replicas": 3,
            "serviceName": "vllm",
            "selector": {"matchLabels": {"app": "vllm"}},
            "template": {
                "metadata": {k: member["metadata"][k] for k in ("labels", "annotations")},
                "spec": member["spec"],
            },
        },
    }

    def ask(*args: str) -> Any:
        return ask_cli(live_cp, config, *args)

    with scheduler(live_cp, tenancy=TENANCY):
        try:
            admin.post(STATEFULSETS.format(ns=ns), manifest)
            wait_for(lambda: bound(admin, ns).get("vllm-0") == NODE, timeout=30)
            wait_for(lambda: "vllm-1" in {p["metadata"]["name"] for p in pods(admin, ns)}, 30)
            assert "vllm-2" not in {p["metadata"]["name"] for p in pods(admin, ns)}

            said = ask("explain", f"{ns}/vllm-1")
            assert said["state"] == "pending", said
            assert said["predicted_in_seconds"] in range(600 - 120, 601), said
            more = said["to_create"]
            assert more["controller"] == f"StatefulSet {ns}/vllm", more
            assert (more["pods_in_cluster"], more["pods_to_create"]) == (2, 1), more
            assert more["after"] == f"{ns}/vllm-1" and not more["at_once"]
            assert more["last_start_in_seconds"] in range(1200 - 120, 1201), more

            rows = {r["queue"]: r for r in ask("queues")}
            assert rows["a"]["pods_to_create"] == 1, rows["a"]
        finally:
            admin.request("DELETE", f"{STATEFULSETS.format(ns=ns)}/vllm")
