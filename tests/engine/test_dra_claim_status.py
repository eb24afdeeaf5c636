"""A template entry's claim is the one the pod's ``status.resourceClaimStatuses`` names, and it
must be the pod's own (kube-scheduler 1.34's ``resourceclaim.Name`` and ``IsForPod``); the
claim's ``pod-claim-name`` annotation plays no part in finding it."""

from __future__ import annotations

from typing import Any

from fairgpu.api.objects import Pod, decode
from fairgpu.kube.cache import CacheChanges, PodRecord, SchedulerCache
from fairgpu.model.pod import PodInfo, pod_from_k8s
from fairgpu.sim.arrivals import future_copy
from tests.builders import pod_manifest
from tests.engine.dra_builders import (
    claim_doc,
    device_class,
    devices_of,
    dra_cluster,
    gpu,
    scheduler,
    slice_doc,
    template_doc,
)

TWO_GPUS = slice_doc("n1", gpu("g0"), gpu("g1"))
UID = "uid-p"
FROM = ' (pod claim "gpu" from template "one-gpu")'


def template_pod(
    statuses: list[dict[str, Any]] | None = None, name: str = "p", uid: str = UID
) -> PodInfo:
    """A pod whose entry ``gpu`` uses template ``one-gpu``, with ``statuses`` as its
    ``status.resourceClaimStatuses`` (none: the controller has not acted yet)."""
    doc = pod_manifest(
        name,
        requests={"cpu": "100m"},
        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
    )
    doc["metadata"]["uid"] = uid
    if statuses is not None:
        doc["status"] = {"resourceClaimStatuses": statuses}
    return pod_from_k8s(decode(doc, Pod))


def generated(name: str, owner: str = UID, deleting: bool = False) -> dict[str, Any]:
    """A claim as the resourceclaim controller makes it for entry ``gpu`` of pod ``owner``."""
    doc = claim_doc(name)
    meta = doc["metadata"]
    meta["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpu"}
    meta["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner, "controller": True}
    ]
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
        meta["finalizers"] = ["example.com/keep"]
    return doc


def reason(p: PodInfo, *docs: dict[str, Any]) -> str:
    """The pending reason of ``p`` in a one-node cluster with two GPUs and ``docs``, or ''
    when it fits."""
    state = dra_cluster(["n1"], device_class(), TWO_GPUS, template_doc("one-gpu"), *docs)
    result = scheduler().schedule(p, state)
    return "" if result.ok else result.reason()


def test_status_entries_are_decoded() -> None:
    p = template_pod([{"name": "gpu", "resourceClaimName": "p-gpu-x1"}, {"name": "other"}])
    assert p.claim_statuses == (("gpu", "p-gpu-x1"), ("other", None))


def test_the_claim_the_status_names_is_used() -> None:
    # Another claim the controller made for the same entry (an orphan: the status does not
    # name it) carries the same annotation and owner; it is not the pod's claim.
    docs = (generated("p-gpu-x1"), generated("p-gpu-orphan"))
    state = dra_cluster(["n1"], device_class(), TWO_GPUS, template_doc("one-gpu"), *docs)
    p = template_pod([{"name": "gpu", "resourceClaimName": "p-gpu-x1"}])
    sched = scheduler()
    result = sched.schedule(p, state)
    assert result.ok and result.node is not None
    state.assign(p, result.node, result.devices)
    assert state.dra.commit(p, result.node) == ["default/p-gpu-x1"]
    assert len(devices_of(state, "p-gpu-x1")) == 1 and not devices_of(state, "p-gpu-orphan")


def test_without_a_status_entry_the_claim_is_not_created_yet() -> None:
    # The controller made the claim (annotation and owner are right) but has not recorded
    # it in the pod's status: kube-scheduler does not look for it, so neither does fairgpu.
    got = reason(template_pod(), generated("p-gpu-x1"))
    assert got == 'pod "default/p": ResourceClaim not created yet' + FROM


