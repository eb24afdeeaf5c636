"""DynamicResources: the pod's ResourceClaims must be allocatable (or usable) on the node.

kube-scheduler 1.34's plugin, with the device choice made by policy:

* PreFilter: every ``spec.resourceClaims`` entry resolves to a claim, not being deleted, not
  reserved by the maximum number of other pods; each request of a claim still to allocate
  names an existing DeviceClass. A template's claim is the one the pod's
  ``status.resourceClaimStatuses`` names, and it must be controlled by the pod
  (:meth:`DraStore.resolve`); an entry whose status names no claim needs none.
* Filter: a claim already allocated (in its status, or chosen for a pod placed earlier in the
  cycle: the assume cache) admits only the node its allocation is pinned to ("resourceclaim
  not available on the node"); the claims still to allocate must all fit together on the
  node's devices ("cannot allocate all claims"), see :mod:`.dra_allocator`.

For every feasible node the allocation found is recorded in ``cluster.dra`` (per pod, per
node slot); once the pod is placed it is the allocation the pre-bind step writes, and later
pods see its devices as taken. Pods without claims return at once, before any allocation.
"""

from __future__ import annotations

import numpy as np

from fairgpu.cluster.dra import ClaimAllocation, DraStore, InUse, NodeDevices, PodChoice
from fairgpu.cluster.state import ClusterState
from fairgpu.engine.framework import (
    SUCCESS,
    AttemptError,
    CycleState,
    FilterPlugin,
    FilterResult,
    PreFilterPlugin,
    Status,
)
from fairgpu.engine.plugins._volume_catalog import all_nodes
from fairgpu.engine.plugins.dra_allocator import (
    FRAGMENTATION_AWARE,
    POLICIES,
    AllocationError,
    Allocator,
    MatchCache,
)
from fairgpu.model.dra import RESERVED_FOR_MAX, ClaimInfo, DeviceResult, being_deleted
from fairgpu.model.dra_pins import NodePin, merge_pins
from fairgpu.model.pod import PodInfo

CANNOT_ALLOCATE = "cannot allocate all claims"
NOT_AVAILABLE = "resourceclaim not available on the node"
IN_USE = "resourceclaim in use"
_STATE = "DynamicResources"


def resolve_claims(
    pod: PodInfo, cluster: ClusterState
) -> tuple[list[ClaimInfo], list[ClaimAllocation]] | Status:
    """The pod's claims still to allocate and the allocations of the others, or the status
    that rejects the pod before any node is looked at."""
    store = cluster.dra
    pending: list[ClaimInfo] = []
    allocated: list[ClaimAllocation] = []
    for ref in pod.resource_claims:
        claim = store.resolve(pod, ref)
        if claim is None:
            continue  # the entry needs no claim
        if isinstance(claim, str):
            return Status.unschedulable(_STATE, claim)
        if claim.deleting:
            return Status.unschedulable(_STATE, being_deleted(claim, ref))
        alloc = store.effective(claim, cluster)
        if alloc is None:
            missing = _missing_class(claim, store)
            if missing:
                return Status.unschedulable(_STATE, missing)
            pending.append(claim)
            continue
        if len(claim.reserved_for) >= RESERVED_FOR_MAX and pod.uid not in claim.reserved_for:
            return Status.unschedulable(_STATE, IN_USE)
        allocated.append(alloc)
    return pending, allocated


def _missing_class(claim: ClaimInfo, store: DraStore) -> str:
    for req in claim.spec.requests:
        for alt in req.alternatives or (req,):
            if alt.class_name not in store.classes:
                return f"request {alt.result_name}: device class {alt.class_name} does not exist"
    return ""


