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
    LWS_API,
    bound,
    create,
    create_priority_classes,
    install_crd,
    leader_worker_set,
    pod,
    scheduler,
    wait_for,
)
from test_jobs_live import NODE, TENANCY, urgent_takes_room

from fairgpu.devcluster import ControlPlane, KubeClient

pytestmark = pytest.mark.integration


MEMBERS = ["vllm-0", "vllm-0-1", "vllm-0-2"]
LABELS = {"fairgpu.io/queue": "a"}
ON_NODE = {"kubernetes.io/hostname": NODE}


def solo_then_group(admin: KubeClient, ns: str) -> set[str]:
    """With a scheduler running: ``solo`` (2 GPUs) starts first, then group 0 of ``vllm`` --
    a leader and two workers, 2 GPUs each, labelled as the controller labels them -- fills
    the rest of the 8-GPU node; once solo has run about 6 s (12 GPU-s) and each pod of the
    group about 4 s (8 GPU-s alone, 24 with the group), an urgent 2-GPU pod needs room. The
    namespace's pods once it is bound."""
    create_priority_classes(admin, {"lv-urgent": 1000})
    create(admin, ns, pod("solo", gpus=2, labels=LABELS, node_selector=ON_NODE))
    wait_for(lambda: bound(admin, ns).get("solo") == NODE, timeout=30)
    time.sleep(2)  # solo has run longer than the group's pods
    group = {
        **LABELS,
        "leaderworkerset.sigs.k8s.io/name": "vllm",
        "leaderworkerset.sigs.k8s.io/group-index": "0",
    }
    for name in MEMBERS:
        create(admin, ns, pod(name, gpus=2, labels=group, node_selector=ON_NODE))
    wait_for(lambda: len(bound(admin, ns)) == 4, timeout=30)
    time.sleep(4)
    return urgent_takes_room(admin, ns, LABELS)


def test_a_leader_worker_group_is_spared_as_a_whole(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    """Alone, any pod of the group is a cheaper victim than ``solo``; with the group (3 x
    its work) it is not: the urgent pod takes ``solo``'s place and the group runs on
    (without the grouping, a pod of the group goes)."""
    with scheduler(live_cp, tenancy=TENANCY):
        names = solo_then_group(admin, ns)
    assert "solo" not in names
    assert set(MEMBERS) <= names


def test_a_set_whose_pods_restart_alone_loses_one_pod(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    """The same node under ``restartPolicy: None`` (each pod of the set restarted alone):
    the scheduler reads the LeaderWorkerSet, and the cheapest victim is one pod of the group
    -- ``solo`` and the rest of the group run on."""
    install_crd(admin, LWS_API, "v1", "LeaderWorkerSet")
    member = pod("template", gpus=2, labels=LABELS, node_selector=ON_NODE)
    lws = leader_worker_set("vllm", 3, member, restartPolicy="None")
    admin.post(f"/apis/{LWS_API}/v1/namespaces/{ns}/leaderworkersets", lws)
    with scheduler(live_cp, tenancy=TENANCY, podgroup_discovery_seconds=0.5) as s:
        wait_for(lambda: f"{ns}/vllm" in s.engine.loose_leader_worker_sets, timeout=20)
        names = solo_then_group(admin, ns)
    assert "solo" in names, names
    assert len(set(MEMBERS) - names) == 1, names
