"""Stale claim allocations: kube-scheduler's DynamicResources PostFilter.

A ResourceClaim can stay allocated with nobody reserving it: its pod was deleted before the
controller cleaned up, or a scheduling attempt wrote the allocation and its bind then failed.
The allocation still pins the claim to a node (or to the nodes its devices' slices select),
so a pod that needs the claim can only go there -- and if that node has no room, the pod waits
for ever, while another node could have served a fresh allocation.

kube-scheduler 1.34 unblocks it in PostFilter, which runs when the pod fits no node: if one of
the pod's claims was *unavailable* on some node that passed every other filter ("resourceclaim
not available on the node") and the claim is reserved by no pod, or only by this pod, it
clears the claim's allocation and reservations (a status update) and the pod is retried; the
next attempt allocates the claim wherever it fits. Upstream picks one such claim at random;
here the first by ``namespace/name``, so a replay decides the same.

Never deallocated: a claim a placed pod uses (being bound, or running), one reserved by another
pod, one written by nobody yet (an allocation the engine only chose for a placed pod this cycle).
"""

from __future__ import annotations

from fairgpu.cluster.dra import ClaimAllocation
from fairgpu.cluster.state import ClusterState
from fairgpu.engine.decisions import Deallocate
from fairgpu.engine.plugins.dynamic_resources import NOT_AVAILABLE
from fairgpu.model.dra import ClaimInfo
from fairgpu.model.pod import PodInfo

__all__ = ["stale_claim_to_free"]


def stale_claim_to_free(pod: PodInfo, reason: str, cluster: ClusterState) -> Deallocate | None:
    """The claim to deallocate for ``pod``, which stays pending for ``reason`` (its
    "0/N nodes are available" message), or None: only when some node rejected the pod just
    because one of its allocated claims is pinned elsewhere."""
    if not pod.resource_claims or NOT_AVAILABLE not in reason:
        return None
    store = cluster.dra
    candidates = []
    for ref in pod.resource_claims:
        claim = store.pod_claim(pod, ref)
        if claim is not None and _stale(claim, pod) and _pinned(claim, cluster):
            candidates.append(claim)
    if not candidates:
        return None
    used = _claims_of_placed_pods(cluster)
    for claim in sorted(candidates, key=lambda c: c.key):
        if claim.key not in used:
            return Deallocate(claim.key, claim.uid, pod)
    return None


def _stale(claim: ClaimInfo, pod: PodInfo) -> bool:
    """Allocated in its status, and reserved by nobody else."""
    return claim.allocation is not None and set(claim.reserved_for) <= {pod.uid}


def _pinned(claim: ClaimInfo, cluster: ClusterState) -> bool:
    """Does the allocation keep the claim off some node?"""
    alloc = ClaimAllocation(claim.key, claim.allocation or (), claim.node, claim.pin)
    return any(not alloc.admits(node.name, node.labels) for _, node in cluster.active_nodes())


def _claims_of_placed_pods(cluster: ClusterState) -> set[str]:
    """The keys of the claims that placed pods (bound, or assumed this cycle) use."""
    store = cluster.dra
    out: set[str] = set()
    for uid in cluster.placements:
        pod = cluster.pods[uid]
        for ref in pod.resource_claims:
            claim = store.pod_claim(pod, ref)
            if claim is not None:
                out.add(claim.key)
    return out