class DynamicResources(PreFilterPlugin, FilterPlugin):
    """See the module doc. ``policy``: ``fragmentation-aware`` (default) or ``first-fit``
    (kube-scheduler's own choice, for comparison)."""

    name = "DynamicResources"

    def __init__(self, policy: str = FRAGMENTATION_AWARE) -> None:
        if policy not in POLICIES:
            raise ValueError(f"DynamicResources: unknown policy {policy!r}; known: {POLICIES}")
        self.policy = policy
        self._cache: MatchCache = {}
        self._cache_version = -1

    def pre_filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> Status:
        """Resolve the claims once per attempt; reject missing, deleted or full ones."""
        if not pod.resource_claims:
            return SUCCESS
        found = resolve_claims(pod, cluster)
        if isinstance(found, Status):
            return found
        cycle.data[_STATE] = found
        return SUCCESS

    def skips(self, pod: PodInfo, cluster: ClusterState) -> bool:
        """A pod without resource claims."""
        return not pod.resource_claims

    def filter(self, cycle: CycleState, pod: PodInfo, cluster: ClusterState) -> FilterResult:
        """Per node: allocated claims pinned elsewhere, then an allocation of the others."""
        n = cluster.size
        if self.skips(pod, cluster):
            return FilterResult(all_nodes(n))
        found = cycle.data.get(_STATE) or resolve_claims(pod, cluster)
        if isinstance(found, Status):
            return FilterResult(np.zeros(n, dtype=bool), {found.reasons[0]: np.ones(n, bool)})
        pending, allocated = found
        store = cluster.dra
        if self._cache_version != store.slice_version or len(self._cache) > 1_000_000:
            self._cache.clear()  # device objects of replaced slices must not stay alive
            self._cache_version = store.slice_version
        ok = np.zeros(n, dtype=bool)
        cannot = np.zeros(n, dtype=bool)
        unavailable = np.zeros(n, dtype=bool)
        choice = PodChoice()
        allocator = Allocator(pending, store.classes, self._cache, self.policy)
        in_use = store.in_use(cluster) if pending else InUse()
        # Only nodes that passed the earlier filters, as in kube-scheduler (a CEL error on a
        # node the pod's selector excludes must not fail the attempt).
        candidates = cycle.data.get("candidates")
        for idx, node in cluster.active_nodes():
            if candidates is not None and not candidates[idx]:
                ok[idx] = True  # rejected already; the earlier filter gives the reason
                continue
            if pending:
                view = store.node_devices(node.name, node.labels)
                try:
                    results = allocator.allocate(view, in_use) if view.devices else None
                except AllocationError as error:
                    raise AttemptError(self.name, f"pod {pod.key}: {error}") from None
                if results is None:
                    cannot[idx] = True
                    continue
                choice.node[idx] = tuple(
                    ClaimAllocation(c.key, r, *_pin(r, view, node.name))
                    for c, r in zip(pending, results, strict=True)
                )
            if not all(a.admits(node.name, node.labels) for a in allocated):
                unavailable[idx] = True
                continue
            ok[idx] = True
        if pending:
            self._record(store, cluster, pod.uid, choice)
        return FilterResult(ok, {CANNOT_ALLOCATE: cannot, NOT_AVAILABLE: unavailable})

    @staticmethod
    def _record(store: DraStore, cluster: ClusterState, uid: str, choice: PodChoice) -> None:
        if len(store.choices) > 4096:
            # Only placed pods' choices are read again; others are recomputed when retried.
            for other in [u for u in store.choices if u not in cluster.placements]:
                del store.choices[other]
        store.choices[uid] = choice


def _pin(
    results: tuple[DeviceResult, ...], view: NodeDevices, node_name: str
) -> tuple[str, NodePin | None]:
    """Where kube-scheduler lets the allocation be used: the node, when a device comes from a
    slice of that node; else the merged node selectors of label-selecting slices; devices of
    ``allNodes`` slices alone leave it usable everywhere."""
    terms = []
    for r in results:
        s = view.slice_of.get(r.key)
        if s is not None and s.node_name:
            return node_name, None
        if s is not None and s.selector_doc is not None:
            terms.append(s.selector_doc)
    return "", merge_pins(terms)
