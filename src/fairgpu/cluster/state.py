"""ClusterState: every node's capacity and load, per-device GPU state and the pods placed.

Everything the filter and score plugins read per node lives in numpy arrays indexed by node slot
so that one pod is evaluated against all nodes in a few vectorised operations. Static node
attributes (labels, taints) are dictionary-encoded lazily and cached until a node changes.

The same class is the simulator's cluster and the live scheduler's cache.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from fairgpu.cluster.dra import DraStore
from fairgpu.cluster.images import ImageStates
from fairgpu.cluster.volumes import VolumeStore
from fairgpu.model.gpu import WHOLE
from fairgpu.model.node import NodeImage, NodeInfo
from fairgpu.model.pod import CPU, EPHEMERAL, MEMORY, PODS, PodInfo
from fairgpu.model.selectors import Taint

GPU_MILLI = "fairgpu.io/gpu-milli"
GPU_MEMORY = "fairgpu.io/gpu-memory-mib"
FIXED_RESOURCES = (CPU, MEMORY, PODS, EPHEMERAL, GPU_MILLI, GPU_MEMORY)
COL_CPU, COL_MEMORY, COL_PODS, COL_EPHEMERAL, COL_GPU_MILLI, COL_GPU_MEMORY = range(6)


@dataclass(slots=True)
class Placement:
    """Where a pod runs: node slot, device indexes and what it takes from each device."""

    node: int
    devices: tuple[int, ...] = ()
    device_milli: int = 0
    device_memory: int = 0
    started: float = 0.0
    # Live adapter only (the simulator binds at once and never deletes gracefully): False while
    # the pod is merely assumed (bind in flight, or a preemptor waiting for its victims), True
    # once the API reports it bound; ``terminating`` once its deletion has begun. Only bound,
    # non-terminating pods may be preemption victims (an Eviction deletes an unbound pod).
    bound: bool = True
    terminating: bool = False
    # Live adapter only: an evicted pod's remainder, what it holds beyond what its preemptor
    # takes while it terminates (engine/lingering.py); the whole pod is put back if needed.
    remainder: bool = False
    dra_milli: int = 0  # GPUs (milli) held through DRA claims (shares, quotas, metrics)
    dra_memory: int = 0  # their GPU memory, MiB (shares)


class ClusterState:
    """Mutable cluster snapshot shared by the engine and its adapters.

    Node slots are never reused while a pod references them; a removed node's slot is marked
    inactive. Callers mutate only through :meth:`add_node`, :meth:`remove_node`,
    :meth:`assign`, :meth:`set_devices` and :meth:`release`, which keep the arrays consistent.

    Per-device arrays are ``max_devices`` wide, the most GPUs (or MIG slices) of any node seen
    so far: the width grows when a wider node is added, so no node is ever too wide. A
    placement may name devices its node does not have (yet): a bound pod's devices are kept
    while its node shows no GPUs, and count again as soon as they exist.

    Args:
        max_devices: initial per-device width (a hint; it grows on demand).
        capacity: initial node slots (grows on demand).
    """

    def __init__(self, max_devices: int = 8, capacity: int = 64) -> None:
        self.max_devices = max(1, max_devices)
        self.resources: list[str] = list(FIXED_RESOURCES)
        self.resource_index: dict[str, int] = {r: i for i, r in enumerate(self.resources)}
        self.nodes: list[NodeInfo | None] = []
        self.node_index: dict[str, int] = {}
        self._cap = 0
        self._grow(capacity)
        self.pods: dict[str, PodInfo] = {}
        self.placements: dict[str, Placement] = {}
        self.node_pods: list[dict[str, PodInfo]] = []
        self.static_version = 0
        self.load_version = 0
        # Bumped whenever capacity is given back (release, node added or changed): a pod that
        # failed at one release_version fails again until it changes, since assigns only take.
        self.release_version = 0
        self._vectors: dict[str, tuple[PodInfo, np.ndarray, np.ndarray]] = {}
        self._label_cache: dict[str, tuple[np.ndarray, list[str]]] = {}
        self._number_cache: dict[str, np.ndarray] = {}
        self._taint_cache: tuple[np.ndarray, list[tuple[Taint, ...]]] | None = None
        self.images = ImageStates()  # the nodes' container images, kept node by node
        self._name_array: np.ndarray | None = None
        self.pods_with_affinity: dict[str, PodInfo] = {}
        self.volumes = VolumeStore()  # claims, volumes, classes, CSI nodes (adapters fill it)
        # Namespace name -> labels (for namespaceSelector); replaced, never mutated, on change.
        self.namespace_labels: dict[str, dict[str, str]] = {}
        # Namespace name -> the selectors of its Services (for default spread constraints);
        # replaced, never mutated, on change.
        self.service_selectors: dict[str, list[dict[str, str]]] = {}
        self.dra = DraStore()  # DRA classes, slices, claims, templates (adapters fill it)
        self.dra_allocated_milli = 0  # sum of placements' dra_milli
        # Pods of pod groups that ran to completion and still exist (:meth:`complete`).
        self.completed: dict[str, PodInfo] = {}
        self.completed_version = 0
        # Bound pods whose node is not in the cluster now (deleted while they exist; the live
        # cache keeps them for its return under its name): they hold no node here but still
        # count for their queue's quota and limits, as a ResourceQuota counts them
        # (:meth:`detach`).
        self.detached: dict[str, PodInfo] = {}
        self.detached_version = 0

    # ---- storage ------------------------------------------------------------------------
    def _grow(self, capacity: int) -> None:
        """Reallocate every per-slot array to ``capacity`` slots, keeping the contents."""
        r, d = len(self.resources), self.max_devices

        def grow(arr: np.ndarray | None, shape: tuple[int, ...], dtype: type) -> np.ndarray:
            new: np.ndarray = np.zeros(shape, dtype=dtype)
            if arr is not None:
                new[tuple(slice(0, s) for s in arr.shape)] = arr
            return new

        get = self.__dict__.get
        self.active = grow(get("active"), (capacity,), np.bool_)
        self.unschedulable = grow(get("unschedulable"), (capacity,), np.bool_)
        self.allocatable = grow(get("allocatable"), (capacity, r), np.int64)
        self.requested = grow(get("requested"), (capacity, r), np.int64)
        # CPU and memory as kube-scheduler's resource scores count them (PodInfo's
        # node_cpu_memory): a container without a request counts 100m / 200 MiB.
        self.scoring_requested = grow(get("scoring_requested"), (capacity, 2), np.int64)
        self.gpu_count = grow(get("gpu_count"), (capacity,), np.int32)
        self.device_exists = grow(get("device_exists"), (capacity, d), np.bool_)
        self.device_milli_free = grow(get("device_milli_free"), (capacity, d), np.int32)
        self.device_memory_free = grow(get("device_memory_free"), (capacity, d), np.int64)
        self.device_memory_total = grow(get("device_memory_total"), (capacity, d), np.int64)
        self.idle_devices = grow(get("idle_devices"), (capacity,), np.int32)
        # Bumped whenever a node's load or description changes, so score plugins can cache
        # per-node results and recompute only the nodes that changed.
        self.node_version = grow(get("node_version"), (capacity,), np.int64)
        self._cap = capacity

    def _ensure_devices(self, count: int) -> None:
        """Widen the per-device arrays to hold ``count`` devices per node.

        Only called while a node is written, which bumps ``static_version``: score plugins that
        cache per-device tables drop them then, so none outlives the old width.
        """
        if count > self.max_devices:
            self.max_devices = count
            self._grow(self._cap)

    @property
    def size(self) -> int:
        """Number of node slots in use (active or not); arrays are valid up to this index."""
        return len(self.nodes)

    def resource_column(self, name: str) -> int:
        """Column of resource ``name``, adding one (zero everywhere) if it is new."""
        col = self.resource_index.get(name)
        if col is None:
            col = len(self.resources)
            self.resources.append(name)
            self.resource_index[name] = col
            pad = np.zeros((self._cap, 1), dtype=np.int64)
            self.allocatable = np.hstack([self.allocatable, pad])
            self.requested = np.hstack([self.requested, pad.copy()])
        return col

    def free(self) -> np.ndarray:
        """Allocatable minus requested, shape (size, resources)."""
        n = self.size
        free: np.ndarray = self.allocatable[:n] - self.requested[:n]
        return free

    # ---- nodes --------------------------------------------------------------------------
    def add_node(self, node: NodeInfo) -> int:
        """Add (or update in place) a node; returns its slot."""
        if node.name in self.node_index:
            return self.update_node(node)
        idx = len(self.nodes)
        if idx >= self._cap:
            self._grow(max(64, self._cap * 2))
        self.nodes.append(node)
        self.node_pods.append({})
        self.node_index[node.name] = idx
        self._write_node(idx, node)
        self._recompute_devices(idx)
        self.images.total_nodes += 1
        self.images.add(idx, node.images)
        return idx

    def _write_node(self, idx: int, node: NodeInfo) -> None:
        """Write the node's static columns and device existence (not the load)."""
        self._ensure_devices(node.gpu_count)
        self.active[idx] = True
        self.unschedulable[idx] = node.unschedulable
        self.allocatable[idx, :] = 0
        for rname, amount in node.allocatable.items():
            # Look the column up first: adding a column replaces self.allocatable, and Python
            # evaluates the assignment target's array before its subscript.
            col = self.resource_column(rname)
            self.allocatable[idx, col] = amount
        count = node.gpu_count
        self.gpu_count[idx] = count
        self.allocatable[idx, COL_GPU_MILLI] = count * WHOLE
        self.allocatable[idx, COL_GPU_MEMORY] = count * node.gpu_memory_mib
        self.device_exists[idx, :] = False
        self.device_exists[idx, :count] = True
        self.device_memory_total[idx, :] = 0
        self.device_memory_total[idx, :count] = node.gpu_memory_mib
        self._static_changed()

    def _recompute_devices(self, idx: int) -> None:
        """Per-device free compute and memory of node ``idx`` from its placements."""
        self.node_version[idx] += 1
        self.device_milli_free[idx], self.device_memory_free[idx] = self._device_free(idx)
        self._recount_idle(idx)

    def _device_free(self, idx: int) -> tuple[np.ndarray, np.ndarray]:
        """(free milli, free memory) per device of node ``idx``, summed from its placements."""
        count = int(self.gpu_count[idx])
        milli = np.where(self.device_exists[idx], WHOLE, 0).astype(np.int32)
        mem = self.device_memory_total[idx].copy()
        for uid in self.node_pods[idx]:
            pl = self.placements[uid]
            for d in pl.devices:
                if 0 <= d < count:  # devices the node does not show (yet) hold nothing
                    milli[d] -= pl.device_milli
                    mem[d] -= pl.device_memory
        return milli, mem

    def _recount_idle(self, idx: int) -> None:
        idle = (
            self.device_exists[idx]
            & (self.device_milli_free[idx] >= WHOLE)
            & (self.device_memory_free[idx] >= self.device_memory_total[idx])
        )
        self.idle_devices[idx] = int(np.count_nonzero(idle))

    def update_node(self, node: NodeInfo) -> int:
        """Replace a node's static description, keeping its pods and their devices.

        Each placement's per-device memory follows the node's (a whole GPU takes all of it), and
        devices that appear count the pods that named them while they were missing.
        """
        idx = self.node_index[node.name]
        old = self.nodes[idx]
        if old is not None:
            self.images.remove(idx, old.images)
        self.images.add(idx, node.images)
        self.nodes[idx] = node
        self._write_node(idx, node)
        # Re-add the load of pods already there.
        self.requested[idx, :] = 0
        self.scoring_requested[idx, :] = 0
        for uid, pod in self.node_pods[idx].items():
            placement = self.placements[uid]
            if placement.devices:
                placement.device_memory = self.device_memory_for(pod, idx)
            self._charge(idx, pod, placement, +1)
        self._recompute_devices(idx)
        return idx

    def remove_node(self, name: str) -> list[PodInfo]:
        """Deactivate a node; returns the pods that were placed on it (now released)."""
        idx = self.node_index.pop(name, None)
        if idx is None:
            return []
        orphans = list(self.node_pods[idx].values())
        for pod in orphans:
            self.release(pod.uid)
        self.active[idx] = False
        old = self.nodes[idx]
        if old is not None:
            self.images.remove(idx, old.images)
        self.images.total_nodes -= 1
        self.nodes[idx] = None
        self._static_changed()
        return orphans

    def _static_changed(self) -> None:
        self.static_version += 1
        self.release_version += 1
        self._label_cache.clear()
        self._number_cache.clear()
        self._taint_cache = None
        self._name_array = None

    def node(self, idx: int) -> NodeInfo:
        """The node in slot ``idx`` (must be active)."""
        node = self.nodes[idx]
        if node is None:
            raise KeyError(f"node slot {idx} is empty")
        return node

    def active_nodes(self) -> Iterator[tuple[int, NodeInfo]]:
        """(slot, node) for every active node."""
        for idx, node in enumerate(self.nodes):
            if node is not None:
                yield idx, node

    # ---- dictionary-encoded static attributes ------------------------------------------
    def label_codes(self, key: str) -> tuple[np.ndarray, list[str]]:
        """Per-slot code of label ``key`` (-1 where absent) and the value vocabulary."""
        cached = self._label_cache.get(key)
        if cached is None:
            vocab: dict[str, int] = {}
            codes = np.full(self.size, -1, dtype=np.int32)
            for idx, node in enumerate(self.nodes):
                if node is not None and key in node.labels:
                    codes[idx] = vocab.setdefault(node.labels[key], len(vocab))
            cached = (codes, list(vocab))
            self._label_cache[key] = cached
        return cached

    def label_numbers(self, key: str) -> np.ndarray:
        """Per-slot integer value of label ``key`` as float (NaN where absent or not an int)."""
        cached = self._number_cache.get(key)
        if cached is None:
            codes, vocab = self.label_codes(key)
            values = np.full(len(vocab) + 1, np.nan)
            for i, text in enumerate(vocab):
                with contextlib.suppress(ValueError):
                    values[i] = int(text, 10)
            cached = values[codes]  # code -1 picks the trailing NaN
            self._number_cache[key] = cached
        return cached

    def node_names(self) -> np.ndarray:
        """Object array of node names per slot ('' for empty slots)."""
        if self._name_array is None:
            self._name_array = np.array(
                [n.name if n is not None else "" for n in self.nodes], dtype=object
            )
        return self._name_array

    def taint_groups(self) -> tuple[np.ndarray, list[tuple[Taint, ...]]]:
        """Per-slot id of the node's taint set, and the distinct taint sets."""
        if self._taint_cache is None:
            groups: dict[tuple[Taint, ...], int] = {}
            ids = np.zeros(self.size, dtype=np.int32)
            for idx, node in enumerate(self.nodes):
                taints = node.taints if node is not None else ()
                ids[idx] = groups.setdefault(taints, len(groups))
            self._taint_cache = (ids, list(groups))
        return self._taint_cache

    def set_node_images(self, name: str, images: tuple[NodeImage, ...]) -> None:
        """Node ``name`` now reports ``images`` (a kubelet pulled or removed one): only the
        image index changes -- nothing a filter reads, so no cached mask goes stale."""
        idx = self.node_index[name]
        node = self.node(idx)
        self.images.remove(idx, node.images)
        node.images = images
        self.images.add(idx, images)

    # ---- pods ---------------------------------------------------------------------------
    def request_vector(self, pod: PodInfo) -> tuple[np.ndarray, np.ndarray]:
        """Columns and amounts of the pod's non-GPU requests plus its GPU milli (cached)."""
        cached = self._vectors.get(pod.uid)
        if cached is not None and cached[0] is pod:
            return cached[1], cached[2]
        cols = [self.resource_column(r) for r in pod.requests]
        amounts = list(pod.requests.values())
        if pod.gpu.count:
            cols.append(COL_GPU_MILLI)
            amounts.append(pod.gpu.total_milli)
        vec = np.array(cols, dtype=np.intp), np.array(amounts, dtype=np.int64)
        if len(self._vectors) > 200_000:
            self._vectors.clear()
        self._vectors[pod.uid] = (pod, *vec)
        return vec

    def _charge(self, idx: int, pod: PodInfo, placement: Placement, sign: int) -> None:
        cols, amounts = self.request_vector(pod)
        self.requested[idx, cols] += sign * amounts
        cpu, memory = pod.node_cpu_memory
        self.scoring_requested[idx, 0] += sign * cpu
        self.scoring_requested[idx, 1] += sign * memory
        if placement.devices:
            self.requested[idx, COL_GPU_MEMORY] += (
                sign * placement.device_memory * len(placement.devices)
            )

    def device_memory_for(self, pod: PodInfo, idx: int) -> int:
        """Device memory (MiB) the pod takes from each of its devices on node ``idx``."""
        total = int(self.device_memory_total[idx, 0]) if self.gpu_count[idx] else 0
        gpu = pod.gpu
        if gpu.is_whole:
            return total
        if gpu.memory_mib:
            return gpu.memory_mib
        if gpu.memory_percent:
            return total * gpu.memory_percent // 100
        return 0

    def assign(
        self, pod: PodInfo, idx: int, devices: Iterable[int] = (), started: float = 0.0
    ) -> Placement:
        """Place ``pod`` on node slot ``idx`` using ``devices``; charges all of its requests."""
        if pod.uid in self.placements:
            raise ValueError(f"pod {pod.key} is already placed")
        if not self.active[idx]:
            raise ValueError(f"pod {pod.key}: node slot {idx} is not active")
        devs = tuple(devices)
        gpu = pod.gpu
        milli = WHOLE if gpu.is_whole else gpu.milli
        placement = Placement(idx, devs, milli if devs else 0, 0, started)
        if devs:
            placement.device_memory = self.device_memory_for(pod, idx)
            self._take_devices(idx, placement, -1)
        self.placements[pod.uid] = placement
        if pod.resource_claims:
            placement.dra_milli, placement.dra_memory = self.dra.held_gpu(pod, self)
            self.dra_allocated_milli += placement.dra_milli
        self.pods[pod.uid] = pod
        self.node_pods[idx][pod.uid] = pod
        if pod.has_pod_affinity:
            self.pods_with_affinity[pod.uid] = pod
        self._charge(idx, pod, placement, +1)
        self.load_version += 1
        self.node_version[idx] += 1
        return placement

    def mark_terminating(self, uid: str, terminating: bool) -> None:
        """Record that ``uid``'s deletion has begun (or not). A change counts as a change of
        its node's load: topology spread stops counting a terminating pod, so answers derived
        from the placed pods must be recomputed."""
        placement = self.placements.get(uid)
        if placement is None or placement.terminating == terminating:
            return
        placement.terminating = terminating
        self.load_version += 1
        self.node_version[placement.node] += 1

    def complete(self, pod: PodInfo) -> None:
        """Record that ``pod``, a member of a pod group, ran to completion (phase Succeeded).
        It holds nothing, but counts toward its group's minMember while it exists: a member
        that did its part is not missing, so a sibling left pending (its bind failed, or the
        scheduler stopped between two binds) can still start after the others finished --
        as Volcano counts Succeeded tasks as ready."""
        if pod.uid not in self.completed:
            self.completed[pod.uid] = pod
            self.completed_version += 1

    def forget_completed(self, uid: str) -> None:
        """A completed pod's object is gone (:meth:`complete`)."""
        if self.completed.pop(uid, None) is not None:
            self.completed_version += 1

    def detach(self, pod: PodInfo) -> None:
        """Record that ``pod`` is bound to a node the cluster does not have now (deleted, to
        come back under its name): it still counts for its queue's quota and limits."""
        if pod.uid not in self.detached:
            self.detached[pod.uid] = pod
            self.detached_version += 1

    def attach(self, uid: str) -> None:
        """Pod ``uid`` is no longer detached (:meth:`detach`): placed again, or gone."""
        if self.detached.pop(uid, None) is not None:
            self.detached_version += 1

    def release(self, uid: str) -> tuple[PodInfo, Placement] | None:
        """Remove a placed pod and give back what it held; returns it, or None if unknown."""
        placement = self.placements.pop(uid, None)
        if placement is None:
            return None
        pod = self.pods.pop(uid)
        self.dra_allocated_milli -= placement.dra_milli
        idx = placement.node
        self.node_pods[idx].pop(uid, None)
        self.pods_with_affinity.pop(uid, None)
        self._charge(idx, pod, placement, -1)
        if placement.devices:
            self._take_devices(idx, placement, +1)
        self.load_version += 1
        self.node_version[idx] += 1
        self.release_version += 1
        return pod, placement

    def _take_devices(self, idx: int, placement: Placement, sign: int) -> None:
        """Add (``sign`` +1) or take (-1) the placement's share of each existing device."""
        count = int(self.gpu_count[idx])
        for d in placement.devices:
            if 0 <= d < count:
                self.device_milli_free[idx, d] += sign * placement.device_milli
                self.device_memory_free[idx, d] += sign * placement.device_memory
        self._recount_idle(idx)

    def set_devices(self, uid: str, devices: Iterable[int]) -> Placement:
        """Move placed pod ``uid`` to ``devices`` of its node, keeping the placement object
        (and every other field of it); raises ``KeyError`` if ``uid`` is not placed."""
        placement = self.placements[uid]
        pod = self.pods[uid]
        idx = placement.node
        self._charge(idx, pod, placement, -1)
        devs = tuple(devices)
        gpu = pod.gpu
        placement.devices = devs
        placement.device_milli = (WHOLE if gpu.is_whole else gpu.milli) if devs else 0
        placement.device_memory = self.device_memory_for(pod, idx) if devs else 0
        self._charge(idx, pod, placement, +1)
        self._recompute_devices(idx)
        self.load_version += 1
        self.release_version += 1
        return placement

    def verify_node(self, idx: int) -> list[str]:
        """Recompute node ``idx``'s load and per-device arrays from its placements; returns
        the names of the arrays that had drifted (now repaired), empty when consistent."""
        placements = self.placements
        cpu = memory_sum = gpu_memory = 0
        cols: list[np.ndarray] = []
        amounts: list[np.ndarray] = []
        for uid, pod in self.node_pods[idx].items():
            c, a = self.request_vector(pod)
            cols.append(c)
            amounts.append(a)
            pod_cpu, pod_memory = pod.node_cpu_memory
            cpu += pod_cpu
            memory_sum += pod_memory
            pl = placements[uid]
            gpu_memory += pl.device_memory * len(pl.devices)
        requested = np.zeros(len(self.resources), dtype=np.int64)
        if cols:
            np.add.at(requested, np.concatenate(cols), np.concatenate(amounts))
        requested[COL_GPU_MEMORY] += gpu_memory
        scoring = np.array([cpu, memory_sum], dtype=np.int64)
        milli, memory = self._device_free(idx)
        drift = []
        for name, arr, want in (
            ("requested", self.requested, requested),
            ("scoring_requested", self.scoring_requested, scoring),
            ("device_milli_free", self.device_milli_free, milli),
            ("device_memory_free", self.device_memory_free, memory),
        ):
            if not np.array_equal(arr[idx], want):
                arr[idx] = want
                drift.append(name)
        if drift:
            self._recount_idle(idx)
            self.node_version[idx] += 1
            self.load_version += 1
            self.release_version += 1
        return drift

    # ---- summaries ----------------------------------------------------------------------
    def gpu_capacity_milli(self) -> int:
        """Total GPU compute of active nodes, milli-GPU."""
        n = self.size
        dra = self.dra.gpu_capacity_milli()  # GPUs published in ResourceSlices
        return int(self.allocatable[:n, COL_GPU_MILLI][self.active[:n]].sum()) + dra

    def gpu_allocated_milli(self) -> int:
        """GPU compute held by placed pods, milli-GPU."""
        n = self.size
        held = int(self.requested[:n, COL_GPU_MILLI][self.active[:n]].sum())
        return held + self.dra_allocated_milli
