"""Binding pods that use ResourceClaims, as kube-scheduler's DynamicResources PreBind does it.

Before a pod's ``pods/binding`` is posted, each of its claims gets, in one write of the
``status`` subresource (with the claim's resourceVersion: a conflict re-reads the claim and
tries again, a few times):

* the allocation the engine chose, when the claim was not allocated yet: ``status.allocation``
  with ``devices.results`` (request, driver, pool, device; ``adminAccess`` when asked) and a
  ``nodeSelector`` pinning the node (``matchFields`` ``metadata.name In [node]``) when a device
  belongs to that node's slices. As kube-scheduler does, the finalizer
  ``resource.kubernetes.io/delete-protection`` is added first, by a plain update, so the claim
  cannot vanish while allocated; a claim found allocated meanwhile (by someone else) fails the
  bind instead of being allocated twice;
* the pod in ``status.reservedFor`` (``resource: pods``, name, uid).

A claim the engine found allocated (a shared claim, or one a pod placed earlier in the same
cycle is allocating) is only reserved; if that allocation is still being written by another
bind, the write waits briefly for it.

Release undoes it: when the bind fails, or a pod bound by this scheduler goes away, the pod is
removed from ``reservedFor``, and a claim nobody reserves any more loses its allocation and the
finalizer, as kube-controller-manager's resourceclaim controller does (both may run: the
writes are conditional, the later one finds nothing left to do).

:class:`DraBinder` keeps, on the loop thread, the claims each pod was reserved in, and runs the
writes on the binder's thread pool.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from fairgpu.cluster.state import ClusterState
from fairgpu.kube.client import CONNECTION_ERRORS, ApiResponse, RestClient
from fairgpu.kube.dra_watch import DRA_API
from fairgpu.model.pod import PodInfo

__all__ = [
    "FINALIZER",
    "ClaimWrite",
    "DraBinder",
    "DraPlan",
    "deallocate",
    "plan_for",
    "prebind",
    "release",
]

log = logging.getLogger("fairgpu.kube.dra")

#: The finalizer kube-scheduler puts on a claim it allocates (resource.k8s.io/v1 Finalizer).
FINALIZER = "resource.kubernetes.io/delete-protection"
#: Attempts of one claim write on resourceVersion conflicts (client-go's retry.DefaultRetry).
CONFLICT_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class ClaimWrite:
    """One claim of the pod: ``allocation`` to write (``status.allocation`` JSON), or None
    when the claim is already allocated and only the reservation is added. ``after``: the
    claims (``namespace/name``, uid) holding devices of that allocation -- a preemption's
    victims' claims, not deallocated yet -- that must be deallocated (or gone) before it is
    written."""

    namespace: str
    name: str
    uid: str
    allocation: dict[str, Any] | None = None
    after: tuple[tuple[str, str], ...] = ()

    @property
    def path(self) -> str:
        """The claim's API path."""
        return f"{DRA_API}/namespaces/{self.namespace}/resourceclaims/{self.name}"


@dataclass(frozen=True, slots=True)
class DraPlan:
    """The claim writes of one pod bound to ``node``; ``missing`` names the pod's claims
    that disappeared since it was placed (the bind then fails, and the pod waits again)."""

    pod_namespace: str
    pod_name: str
    pod_uid: str
    node: str
    claims: tuple[ClaimWrite, ...]
    missing: tuple[str, ...] = ()

    @property
    def pod_key(self) -> str:
        """``namespace/name`` of the pod."""
        return f"{self.pod_namespace}/{self.pod_name}"


