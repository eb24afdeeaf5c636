"""A LeaderWorkerSet's workers still to come, in the answers.

Under ``startupPolicy: LeaderReady`` the LeaderWorkerSet controller creates a group's
workers only once its leader runs. The controller cannot run here (no image); its CRD and
objects can, and the leader pod is created as it would create it. While ``vllm-0`` waits for
the node ``solo`` holds for 10 minutes, its two workers do not exist: the answers read the
LeaderWorkerSet and create them once the leader starts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from live_helpers import (
    LWS_API,
    ask_cli,
    bound,
    create,
    install_crd,
    leader_worker_set,
    pod,
    scheduler,
    wait_for,
)
from test_jobs_live import NODE, TENANCY

from fairgpu.devcluster import ControlPlane, KubeClient

pytestmark = pytest.mark.integration


def test_answers_count_the_workers_a_waiting_leader_will_bring(
    live_cp: ControlPlane, admin: KubeClient, ns: str, tmp_path: Path
) -> None:
    install_crd(admin, LWS_API, "v1", "LeaderWorkerSet")
    config = tmp_path / "tenancy.yaml"
    config.write_text(TENANCY)
    on_node = {"kubernetes.io/hostname": NODE}
    labels = {"fairgpu.io/queue": "a"}
    member = pod("template", gpus=2, labels=labels, node_selector=on_node)
    lws = leader_worker_set("vllm", 3, member, startup_policy="LeaderReady")
    with scheduler(live_cp, tenancy=TENANCY):
        notes = {"fairgpu.io/duration-seconds": "600"}
        create(
            admin, ns, pod("solo", gpus=8, labels=labels, annotations=notes, node_selector=on_node)
        )
        wait_for(lambda: bound(admin, ns).get("solo") == NODE, timeout=30)
        admin.post(f"/apis/{LWS_API}/v1/namespaces/{ns}/leaderworkersets", lws)
        leader = pod(
            "vllm-0",
            gpus=2,
            labels={
                **labels,
                "leaderworkerset.sigs.k8s.io/name": "vllm",
                "leaderworkerset.sigs.k8s.io/group-index": "0",
                "leaderworkerset.sigs.k8s.io/worker-index": "0",
            },
            annotations={"leaderworkerset.sigs.k8s.io/size": "3"},
            node_selector=on_node,
        )
        create(admin, ns, leader)

        said = ask_cli(live_cp, config, "explain", f"{ns}/vllm-0")
        assert said["state"] == "pending", said
        assert said["predicted_in_seconds"] in range(600 - 120, 601), said
        more = said["to_create"]
        assert more["controller"] == f"LeaderWorkerSet {ns}/vllm group 0", more
        assert (more["pods_to_create"], more["at_once"], more["after"]) == (2, True, f"{ns}/vllm-0")
        assert more["pods_in_cluster"] == 1, more  # its leader
        assert more["last_start_in_seconds"] in range(600 - 120, 601), more
        group = said["leader_worker_group"]
        assert (group["size"], group["running"], group["pending"]) == (3, 0, 1), group

        rows = {r["queue"]: r for r in ask_cli(live_cp, config, "queues")}
        assert rows["a"]["pods_to_create"] == 2, rows["a"]
