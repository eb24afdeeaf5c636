"""Dynamic Resource Allocation for the live scheduler: watch DeviceClasses, ResourceSlices and
ResourceClaims (``resource.k8s.io/v1``) into the cluster's :class:`~fairgpu.cluster.dra.DraStore`.

:class:`DraWatch` runs one reflector per kind; the scheduler's loop applies their events with
:meth:`DraWatch.apply` between cycles, so the engine's DynamicResources plugin reads a store
that never changes under it. Claims are stored with the allocation and ``reservedFor`` of their
status, whoever wrote them (kube-scheduler, another fairgpu replica, a previous run): devices
allocated by others are taken, so no exclusive device is handed out twice.

A pod whose claim does not exist yet (a ``resourceClaimName`` not created, or the claim
kube-controller-manager's resourceclaim controller makes from a template) stays pending with
that reason; the claim's arrival invalidates the engine's cached failures like a release does,
so the pod is tried again at once.

The devices a placed pod's claims were given stay in the store's per-pod choice (the assume
cache) until the watch shows every one of those claims allocated: until then a stale event of
a claim without allocation cannot make its devices look free.

ResourceClaimTemplates are not watched: kube-controller-manager makes the claims, and the
scheduler only ever reads claims. A cluster that does not serve ``resource.k8s.io/v1``
(Kubernetes before 1.34, or the API turned off) is not watched at all: its pods with claims
stay pending (their claims are never found), and everything else is scheduled as before.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

from fairgpu.api import dra as api
from fairgpu.cluster.dra import DraStore
from fairgpu.cluster.state import ClusterState
from fairgpu.kube.client import CONNECTION_ERRORS, RestClient
from fairgpu.kube.decode import Invalid, or_invalid
from fairgpu.kube.reflector import Reflector, stop_all
from fairgpu.model.dra import (
    ClaimInfo,
    DeviceClassInfo,
    SliceInfo,
    claim_from_k8s,
    class_from_k8s,
    slice_from_k8s,
)

__all__ = ["DRA_API", "DraWatch", "Invalid", "read_dra"]

log = logging.getLogger("fairgpu.kube.dra")

#: The API group/version the watches (and the binding writes) use.
DRA_API = "/apis/resource.k8s.io/v1"

# kind -> (collection path, struct, slim decoder, DraStore table)
_RESOURCES: dict[str, tuple[str, type, Callable[[Any], Any], str]] = {
    "DeviceClass": (f"{DRA_API}/deviceclasses", api.DeviceClass, class_from_k8s, "class"),
    "ResourceSlice": (f"{DRA_API}/resourceslices", api.ResourceSlice, slice_from_k8s, "slice"),
    "ResourceClaim": (f"{DRA_API}/resourceclaims", api.ResourceClaim, claim_from_k8s, "claim"),
}


def _key(obj: DeviceClassInfo | SliceInfo | ClaimInfo) -> str:
    return obj.key if isinstance(obj, ClaimInfo) else obj.name


def _decoder(kind: str) -> Callable[[bytes], Any]:
    _, struct, slim, _ = _RESOURCES[kind]
    return or_invalid(kind, struct, slim)


class DraWatch:
    """The DRA reflectors; ``sink(event_type, (kind, object))`` receives their events (on
    reflector threads) for :meth:`apply` on the scheduler's loop thread."""

    def __init__(self, client: RestClient, sink: Callable[[str, Any], None]) -> None:
        self.client = client
        self.served = True
        self.reflectors: list[Reflector] = []
        for kind, (path, *_) in _RESOURCES.items():

            def forward(etype: str, obj: Any, kind: str = kind) -> None:
                sink(etype, (kind, obj))

            name = path.rsplit("/", 1)[1]  # resourceclaims: not "claim", a PVC reflector's
            self.reflectors.append(Reflector(client, path, _decoder(kind), forward, name=name))

    def start(self) -> None:
        """Start every reflector, if the API server serves ``resource.k8s.io/v1``."""
        # Unreachable: not known yet; the reflectors retry until the API server answers.
        with contextlib.suppress(*CONNECTION_ERRORS):
            self.served = _served(self.client)
        if not self.served:
            log.warning("resource.k8s.io/v1 not served: pods with resource claims stay pending")
            return
        for reflector in self.reflectors:
            reflector.start()

    def stop(self) -> None:
        """Stop every reflector."""
        stop_all(self.reflectors)

    def synced(self) -> bool:
        """True once every collection has been listed (at once when DRA is not served)."""
        return not self.served or all(r.synced.is_set() for r in self.reflectors)

    @staticmethod
    def apply(cluster: ClusterState, etype: str, payload: tuple[str, Any]) -> bool:
        """Apply one reflector event to ``cluster.dra``; True if anything changed.

        A change may make a pending pod schedulable (a claim created, devices published or
        deallocated), so the engine's cached failures are invalidated as after a release.
        """
        kind, obj = payload
        store = cluster.dra
        table = _RESOURCES[kind][3]
        before = store.version
        if etype == "SYNC":
            _sync(store, table, obj)
        elif etype == "DELETED":
            store.remove(table, obj.key if isinstance(obj, Invalid) else _key(obj))
        else:
            _put(store, obj)
        if store.version == before:
            return False
        if table == "claim":
            settle_choices(cluster)
        cluster.release_version += 1
        return True


def _served(client: RestClient) -> bool:
    return client.request("GET", DRA_API, limited=False).status != 404


def read_dra(
    client: RestClient, list_all: Callable[[str, Callable[[bytes], Any]], list[Any]]
) -> list[tuple[str, list[Any]]]:
    """Every DeviceClass, ResourceSlice and ResourceClaim, decoded as the watches decode them,
    as ``(kind, objects)`` payloads for :meth:`DraWatch.apply` (``SYNC``); nothing when the
    API is not served. ``list_all(path, decode)`` lists one collection."""
    if not _served(client):
        return []
    return [(kind, list_all(path, _decoder(kind))) for kind, (path, *_) in _RESOURCES.items()]


def _tables(store: DraStore) -> dict[str, dict[str, Any]]:
    return {"class": store.classes, "slice": store.slices, "claim": store.claims}


def _sync(store: DraStore, table: str, items: Iterable[Any]) -> None:
    """Replace one table with a full list (after a relist): what disappeared is removed."""
    items = list(items)
    seen = {o.key if isinstance(o, Invalid) else _key(o) for o in items}
    for key in [k for k in _tables(store)[table] if k not in seen]:
        store.remove(table, key)
    for item in items:
        _put(store, item)


def _put(store: DraStore, obj: Any) -> None:
    if isinstance(obj, Invalid):
        log.warning(
            "invalid DRA object ignored",
            extra={"kind": obj.kind, "object": obj.key, "error": obj.error},
        )
        return
    store.add(obj)


def settle_choices(cluster: ClusterState) -> int:
    """Drop the device choices of placed pods whose claims all show their allocation in the
    store (the watch caught up with the pre-bind writes); returns how many were dropped.

    Choices of pods that are not placed are ignored by the store anyway and pruned by it.
    """
    store = cluster.dra
    done = []
    for uid, choice in store.choices.items():
        placement = cluster.placements.get(uid)
        if placement is None:
            continue
        allocs = choice.node.get(placement.node, ())
        if all(
            (c := store.claims.get(a.claim)) is not None and c.allocation is not None
            for a in allocs
        ):
            done.append(uid)
    for uid in done:
        del store.choices[uid]
    return len(done)