class WriteError(Exception):
    """A claim write that failed: HTTP ``status`` (409 for a conflict found here) and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


_FAILURES: tuple[type[BaseException], ...] = (WriteError, *CONNECTION_ERRORS)


def plan_for(cluster: ClusterState, pod: PodInfo, node_name: str) -> DraPlan | None:
    """The claim writes for ``pod`` placed on ``node_name`` (None: the pod has no claims).

    Read on the loop thread right after the engine placed the pod: the allocations are the
    ones the DynamicResources filter chose for that node.
    """
    if not pod.resource_claims:
        return None
    store = cluster.dra
    slot = cluster.node_index.get(node_name)
    chosen = {a.claim: a for a in store.decision(pod.uid, slot)} if slot is not None else {}
    writes = []
    missing = []
    for ref in pod.resource_claims:
        claim = store.resolve(pod, ref)
        if claim is None:
            continue  # the entry needs no claim
        if isinstance(claim, str):
            missing.append(ref[1] or f"of spec.resourceClaims {ref[0]}")
            continue
        alloc = chosen.get(claim.key)
        if alloc is None or claim.allocation is not None:
            writes.append(ClaimWrite(claim.namespace, claim.name, claim.uid))
            continue
        after = tuple((c.key, c.uid) for c in store.conflicting(claim.key, alloc.results))
        writes.append(ClaimWrite(claim.namespace, claim.name, claim.uid, alloc.status(), after))
    return DraPlan(pod.namespace, pod.name, pod.uid, node_name, tuple(writes), tuple(missing))


# ---- pre-bind ------------------------------------------------------------------------------
def prebind(client: RestClient, plan: DraPlan, wait_allocated: float = 10.0) -> tuple[int, str]:
    """Allocate and reserve every claim of the plan; returns (HTTP status, message) of the
    first failure, after releasing what was written, or (200, "") when all succeeded.
    Connection errors count as status 0."""
    if plan.missing:
        return 409, f"resourceclaim {plan.missing[0]} not found (deleted since the pod was placed)"
    for write in plan.claims:
        try:
            _reserve(client, plan, write, wait_allocated)
        except _FAILURES as error:
            status = error.status if isinstance(error, WriteError) else 0
            release(client, plan)
            return status, f"resourceclaim {write.namespace}/{write.name}: {error}"
    return 200, ""


def _reserve(client: RestClient, plan: DraPlan, write: ClaimWrite, wait: float) -> None:
    deadline = time.monotonic() + wait
    conflicts = 0
    _wait_deallocated(client, write, deadline)
    while True:
        claim = _get(client, write)
        if _reserved(claim, plan.pod_uid):
            _check_reserved(claim, plan, write)
            return  # written before (a lost reply, a retry): nothing more to do
        if write.allocation is None and not claim["status"].get("allocation"):
            if time.monotonic() > deadline:
                raise WriteError(409, "not allocated (the pod that allocates it did not bind)")
            time.sleep(0.1)  # another bind of this cycle is writing the allocation
            continue
        r = _write(client, plan, write, claim)
        if r.ok:
            return
        conflicts += 1
        if r.status != 409 or conflicts >= CONFLICT_ATTEMPTS:
            raise WriteError(r.status, f"add allocation and reservation: {r.message}")


def _wait_deallocated(client: RestClient, write: ClaimWrite, deadline: float) -> None:
    """Wait until every claim of ``write.after`` is deallocated, gone or replaced by another
    object of its name; a :class:`WriteError` (409) at ``deadline``. Its pods are gone when
    a preemptor's bind is posted; their claims are released by this scheduler's binder (the
    release is queued first) or by kube-controller-manager, moments later."""
    for key, uid in write.after:
        namespace, _, name = key.partition("/")
        path = f"{DRA_API}/namespaces/{namespace}/resourceclaims/{name}"
        while True:
            r = client.request("GET", path)
            if r.status == 404:
                break
            if not r.ok or not isinstance(r.body, dict):
                raise WriteError(r.status, f"get {key}: {r.message}")
            if r.body.get("metadata", {}).get("uid") != uid:
                break
            if not (r.body.get("status") or {}).get("allocation"):
                break
            if time.monotonic() > deadline:
                raise WriteError(409, f"its devices are still allocated to resourceclaim {key}")
            time.sleep(0.1)


def _write(
    client: RestClient, plan: DraPlan, write: ClaimWrite, claim: dict[str, Any]
) -> ApiResponse:
    """One attempt: the finalizer (a plain update: the status subresource ignores metadata),
    then allocation and reservation in one status update; a 409 reply means: read again."""
    status = claim["status"]
    if write.allocation is not None:
        if status.get("allocation"):
            raise WriteError(409, "got allocated elsewhere in the meantime")
        finalizers = claim["metadata"].get("finalizers") or []
        if FINALIZER not in finalizers:
            claim["metadata"]["finalizers"] = [*finalizers, FINALIZER]
            r = client.request("PUT", write.path, claim)
            if not r.ok or not isinstance(r.body, dict):
                return r
            claim = r.body
            status = claim.setdefault("status", {})
        status["allocation"] = write.allocation
    elif (node := _pinned(status["allocation"])) not in ("", plan.node):
        raise WriteError(409, f"allocated for node {node}")
    entry = {"resource": "pods", "name": plan.pod_name, "uid": plan.pod_uid}
    status.setdefault("reservedFor", []).append(entry)
    return client.request("PUT", f"{write.path}/status", claim)


def _get(client: RestClient, write: ClaimWrite) -> dict[str, Any]:
    r = client.request("GET", write.path)
    if not r.ok or not isinstance(r.body, dict):
        raise WriteError(r.status, f"get: {r.message}")
    meta = r.body.setdefault("metadata", {})
    if write.uid and meta.get("uid") != write.uid:
        raise WriteError(409, "was replaced")
    if meta.get("deletionTimestamp"):
        raise WriteError(409, "got deleted in the meantime")
    r.body.setdefault("status", {})
    return r.body


def _check_reserved(claim: dict[str, Any], plan: DraPlan, write: ClaimWrite) -> None:
    """A claim already reserved for the pod must hold what this bind chose (an earlier
    attempt whose release failed may have left another allocation)."""
    allocation = claim["status"].get("allocation") or {}
    if write.allocation is not None and allocation != write.allocation:
        raise WriteError(409, "reserved for the pod with another allocation")
    if _pinned(allocation) not in ("", plan.node):
        raise WriteError(409, f"reserved for the pod on node {_pinned(allocation)}")


def _reserved(claim: dict[str, Any], uid: str) -> bool:
    return any(r.get("uid") == uid for r in claim["status"].get("reservedFor") or [])


def _pinned(allocation: dict[str, Any]) -> str:
    """The node an allocation's nodeSelector pins ('' when it pins none)."""
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for req in term.get("matchFields") or []:
            values = req.get("values") or []
            by_name = req.get("key") == "metadata.name" and req.get("operator") == "In"
            if by_name and len(values) == 1:
                return str(values[0])
    return ""


