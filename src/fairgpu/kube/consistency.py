"""Consistency check: the live cache against the bound pods' own record, after every batch.

The API is the truth about where a pod runs (``spec.nodeName``) and which GPUs it holds (its
``fairgpu.io/gpu-devices`` annotation). The cache derives its node and device arrays from a
stream of events; a missed or misordered event must not turn into a GPU booked twice. After
each batch of events the scheduling loop calls :func:`check`: it compares the nodes the batch
touched (and, every ``full_every`` seconds, every node) with the bound pods recorded for them,
repairs what differs, logs each repair and counts it by kind in ``CacheChanges.repairs`` (the
``fairgpu_cache_repairs`` metric). A healthy cache never repairs anything: a non-zero count
is a bug to report.

Kinds of repair:

* ``missing``: a bound pod of a known node held nothing in the cache (placed again);
* ``orphan``: a bound pod of an unknown node was not waiting for the node to come back;
* ``node``: a pod held capacity on another node than the one it is bound to;
* ``devices``: a pod held other devices than its annotation names, or not as many as it asks;
* ``stale``: capacity held by a pod that is neither bound, pending nor being evicted;
* ``arrays``: the node's load or per-device arrays differed from the sum of its placements.

Pods being evicted are left alone: a preemption plan releases them on purpose.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from fairgpu.kube.devices import annotation_fits, least_used

if TYPE_CHECKING:
    from fairgpu.kube.cache import CacheChanges, SchedulerCache
    from fairgpu.model.pod import PodInfo

__all__ = ["check", "check_node"]

log = logging.getLogger("fairgpu.kube.consistency")


def check(cache: SchedulerCache, out: CacheChanges, now: float, full_every: float = 60.0) -> None:
    """Check (and repair) the nodes ``out`` touched, or every node once ``full_every`` seconds
    have passed since the last full check."""
    if now - cache.last_full_check >= full_every:
        cache.last_full_check = now
        names = set(cache.cluster.node_index) | set(cache.bound_on) | set(cache.orphans)
    else:
        names = out.nodes
    for name in sorted(names):
        check_node(cache, name, out, now)


def check_node(cache: SchedulerCache, name: str, out: CacheChanges, now: float) -> None:
    """Check and repair one node's bookkeeping (see the module docstring)."""
    cluster = cache.cluster
    idx = cluster.node_index.get(name)
    bound = list(cache.bound_on.get(name, {}).items())
    if idx is None:
        for uid, pod in bound:
            if uid in cache.evicting:
                continue
            if uid in cluster.placements:
                cluster.release(uid)
                _repaired(cache, out, "node", pod, name)
            if uid not in cache.orphans.get(name, {}):
                cache.orphan(name, pod)
                _repaired(cache, out, "orphan", pod, name)
        return
    for uid, pod in bound:
        if uid not in cache.evicting:
            _check_bound(cache, idx, name, pod, out, now)
    for uid, pod in list(cluster.node_pods[idx].items()):
        where = cache.bound.get(uid)
        if uid in cache.evicting or (where is None and uid in cache.pending):
            continue
        if where is None or where[0] != name:
            cluster.release(uid)
            _repaired(cache, out, "stale" if where is None else "node", pod, name)
            if where is not None:
                cache._place_bound(pod, where[0], where[1], now)
    drift = cluster.verify_node(idx)
    if drift:
        _repaired(cache, out, "arrays", None, name, drift)


def _check_bound(
    cache: SchedulerCache, idx: int, name: str, pod: PodInfo, out: CacheChanges, now: float
) -> None:
    """One pod bound to node ``name`` (slot ``idx``): placed there, on the right devices."""
    cluster = cache.cluster
    uid = pod.uid
    annotation = cache.bound[uid][1]
    placement = cluster.placements.get(uid)
    if placement is not None and placement.node != idx:
        cluster.release(uid)
        _repaired(cache, out, "node", pod, name)
        placement = None
    if placement is None:
        cache.unorphan(uid, name)
        cache._place_bound(pod, name, annotation, now)
        _repaired(cache, out, "missing", pod, name)
        return
    if pod.gpu.count == 0:
        return
    held = tuple(sorted(placement.devices))
    count = int(cluster.gpu_count[idx])
    if annotation is not None and annotation_fits(annotation, count):
        want = tuple(sorted(annotation))
    elif count == 0 or (len(held) == pod.gpu.count and annotation_fits(held, count)):
        return  # no usable annotation: any devices of the right number will do
    else:
        want = least_used(cluster, pod, idx, exclude=uid)
    if held != want:
        cluster.set_devices(uid, want)
        _repaired(cache, out, "devices", pod, name, [list(held), list(want)])


def _repaired(
    cache: SchedulerCache,
    out: CacheChanges,
    kind: str,
    pod: PodInfo | None,
    node: str,
    detail: object = None,
) -> None:
    cache.repairs[kind] = cache.repairs.get(kind, 0) + 1
    out.repairs[kind] = out.repairs.get(kind, 0) + 1
    out.dirty = True
    log.warning(
        "cache diverged from the API; repaired",
        extra={
            "kind": kind,
            "node": node,
            "pod": pod.key if pod is not None else None,
            "detail": detail,
        },
    )
