"""A gang whose members must share a node starts on the one node that holds it, through a
real kube-apiserver -- not stuck on a node its first member fits but its second does not:
asked the Kubernetes way (required pod affinity to its own pods, topology key the hostname)
or, for a group named by annotation, with ``fairgpu.io/topology-required``."""

from __future__ import annotations

import time
from typing import Any

import pytest
from live_helpers import USAGE, bound, create, pod, scheduler, wait_for

from fairgpu.devcluster import ControlPlane, KubeClient
from fairgpu.model.gang_topology import ANN_TOPOLOGY_REQUIRED
from fairgpu.tenancy.resolve import LABEL_POD_GROUP

HOSTNAME = "kubernetes.io/hostname"


def member(name: str, labels: dict[str, str], notes: dict[str, str]) -> dict[str, Any]:
    """A 4-GPU member (2 needed) on any A100 node."""
    m = pod(
        name, gpus=4, pool=None, labels=labels, annotations={**notes, "fairgpu.io/min-member": "2"}
    )
    m["spec"]["tolerations"].append({"key": USAGE, "operator": "Exists", "effect": "NoSchedule"})
    return m


def same_node_members(
    admin: KubeClient, ns: str, live_cp: ControlPlane, members: list[dict[str, Any]]
) -> dict[str, str]:
    """Run ``members`` while the training and inference A100 nodes each run a 1-GPU pod --
    only the hybrid A100 node has room for both 4-GPU members (a member fits on the others,
    its sibling not), and binpack scores the fuller nodes first --; where they were bound."""
    for pool in ("training", "inference"):
        create(admin, ns, pod(f"busy-{pool}", gpus=1, pool=pool))
    names = {m["metadata"]["name"] for m in members}
    with scheduler(live_cp, policy="binpack"):
        wait_for(lambda: len(bound(admin, ns)) == 2)
        for m in members:
            create(admin, ns, m)
        wait_for(lambda: names <= set(bound(admin, ns)))
        time.sleep(0.5)  # a second binding of either would show now
    return {n: node for n, node in bound(admin, ns).items() if n in names}


@pytest.mark.integration
def test_a_gang_confined_to_one_node_starts_on_the_node_that_holds_it(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    term = {"labelSelector": {"matchLabels": {LABEL_POD_GROUP: "g"}}, "topologyKey": HOSTNAME}
    members = [member(f"g-{i}", {LABEL_POD_GROUP: "g"}, {}) for i in range(2)]
    for m in members:
        m["spec"]["affinity"] = {
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
    nodes = same_node_members(admin, ns, live_cp, members)
    assert nodes == {"g-0": "lv-hybrid-a100", "g-1": "lv-hybrid-a100"}


@pytest.mark.integration
def test_the_topology_annotation_confines_a_group_named_by_annotation(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    # A Volcano-style group: named by annotation, which no label selector can select.
    notes = {"scheduling.k8s.io/group-name": "v", ANN_TOPOLOGY_REQUIRED: HOSTNAME}
    members = [member(f"v-{i}", {}, notes) for i in range(2)]
    nodes = same_node_members(admin, ns, live_cp, members)
    assert nodes == {"v-0": "lv-hybrid-a100", "v-1": "lv-hybrid-a100"}
