"""The live scheduler's cache: a :class:`ClusterState` plus the pending set, fed by watches.

Pure bookkeeping (no I/O, no threads): the scheduling loop owns one :class:`SchedulerCache` and
applies decoded watch events to it between engine cycles, so the engine always sees one
consistent snapshot and never races the watches.

Invariant (no GPU booked twice): every pod that holds capacity in the cluster is either bound
according to the API (``bound``) or *assumed* by this scheduler (``assumed``: placed by the
engine, bind in flight). A failed bind *forgets* the pod (releases its capacity). Victims of a
preemption are released by the engine at once but still run until their deletion is observed;
the preemptor stays assumed on their node meanwhile, so their capacity is never handed out
twice. If an eviction is refused the preemptor is forgotten and the victim put back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from fairgpu.api import objects as k8s
from fairgpu.api.errors import InvalidObjectError
from fairgpu.cluster.state import ClusterState
from fairgpu.model.gpu import ANN_GPU_DEVICES, DEFAULT_NAMES, WHOLE, GpuResourceNames
from fairgpu.model.gpu import decode_gpu_devices as _decode_devices
from fairgpu.model.node import NodeInfo, node_from_k8s
from fairgpu.model.node_pools import NodePoolConfig, derive_placement
from fairgpu.model.pod import PodInfo, invalid_pod, pod_from_k8s

__all__ = ["NodeRecord", "PodRecord", "SchedulerCache", "decode_node", "decode_pod"]

log = logging.getLogger("fairgpu.kube.cache")

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(slots=True)
class PodRecord:
    """One pod as a watch delivered it, decoded once.

    ``info`` is None for unbound pods of other schedulers (the scheduler never reads them).
    ``devices`` comes from the ``fairgpu.io/gpu-devices`` annotation (None when absent or bad).
    """

    uid: str
    namespace: str
    name: str
    node_name: str
    scheduler_name: str
    phase: str
    deleting: bool
    info: PodInfo | None
    devices: tuple[int, ...] | None = None
    started: float | None = None
    resource_version: str = ""


@dataclass(slots=True)
class NodeRecord:
    """One node: ``info`` is None when the Node object is malformed (``error`` says why)."""

    name: str
    info: NodeInfo | None
    error: str = ""


def _ts(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def decode_pod(
    raw: bytes,
    scheduler_name: str,
    names: GpuResourceNames = DEFAULT_NAMES,
    pools: NodePoolConfig | None = None,
) -> PodRecord:
    """Decode one Pod's JSON; malformed pods of ``scheduler_name`` become ``invalid_pod``."""
    try:
        pod = k8s.decode_json(raw, k8s.Pod)
    except InvalidObjectError as error:
        data: Any = msgspec.json.decode(raw)
        meta = data.get("metadata", {}) if isinstance(data, dict) else {}
        spec = data.get("spec", {}) if isinstance(data, dict) else {}
        status = data.get("status", {}) if isinstance(data, dict) else {}
        info = invalid_pod(data, error)
        return PodRecord(
            info.uid,
            info.namespace,
            info.name,
            str(spec.get("nodeName") or "") if isinstance(spec, dict) else "",
            str(spec.get("schedulerName") or "default-scheduler") if isinstance(spec, dict) else "",
            str(status.get("phase") or "") if isinstance(status, dict) else "",
            bool(meta.get("deletionTimestamp")) if isinstance(meta, dict) else False,
            info,
        )
    meta, spec = pod.metadata, pod.spec
    rec = PodRecord(
        meta.uid or f"{meta.namespace}/{meta.name}",
        meta.namespace or "default",
        meta.name,
        spec.node_name,
        spec.scheduler_name,
        pod.status.phase,
        meta.deletion_timestamp is not None,
        None,
        started=_ts(pod.status.start_time),
        resource_version=meta.resource_version,
    )
    if not spec.node_name and spec.scheduler_name != scheduler_name:
        return rec
    try:
        info = pod_from_k8s(pod, names)
    except InvalidObjectError as error:
        info = invalid_pod(msgspec.json.decode(raw), error)
    else:
        info.source = None  # keep the cache lean: the scheduler never reads the raw object
        if not spec.node_name and pools is not None:
            info = derive_placement(info, pools)
    rec.info = info
    text = meta.annotations.get(ANN_GPU_DEVICES)
    if text:
        try:
            rec.devices = tuple(d.index for d in _decode_devices(text))
        except ValueError:
            rec.devices = None
    return rec


def decode_node(
    raw: bytes, names: GpuResourceNames = DEFAULT_NAMES, default_gpu_memory_mib: int = 16384
) -> NodeRecord:
    """Decode one Node's JSON (malformed nodes keep their name and the error)."""
    try:
        node = k8s.decode_json(raw, k8s.Node)
        return NodeRecord(node.metadata.name, node_from_k8s(node, names, default_gpu_memory_mib))
    except InvalidObjectError as error:
        data: Any = msgspec.json.decode(raw)
        meta = data.get("metadata", {}) if isinstance(data, dict) else {}
        return NodeRecord(str(meta.get("name", "")), None, str(error))