def test_an_entry_without_a_claim_name_needs_no_claim() -> None:
    assert reason(template_pod([{"name": "gpu", "resourceClaimName": None}])) == ""
    assert reason(template_pod([{"name": "gpu"}])) == ""


def test_a_claim_of_another_pod_is_refused() -> None:
    p = template_pod([{"name": "gpu", "resourceClaimName": "p-gpu-x1"}])
    got = reason(p, generated("p-gpu-x1", owner="uid-other"))
    assert got == (
        "ResourceClaim default/p-gpu-x1 was not created for pod default/p (pod is not owner)" + FROM
    )


def test_a_claim_without_owner_is_refused() -> None:
    p = template_pod([{"name": "gpu", "resourceClaimName": "by-hand"}])
    assert "(pod is not owner)" in reason(p, claim_doc("by-hand"))


def test_a_claim_being_deleted_is_refused_before_its_owner_is_checked() -> None:
    p = template_pod([{"name": "gpu", "resourceClaimName": "p-gpu-x1"}])
    expected = 'resourceclaim "p-gpu-x1" is being deleted' + FROM
    assert reason(p, generated("p-gpu-x1", deleting=True)) == expected
    assert reason(p, generated("p-gpu-x1", owner="uid-other", deleting=True)) == expected


def test_a_claim_the_status_names_must_exist() -> None:
    p = template_pod([{"name": "gpu", "resourceClaimName": "gone"}])
    # The claim a stale index would have found is not the one the status names.
    got = reason(p, generated("p-gpu-x1"))
    assert got == 'resourceclaim.resource.k8s.io "gone" not found' + FROM


def test_simulated_controller_records_the_claim_in_the_pod_status() -> None:
    state = dra_cluster(["n1"], device_class(), TWO_GPUS, template_doc("one-gpu"))
    p = template_pod()
    assert state.dra.create_pod_claims(p) == ["default/p-gpu"]
    assert p.claim_statuses == (("gpu", "p-gpu"),)
    assert state.dra.create_pod_claims(p) == []  # made already: nothing to do
    # A claim of that name that is not the pod's is left alone; the pod gets a fresh one.
    other = template_pod([{"name": "gpu", "resourceClaimName": "p-gpu"}], uid="uid-2")
    assert state.dra.create_pod_claims(other) == ["default/p-gpu-2"]
    assert other.claim_statuses == (("gpu", "p-gpu-2"),)
    assert state.dra.claims["default/p-gpu-2"].owner_pod == "uid-2"
    # Released (the claim is deleted with its pod) and made again when the pod waits again.
    state.dra.release_pod(p)
    assert "default/p-gpu" not in state.dra.claims
    assert state.dra.create_pod_claims(p) == ["default/p-gpu"]


def test_a_future_copy_of_a_pod_has_no_claim_statuses() -> None:
    p = template_pod([{"name": "gpu", "resourceClaimName": "p-gpu-x1"}])
    assert future_copy(p, "~1", 5.0).claim_statuses == ()


def test_a_status_only_update_of_a_pending_pod_triggers_a_cycle() -> None:
    """The controller names the claim in the pod's status after creating it: that update
    alone must bring the pod back to the engine (kube-scheduler's
    UpdatePodGeneratedResourceClaim event), not wait for the next periodic cycle."""
    cache = SchedulerCache("default-scheduler")

    def record(p: PodInfo) -> PodRecord:
        return PodRecord(p.uid, p.namespace, p.name, "", p.scheduler_name, "Pending", False, p)

    cache.apply_pod("ADDED", record(template_pod()), 0.0, CacheChanges())
    same = CacheChanges()
    cache.apply_pod("MODIFIED", record(template_pod()), 1.0, same)
    assert not same.dirty  # nothing the engine reads changed
    named = CacheChanges()
    p = template_pod([{"name": "gpu", "resourceClaimName": "p-gpu-x1"}])
    cache.apply_pod("MODIFIED", record(p), 2.0, named)
    assert named.dirty and cache.pending[UID].claim_statuses == (("gpu", "p-gpu-x1"),)
