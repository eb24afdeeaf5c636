"""A gang whose members must share a node (required pod affinity to its own pods, topology
key the hostname) starts on the one node that holds it, through a real kube-apiserver --
not stuck on a node its first member fits but its second does not."""

from __future__ import annotations

import time
from typing import Any

import pytest
from live_helpers import USAGE, bound, create, pod, scheduler, wait_for

from fairgpu.devcluster import ControlPlane, KubeClient
from fairgpu.tenancy.resolve import LABEL_POD_GROUP

HOSTNAME = "kubernetes.io/hostname"


def member(name: str) -> dict[str, Any]:
    """A 4-GPU member of pod group ``g`` (2 needed) on any A100 node, sharing its node with
    the other member."""
    m = pod(name, gpus=4, pool=None, labels={LABEL_POD_GROUP: "g"})
    m["metadata"]["annotations"]["fairgpu.io/min-member"] = "2"
    m["spec"]["tolerations"].append({"key": USAGE, "operator": "Exists", "effect": "NoSchedule"})
    term = {"labelSelector": {"matchLabels": {LABEL_POD_GROUP: "g"}}, "topologyKey": HOSTNAME}
    m["spec"]["affinity"] = {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    }
    return m


@pytest.mark.integration
def test_a_gang_confined_to_one_node_starts_on_the_node_that_holds_it(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    # The training and inference A100 nodes each run a 1-GPU pod: only the hybrid A100 node
    # has room for both 4-GPU members (a member fits on the others, its sibling not), and
    # binpack scores the fuller nodes first.
    for pool in ("training", "inference"):
        create(admin, ns, pod(f"busy-{pool}", gpus=1, pool=pool))
    with scheduler(live_cp, policy="binpack"):
        wait_for(lambda: len(bound(admin, ns)) == 2)
        for i in range(2):
            create(admin, ns, member(f"g-{i}"))
        wait_for(lambda: {"g-0", "g-1"} <= set(bound(admin, ns)))
        time.sleep(0.5)  # a second binding of either would show now
    nodes = bound(admin, ns)
    assert nodes["g-0"] == nodes["g-1"] == "lv-hybrid-a100", nodes


@pytest.mark.integration
def test_the_topology_annotation_confines_a_group_named_by_annotation(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    # A Volcano-style group (named by annotation: no label selector can select it) asks by
    # annotation that its two 4-GPU members share a node; the same busy nodes as above.
    for pool in ("training", "inference"):
        create(admin, ns, pod(f"busy-{pool}", gpus=1, pool=pool))
    notes = {
        "scheduling.k8s.io/group-name": "v",
        "fairgpu.io/min-member": "2",
        "fairgpu.io/topology-required": HOSTNAME,
    }
    with scheduler(live_cp, policy="binpack"):
        wait_for(lambda: len(bound(admin, ns)) == 2)
        for i in range(2):
            m = pod(f"v-{i}", gpus=4, pool=None, annotations=dict(notes))
            m["spec"]["tolerations"].append(
                {"key": USAGE, "operator": "Exists", "effect": "NoSchedule"}
            )
            create(admin, ns, m)
        wait_for(lambda: {"v-0", "v-1"} <= set(bound(admin, ns)))
        time.sleep(0.5)
    nodes = bound(admin, ns)
    assert nodes["v-0"] == nodes["v-1"] == "lv-hybrid-a100", nodes