def _node_key(n: NodeInfo) -> tuple[Any, ...]:
    # Everything the engine reads from a node; status heartbeats change none of it.
    return (
        tuple(sorted(n.labels.items())),
        n.taints,
        n.unschedulable,
        tuple(sorted(n.allocatable.items())),
        n.gpu_count,
        n.gpu_memory_mib,
        n.gpu_model,
    )


@dataclass(slots=True)
class Held:
    """A preemptor assumed on ``node`` whose bind waits until ``waiting`` victims are gone."""

    bind: Any
    waiting: set[str]
    deadline: float


@dataclass(slots=True)
class CacheChanges:
    """What one batch of events changed, for the loop to act on."""

    dirty: bool = False
    gone: set[str] = field(default_factory=set)


class SchedulerCache:
    """Cluster state + pending pods, kept in step with the API by watch events.

    Args:
        scheduler_name: pods with this ``spec.schedulerName`` are ours to schedule.
        max_devices: GPUs per node the cluster arrays hold.
    """

    def __init__(self, scheduler_name: str, max_devices: int = 8) -> None:
        self.scheduler_name = scheduler_name
        self.cluster = ClusterState(max_devices=max_devices)
        self.pending: dict[str, PodInfo] = {}
        self.first_seen: dict[str, float] = {}
        self.bound: dict[str, tuple[str, tuple[int, ...] | None]] = {}
        self.assumed: dict[str, str] = {}
        self.evicting: set[str] = set()
        self.orphans: dict[str, dict[str, PodInfo]] = {}
        self._node_keys: dict[str, tuple[Any, ...]] = {}
        self.overcommits = 0

    # ---- queries ------------------------------------------------------------------------------
    def schedulable(self) -> list[PodInfo]:
        """Pending pods not currently assumed (bind in flight) — the engine's input."""
        placements = self.cluster.placements
        return [p for uid, p in self.pending.items() if uid not in placements]

    def node_name_of(self, uid: str) -> str | None:
        """Name of the node ``uid`` is placed on in the cluster, if any."""
        pl = self.cluster.placements.get(uid)
        if pl is None:
            return None
        node = self.cluster.nodes[pl.node]
        return node.name if node is not None else None

    # ---- pods ---------------------------------------------------------------------------------
    def apply_pod(self, etype: str, rec: PodRecord, now: float, out: CacheChanges) -> None:
        """Apply one pod event (``ADDED``/``MODIFIED``/``DELETED``)."""
        uid = rec.uid
        if etype == "DELETED" or rec.phase in TERMINAL_PHASES:
            self._gone(uid, out)
            return
        if rec.node_name:
            self._bound(rec, now, out)
            return
        # Unbound.
        if uid in self.bound:
            return  # a stale object (the API never unbinds a pod)
        if rec.scheduler_name != self.scheduler_name or rec.deleting or rec.info is None:
            if self.pending.pop(uid, None) is not None and uid in self.assumed:
                self.forget(uid)
                out.dirty = True
            return
        if uid not in self.pending:
            out.dirty = True
            self.first_seen.setdefault(uid, now)
        elif uid not in self.cluster.placements:
            old = self.pending[uid]
            if (
                old.labels != rec.info.labels
                or old.annotations != rec.info.annotations
                or old.scheduling_gates != rec.info.scheduling_gates  # a gate was removed
            ):
                out.dirty = True
        self.pending[uid] = rec.info

    def _gone(self, uid: str, out: CacheChanges) -> None:
        self.pending.pop(uid, None)
        self.first_seen.pop(uid, None)
        self.bound.pop(uid, None)
        self.assumed.pop(uid, None)
        self.evicting.discard(uid)
        for pods in self.orphans.values():
            pods.pop(uid, None)
        if self.cluster.release(uid) is not None:
            out.dirty = True
        out.gone.add(uid)

    def _bound(self, rec: PodRecord, now: float, out: CacheChanges) -> None:
        uid = rec.uid
        self.pending.pop(uid, None)
        self.first_seen.pop(uid, None)
        self.bound[uid] = (rec.node_name, rec.devices)
        if uid in self.evicting or rec.info is None:
            return  # released by a preemption plan; stays released until it is gone
        self.assumed.pop(uid, None)
        cluster = self.cluster
        pl = cluster.placements.get(uid)
        if pl is not None:
            node = cluster.nodes[pl.node]
            same_devices = rec.devices is None or tuple(sorted(pl.devices)) == tuple(
                sorted(rec.devices)
            )
            if node is not None and node.name == rec.node_name and same_devices:
                return
            cluster.release(uid)
            out.dirty = True
        self._place_bound(rec.info, rec.node_name, rec.devices, rec.started or now)

    def _place_bound(
        self, pod: PodInfo, node_name: str, devices: tuple[int, ...] | None, started: float
    ) -> None:
        idx = self.cluster.node_index.get(node_name)
        if idx is None:
            self.orphans.setdefault(node_name, {})[pod.uid] = pod
            return
        devs = self._devices_for(pod, idx, devices)
        self.cluster.assign(pod, idx, devs, started=started)
        free = self.cluster.device_milli_free[idx]
        if (free < 0).any():
            self.overcommits += 1
            log.warning(
                "GPU over-commit observed on node",
                extra={"node": node_name, "pod": pod.key, "devices": list(devs)},
            )

    def _devices_for(
        self, pod: PodInfo, idx: int, devices: tuple[int, ...] | None
    ) -> tuple[int, ...]:
        """The devices a bound pod holds: its annotation, else (bound by another scheduler)
        the least-used devices that fit, so accounting stays right either way."""
        gpu = pod.gpu
        c = self.cluster
        count = int(c.gpu_count[idx])
        if gpu.count == 0 or count == 0:
            return ()
        if devices is not None and all(0 <= d < count for d in devices):
            return devices
        free = c.device_milli_free[idx, :count]
        need = WHOLE if gpu.is_whole else gpu.milli
        order = sorted(range(count), key=lambda d: (-(int(free[d]) >= need), -int(free[d]), d))
        return tuple(sorted(order[: gpu.count]))

    def sync_pods(self, records: list[PodRecord], now: float, out: CacheChanges) -> None:
        """Replace the pod view with a full list (after a relist)."""
        seen = {r.uid for r in records}
        known = set(self.pending) | set(self.bound) | set(self.cluster.placements)
        for pods in self.orphans.values():
            known |= set(pods)
        for uid in known - seen:
            self._gone(uid, out)
        for rec in records:
            self.apply_pod("MODIFIED", rec, now, out)

    # ---- assume / forget ------------------------------------------------------------------------
    def assumed_by_engine(self, uid: str, node_name: str) -> None:
        """Record that the engine assumed ``uid`` on ``node_name`` (bind about to be sent)."""
        self.assumed[uid] = node_name

    def forget(self, uid: str) -> bool:
        """Undo an assumption (bind failed or abandoned); True if capacity was released.

        A pod the API already reports bound is kept: the watch is the truth.
        """
        self.assumed.pop(uid, None)
        if uid in self.bound:
            return False
        return self.cluster.release(uid) is not None

    def mark_evicting(self, uid: str) -> None:
        """``uid`` was released by a preemption plan; ignore its updates until it is gone."""
        self.evicting.add(uid)

    def restore(self, uid: str, pod: PodInfo, started: float) -> bool:
        """Put back a victim whose eviction did not happen (e.g. refused by a PDB)."""
        self.evicting.discard(uid)
        where = self.bound.get(uid)
        if where is None or uid in self.cluster.placements:
            return False
        self._place_bound(pod, where[0], where[1], started)
        return True

    # ---- nodes --------------------------------------------------------------------------------
    def apply_node(self, etype: str, rec: NodeRecord, now: float, out: CacheChanges) -> None:
        """Apply one node event."""
        if etype == "DELETED" or rec.info is None:
            if rec.info is None and etype != "DELETED":
                log.warning("ignoring malformed node", extra={"node": rec.name, "error": rec.error})
            self._remove_node(rec.name, out)
            return
        key = _node_key(rec.info)
        if self._node_keys.get(rec.name) == key:
            return  # a status heartbeat: nothing the engine reads changed
        if rec.info.gpu_count > self.cluster.max_devices:
            log.warning(
                "node has more GPUs than the cache holds per node; ignoring it",
                extra={"node": rec.name, "gpus": rec.info.gpu_count},
            )
            return
        self._node_keys[rec.name] = key
        self.cluster.add_node(rec.info)
        out.dirty = True
        for uid, pod in self.orphans.pop(rec.name, {}).items():
            where = self.bound.get(uid)
            if where is not None and uid not in self.cluster.placements:
                self._place_bound(pod, where[0], where[1], now)

    def _remove_node(self, name: str, out: CacheChanges) -> None:
        self._node_keys.pop(name, None)
        for pod in self.cluster.remove_node(name):
            if pod.uid in self.bound:
                self.orphans.setdefault(name, {})[pod.uid] = pod
            self.assumed.pop(pod.uid, None)
        out.dirty = True

    def sync_nodes(self, records: list[NodeRecord], now: float, out: CacheChanges) -> None:
        """Replace the node view with a full list."""
        seen = {r.name for r in records}
        for name in list(self.cluster.node_index):
            if name not in seen:
                self._remove_node(name, out)
        for rec in records:
            self.apply_node("MODIFIED", rec, now, out)