# ---- release -------------------------------------------------------------------------------
def release(client: RestClient, plan: DraPlan) -> None:
    """Remove the pod from every claim's ``reservedFor``; deallocate the claims left unused.
    Best effort: failures are logged (kube-controller-manager cleans up after a pod too)."""
    for write in plan.claims:
        try:
            _release_claim(client, plan.pod_uid, write)
        except _FAILURES as error:
            log.warning(
                "could not release resource claim",
                extra={
                    "pod": plan.pod_key,
                    "claim": f"{write.namespace}/{write.name}",
                    "error": str(error),
                },
            )


def _release_claim(client: RestClient, pod_uid: str, write: ClaimWrite) -> None:
    for _ in range(CONFLICT_ATTEMPTS):
        r = client.request("GET", write.path)
        if r.status == 404 or not isinstance(r.body, dict):
            return
        claim = r.body
        meta = claim.setdefault("metadata", {})
        if write.uid and meta.get("uid") != write.uid:
            return  # another claim of that name: not ours to touch
        status = claim.setdefault("status", {})
        left = [e for e in status.get("reservedFor") or [] if e.get("uid") != pod_uid]
        ours = FINALIZER in meta.get("finalizers", [])
        if len(left) < len(status.get("reservedFor") or []):
            status["reservedFor"] = left
            if not left and ours:
                status.pop("allocation", None)
            r = client.request("PUT", f"{write.path}/status", claim)
            if r.status == 409:
                continue
            if not r.ok or not isinstance(r.body, dict):
                raise WriteError(r.status, f"remove reservation: {r.message}")
            claim = r.body
        if ours and not (claim.get("status") or {}).get("allocation"):
            finalizers = [f for f in claim["metadata"].get("finalizers", []) if f != FINALIZER]
            claim["metadata"]["finalizers"] = finalizers
            r = client.request("PUT", write.path, claim)
            if r.status == 409:
                continue
            if not r.ok and r.status != 404:
                raise WriteError(r.status, f"remove finalizer: {r.message}")
        return
    raise WriteError(409, "conflicts on every attempt")


