"""A LeaderWorkerSet group, as its controller labels its pods, costs as one victim live.

Under its default restart policy the LeaderWorkerSet controller recreates a whole group when
any pod of it is deleted (:mod:`fairgpu.engine.leader_worker_groups`), so evicting one worker
throws away every pod's work. The controller itself cannot run here (no CRD, no image); its
pods can: they carry the labels the scheduler reads, and the API server's own state shows
which pods the scheduler evicted.
"""

from __future__ import annotations

import time

import pytest
from live_helpers import (
    bound,
    create,
    create_priority_classes,
    install_crd,
    pod,
    scheduler,
    wait_for,
)
from test_jobs_live import NODE, TENANCY, urgent_takes_room

from fairgpu.devcluster import ControlPlane, KubeClient

pytestmark = pytest.mark.integration


def test_a_leader_worker_group_is_spared_as_a_whole(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    """``solo`` (2 GPUs) ran longest; group 0 of ``vllm`` -- a leader and two workers, 2 GPUs
    each -- fills the rest of the 8-GPU node. Alone, any pod of the group is a cheaper victim
    than ``solo``; with the group (3 x its work) it is not: the urgent pod takes ``solo``'s
    place and the group runs on (without the grouping, a pod of the group goes)."""
    create_priority_classes(admin, {"lv-urgent": 1000})
    on_node = {"kubernetes.io/hostname": NODE}
    labels = {"fairgpu.io/queue": "a"}
    with scheduler(live_cp, tenancy=TENANCY):
        create(admin, ns, pod("solo", gpus=2, labels=labels, node_selector=on_node))
        wait_for(lambda: bound(admin, ns).get("solo") == NODE, timeout=30)
        time.sleep(2)  # solo has run longer than the group's pods
        group = {
            **labels,
            "leaderworkerset.sigs.k8s.io/name": "vllm",
            "leaderworkerset.sigs.k8s.io/group-index": "0",
        }
        members = ["vllm-0", "vllm-0-1", "vllm-0-2"]
        for name in members:
            create(admin, ns, pod(name, gpus=2, labels=group, node_selector=on_node))
        wait_for(lambda: len(bound(admin, ns)) == 4, timeout=30)
        # solo has now run about 6 s (12 GPU-s), each pod of the group about 4 s (8 GPU-s
        # alone, 24 with the group).
        time.sleep(4)
        names = urgent_takes_room(admin, ns, labels)
        assert "solo" not in names
        assert set(members) <= names


def test_a_set_whose_pods_restart_alone_loses_one_pod(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    """The same node under ``restartPolicy: None`` (each pod of the set restarted alone):
    the scheduler reads the LeaderWorkerSet, and the cheapest victim is one pod of the group
    -- ``solo`` and the rest of the group run on."""
    group_api = "leaderworkerset.x-k8s.io"
    install_crd(admin, group_api, "v1", "LeaderWorkerSet")
    create_priority_classes(admin, {"lv-urgent": 1000})
    on_node = {"kubernetes.io/hostname": NODE}
    labels = {"fairgpu.io/queue": "a"}
    member = pod("template", gpus=2, labels=labels, node_selector=on_node)
    lws = {
        "apiVersion": f"{group_api}/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm"},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 3,
                "restartPolicy": "None",
                "workerTemplate": {"metadata": {"labels": labels}, "spec": member["spec"]},
            },
        },
    }
    admin.post(f"/apis/{group_api}/v1/namespaces/{ns}/leaderworkersets", lws)
    with scheduler(live_cp, tenancy=TENANCY, podgroup_discovery_seconds=0.5) as s:
        wait_for(lambda: f"{ns}/vllm" in s.engine.loose_leader_worker_sets, timeout=20)
        create(admin, ns, pod("solo", gpus=2, labels=labels, node_selector=on_node))
        wait_for(lambda: bound(admin, ns).get("solo") == NODE, timeout=30)
        time.sleep(2)  # solo has run longer than the group's pods
        group = {
            **labels,
            "leaderworkerset.sigs.k8s.io/name": "vllm",
            "leaderworkerset.sigs.k8s.io/group-index": "0",
        }
        members = ["vllm-0", "vllm-0-1", "vllm-0-2"]
        for name in members:
            create(admin, ns, pod(name, gpus=2, labels=group, node_selector=on_node))
        wait_for(lambda: len(bound(admin, ns)) == 4, timeout=30)
        time.sleep(4)
        names = urgent_takes_room(admin, ns, labels)
    assert "solo" in names, names
    assert len(set(members) - names) == 1, names