def deallocate(client: RestClient, write: ClaimWrite, pod_uid: str) -> bool:
    """kube-scheduler's DynamicResources PostFilter write: clear the allocation,
    reservations and device status of claim ``write``, reserved by nobody but ``pod_uid``.
    One conditional status update (the claim's resourceVersion): a claim changed, reserved
    or gone meanwhile is left as it is -- the next cycle decides again. True if cleared."""
    r = client.request("GET", write.path)
    if r.status == 404 or not isinstance(r.body, dict):
        return False
    claim = r.body
    if write.uid and claim.get("metadata", {}).get("uid") != write.uid:
        return False  # another claim of that name
    status = claim.setdefault("status", {})
    others = [e for e in status.get("reservedFor") or [] if e.get("uid") != pod_uid]
    if not status.get("allocation") or others:
        return False
    for field in ("allocation", "reservedFor", "devices"):
        status.pop(field, None)
    r = client.request("PUT", f"{write.path}/status", claim)
    if r.status in (404, 409):
        return False
    if not r.ok:
        raise WriteError(r.status, f"deallocate: {r.message}")
    return True


def _deallocate_logged(client: RestClient, write: ClaimWrite, pod_key: str, pod_uid: str) -> None:
    try:
        if deallocate(client, write, pod_uid):
            log.info(
                "deallocated a resource claim reserved by no pod",
                extra={"claim": f"{write.namespace}/{write.name}", "pod": pod_key},
            )
    except _FAILURES as error:
        log.warning(
            "could not deallocate resource claim",
            extra={"claim": f"{write.namespace}/{write.name}", "error": str(error)},
        )


# ---- loop-side bookkeeping -------------------------------------------------------------------
class DraBinder:
    """The claims of the pods this scheduler reserved (loop thread), released on the binder's
    pool when a bind fails or the pod goes away.

    A pod bound before this process started (by an earlier run or another replica) is
    released from the claims the store shows reserved for it, if it was this scheduler's.

    Args:
        client: the API client.
        pool: the thread pool the writes run on (the binder's).
        scheduler_name: the pods that are this scheduler's (``spec.schedulerName``).
    """

    def __init__(self, client: RestClient, pool: ThreadPoolExecutor, scheduler_name: str) -> None:
        self.client = client
        self.pool = pool
        self.scheduler_name = scheduler_name
        self.reserved: dict[str, DraPlan] = {}

    def plan(self, cluster: ClusterState, pod: PodInfo, node_name: str) -> DraPlan | None:
        """The pod's claim writes, remembered so its claims are released when it goes."""
        plan = plan_for(cluster, pod, node_name)
        if plan is not None:
            self.reserved[pod.uid] = plan
        return plan

    def deallocate(self, claim_key: str, claim_uid: str, pod: PodInfo) -> bool:
        """Clear a stale allocation the engine found (on the pool), unless a pod this
        scheduler is binding or bound is reserved in that claim: its write may not be in the
        cache yet. False when skipped."""
        namespace, _, name = claim_key.partition("/")
        for plan in self.reserved.values():
            if any(w.namespace == namespace and w.name == name for w in plan.claims):
                return False
        write = ClaimWrite(namespace, name, claim_uid)
        self.pool.submit(_deallocate_logged, self.client, write, pod.key, pod.uid)
        return True

    def failed(self, uid: str) -> None:
        """The pod's bind failed (its claims were released by the bind call)."""
        self.reserved.pop(uid, None)

    def gone(self, uids: set[str], last: dict[str, PodInfo], cluster: ClusterState) -> None:
        """Pods deleted or finished (``last``: the bound ones as last seen): release the
        claims they were reserved in, and drop their device choices from the store."""
        for uid in uids:
            cluster.dra.choices.pop(uid, None)
            plan = self.reserved.pop(uid, None) or self._found(last.get(uid), cluster)
            if plan is not None:
                self.pool.submit(release, self.client, plan)

    def _found(self, pod: PodInfo | None, cluster: ClusterState) -> DraPlan | None:
        """The claims the store shows reserved for one of this scheduler's pods."""
        if pod is None or pod.scheduler_name != self.scheduler_name:
            return None
        store = cluster.dra
        writes = tuple(
            ClaimWrite(c.namespace, c.name, c.uid)
            for ref in pod.resource_claims
            if (c := store.pod_claim(pod, ref)) is not None and pod.uid in c.reserved_for
        )
        return DraPlan(pod.namespace, pod.name, pod.uid, "", writes) if writes else None
