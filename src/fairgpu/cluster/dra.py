"""DraStore: DeviceClasses, ResourceSlices, ResourceClaims and templates, plus in-flight choices.

Attached to :class:`ClusterState` as ``cluster.dra`` (like ``cluster.volumes``). The adapters
fill it (the simulator from YAML, the live scheduler from watches); the engine reads it and,
like kube-scheduler's assume cache, records the devices the DynamicResources filter chose for
each pod on each feasible node (:class:`PodChoice`). Once the pod is placed that choice *is*
the allocation: later pods see its devices as taken, and :meth:`DraStore.decision` gives the
pre-bind step exactly what kube-scheduler writes to ``status.allocation`` (per result: request,
driver, pool, device; and the node the allocation is pinned to) and ``status.reservedFor``.
Choices of pods that are not (or no longer) placed are ignored, so discarded attempts need no
cleanup here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from fairgpu.model.dra import (
    ClaimInfo,
    ClaimRef,
    ClaimTemplateInfo,
    DeviceClassInfo,
    DeviceInfo,
    DeviceResult,
    DraObject,
    RequestInfo,
    SliceInfo,
    being_deleted,
    claim_not_found,
    from_template,
)
from fairgpu.model.dra_gpus import MIB, device_gpu_memory_mib, device_gpu_milli, selects
from fairgpu.model.dra_pins import NodePin
from fairgpu.model.gpu import WHOLE
from fairgpu.model.pod import PodInfo

if TYPE_CHECKING:
    from fairgpu.cluster.state import ClusterState

CounterKey = tuple[str, str, str]  # (driver, pool, counter set)
DeviceKey = tuple[str, str, str]  # (driver, pool, device)


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """The allocation of one claim: its device results and the node it is pinned to."""

    claim: str  # namespace/name
    results: tuple[DeviceResult, ...]
    node: str = ""
    pin: NodePin | None = None  # a label selector instead of a node name

    def admits(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """Whether a pod using this allocation may run on the node."""
        if self.node:
            return self.node == node_name
        return self.pin is None or self.pin.admits(node_name, labels)

    def status(self) -> dict[str, Any]:
        """``status.allocation`` as kube-scheduler writes it (resource.k8s.io/v1 JSON)."""
        results = []
        for r in self.results:
            entry: dict[str, Any] = {
                "request": r.request,
                "driver": r.driver,
                "pool": r.pool,
                "device": r.device,
            }
            if r.admin:
                entry["adminAccess"] = True
            results.append(entry)
        out: dict[str, Any] = {"devices": {"results": results}}
        if self.node:
            match = {"key": "metadata.name", "operator": "In", "values": [self.node]}
            out["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [match]}]}
        elif self.pin is not None:
            out["nodeSelector"] = self.pin.selector()
        return out


@dataclass(slots=True)
class PodChoice:
    """For one pod: per feasible node slot, the allocation of each claim it had to allocate."""

    node: dict[int, tuple[ClaimAllocation, ...]] = field(default_factory=dict)


@dataclass(slots=True)
class NodeDevices:
    """What the allocator sees on one node: reachable devices in kube-scheduler's order
    (pool, slice, device), counter totals per counter set, and pools it must not trust."""

    devices: list[DeviceInfo] = field(default_factory=list)
    counters: dict[CounterKey, dict[str, int]] = field(default_factory=dict)
    incomplete: set[tuple[str, str]] = field(default_factory=set)
    slice_of: dict[DeviceKey, SliceInfo] = field(default_factory=dict)
    groups: dict[CounterKey, list[DeviceInfo]] = field(default_factory=dict)


@dataclass(slots=True)
class InUse:
    """Devices allocated (or chosen for placed pods) and counters they consume."""

    devices: set[DeviceKey] = field(default_factory=set)
    counters: dict[CounterKey, dict[str, int]] = field(default_factory=dict)


@dataclass(slots=True)
class DraStore:
    """DRA objects by key and the per-pod device choices of the current decisions.

    ``version`` grows on every change (plugins cache derived data on it); ``slice_version``
    only when slices change.
    """

    classes: dict[str, DeviceClassInfo] = field(default_factory=dict)
    slices: dict[str, SliceInfo] = field(default_factory=dict)
    claims: dict[str, ClaimInfo] = field(default_factory=dict)
    templates: dict[str, ClaimTemplateInfo] = field(default_factory=dict)
    choices: dict[str, PodChoice] = field(default_factory=dict)
    # Pods the engine evicts (or tries evicting, planning a preemption): claims only they
    # reserve count as free while they are not placed. Adapters drop a pod once it is gone.
    released: set[str] = field(default_factory=set)
    version: int = 0
    slice_version: int = 0
    _nodes: dict[str, tuple[int, NodeDevices, dict[str, str] | None]] = field(default_factory=dict)
    _devices: dict[DeviceKey, DeviceInfo] = field(default_factory=dict)
    _counters: dict[CounterKey, dict[str, int]] = field(default_factory=dict)
    _devices_version: int = -1
    _allocated: tuple[int, InUse] | None = None
    _asks: dict[tuple[str, Any], DeviceInfo | None] = field(default_factory=dict)
    _asks_version: int = -1
    _capacity: tuple[int, int] = (0, 0)
    _capacity_version: int = -1

    # ---- updates (adapters) ------------------------------------------------------------
    def add(self, obj: DraObject) -> None:
        """Add or replace any decoded DRA object."""
        if isinstance(obj, SliceInfo):
            self.slices[obj.name] = obj
            self.slice_version += 1
        elif isinstance(obj, DeviceClassInfo):
            self.classes[obj.name] = obj
        elif isinstance(obj, ClaimInfo):
            self.set_claim(obj)
            return
        else:
            self.templates[obj.key] = obj
        self.version += 1

    def set_claim(self, claim: ClaimInfo) -> None:
        """Add or replace a claim."""
        self.claims[claim.key] = claim
        self.version += 1

    def deallocate(self, key: str, uid: str) -> bool:
        """Clear claim ``key``'s allocation and reservations (the status update of
        kube-scheduler's DynamicResources PostFilter); False when the claim is gone or is
        another object now (``uid`` differs)."""
        claim = self.claims.get(key)
        if claim is None or (uid and claim.uid != uid):
            return False
        self.set_claim(replace(claim, allocation=None, reserved_for=(), node="", pin=None))
        return True

    def remove(self, kind: str, key: str) -> None:
        """Forget object ``key`` of ``kind`` (class, slice, claim or template)."""
        table: dict[str, object] = {
            "class": self.classes,
            "slice": self.slices,
            "claim": self.claims,
            "template": self.templates,
        }[kind]  # type: ignore[assignment]
        gone = table.pop(key, None)
        if gone is None:
            return
        if kind == "slice":
            self.slice_version += 1
        self.version += 1

    # ---- queries (plugins) ---------------------------------------------------------------
    def resolve(self, pod: PodInfo, ref: ClaimRef) -> ClaimInfo | str | None:
        """The claim behind one ``spec.resourceClaims`` entry of ``pod``, found as
        kube-scheduler finds it (``resourceclaim.Name``, then ``IsForPod`` for a template's
        claim): the claim; None when the entry needs no claim (its status entry names none);
        or why the pod cannot use one yet, in kube-scheduler's words.

        A claim being deleted is returned (a running pod still holds it): only scheduling
        refuses it. It is refused here when it is not the pod's either, as kube-scheduler
        reports the deletion first.
        """
        entry, claim_name, _template = ref
        if claim_name:
            claim = self.claims.get(f"{pod.namespace}/{claim_name}")
            return claim if claim is not None else claim_not_found(claim_name)
        # A template's claim is the one the pod's status names, never found by its name or
        # annotation: the controller records it only once it created (and owns) the claim.
        status = next((s for s in pod.claim_statuses if s[0] == entry), None)
        if status is None:
            return f'pod "{pod.key}": ResourceClaim not created yet' + from_template(ref)
        generated = status[1]
        if generated is None:
            return None
        claim = self.claims.get(f"{pod.namespace}/{generated}")
        if claim is None:
            return claim_not_found(generated) + from_template(ref)
        if claim.owner_pod != pod.uid:
            if claim.deleting:
                return being_deleted(claim, ref)
            return (
                f"ResourceClaim {claim.key} was not created for pod {pod.key} (pod is not owner)"
                + from_template(ref)
            )
        return claim

    def pod_claim(self, pod: PodInfo, ref: ClaimRef) -> ClaimInfo | None:
        """The claim :meth:`resolve` finds for the entry, or None (none needed, or none the
        pod may use: it then holds nothing through this entry)."""
        found = self.resolve(pod, ref)
        return found if isinstance(found, ClaimInfo) else None

    def device(self, key: DeviceKey) -> DeviceInfo | None:
        """The device ``(driver, pool, name)`` in the newest generation of its pool."""
        self._index()
        return self._devices.get(key)

    def counter_totals(self, key: CounterKey) -> dict[str, int]:
        """The counters of counter set ``(driver, pool, set)`` (empty if unknown)."""
        self._index()
        return self._counters.get(key, {})

    def _index(self) -> None:
        if self._devices_version != self.slice_version:
            valid = self._valid_slices()
            self._devices = {d.key: d for s in valid for d in s.devices}
            self._counters = {
                (s.driver, s.pool, name): amounts
                for s in valid
                for name, amounts in s.counters.items()
            }
            self._devices_version = self.slice_version

    def _valid_slices(self) -> list[SliceInfo]:
        """Slices of each pool's newest generation (older ones are being replaced)."""
        newest: dict[tuple[str, str], int] = {}
        for s in self.slices.values():
            pool = (s.driver, s.pool)
            newest[pool] = max(newest.get(pool, s.generation), s.generation)
        return [s for s in self.slices.values() if s.generation == newest[(s.driver, s.pool)]]

    def node_devices(self, node_name: str, labels: Mapping[str, str]) -> NodeDevices:
        """The devices reachable from a node (cached until slices change, or the node's
        labels when a slice selects nodes by label)."""
        hit = self._nodes.get(node_name)
        if hit is not None and hit[0] == self.slice_version and hit[2] in (None, labels):
            return hit[1]
        if len(self._nodes) > 100_000:
            self._nodes.clear()
        view = NodeDevices()
        valid = self._valid_slices()
        counters: dict[CounterKey, dict[str, int]] = {}
        for s in valid:
            for name, amounts in s.counters.items():
                counters[(s.driver, s.pool, name)] = amounts
        reaching = [
            s
            for s in sorted(valid, key=lambda s: (s.driver, s.pool, s.name))
            if s.reaches(node_name, labels)
        ]
        # kube-scheduler counts only the slices that reach the node: a pool spread over
        # several nodes is incomplete from each of them.
        here = Counter((s.driver, s.pool) for s in reaching)
        for s in reaching:
            if here[(s.driver, s.pool)] != s.slice_count:
                view.incomplete.add((s.driver, s.pool))
            for d in s.devices:
                view.devices.append(d)
                view.slice_of[d.key] = s
                for set_name in d.consumes:
                    ck = (s.driver, s.pool, set_name)
                    view.counters[ck] = counters.get(ck, {})
                    view.groups.setdefault(ck, []).append(d)
        by_label = any(s.node_terms is not None for s in valid)
        self._nodes[node_name] = (self.slice_version, view, dict(labels) if by_label else None)
        return view

    def effective(self, claim: ClaimInfo, cluster: ClusterState) -> ClaimAllocation | None:
        """The claim's allocation: written in its status, or chosen for a placed pod."""
        if claim.allocation is not None:
            return ClaimAllocation(claim.key, claim.allocation, claim.node, claim.pin)
        for uid, choice in self.choices.items():
            placement = cluster.placements.get(uid)
            if placement is None:
                continue
            for alloc in choice.node.get(placement.node, ()):
                if alloc.claim == claim.key:
                    return alloc
        return None

    def in_use(self, cluster: ClusterState) -> InUse:
        """Devices allocated to claims (admin-access results excepted, as they do not take
        the device) or chosen for placed pods, and the counters those devices consume.

        A claim reserved only by pods the engine is evicting (:attr:`released`, and not
        placed) is free: the preemptor may plan with its devices, as the claim is
        deallocated once its last pod is gone."""
        freed = self._freed_claims(cluster)
        if freed:
            base = InUse()
            for key, claim in self.claims.items():
                if key not in freed:
                    self._charge(base, claim.allocation or ())
        else:
            if self._allocated is None or self._allocated[0] != self.version:
                base = InUse()
                for claim in self.claims.values():
                    self._charge(base, claim.allocation or ())
                self._allocated = (self.version, base)
            base = self._allocated[1]
        pending = [
            alloc
            for uid, choice in self.choices.items()
            if (pl := cluster.placements.get(uid)) is not None
            for alloc in choice.node.get(pl.node, ())
            if (c := self.claims.get(alloc.claim)) is not None and c.allocation is None
        ]
        if not pending:
            return base
        out = InUse(set(base.devices), {k: dict(v) for k, v in base.counters.items()})
        for alloc in pending:
            self._charge(out, alloc.results)
        return out

    def conflicting(self, claim_key: str, results: Iterable[DeviceResult]) -> list[ClaimInfo]:
        """The other claims whose written allocation ``results`` would double-book: a device
        in common, or a counter of a shared counter set that the two together consume beyond
        what the set offers (a whole GPU and a MIG partition of it; two partitions on
        separate memory slices do not conflict). Admin-access results take nothing.

        The engine never chooses such devices -- except those of claims only pods it is
        evicting reserve (:meth:`in_use`): until those claims are deallocated in the API,
        writing the preemptor's allocation would show one device allocated twice."""
        mine = [r for r in results if not r.admin]
        if not mine:
            return []
        devices = {r.key for r in mine}
        used = InUse()
        self._charge(used, mine)
        out = []
        for key, claim in self.claims.items():
            if key == claim_key or not claim.allocation:
                continue
            theirs = [r for r in claim.allocation if not r.admin]
            if any(r.key in devices for r in theirs) or self._over(used, theirs):
                out.append(claim)
        return out

    def _over(self, used: InUse, results: list[DeviceResult]) -> bool:
        """Would ``results`` on top of ``used``'s counters exceed a counter set's totals?"""
        theirs = InUse()
        self._charge(theirs, results)
        for key, amounts in theirs.counters.items():
            mine = used.counters.get(key)
            if not mine:
                continue
            totals = self.counter_totals(key)
            for counter, amount in amounts.items():
                if amount + mine.get(counter, 0) > totals.get(counter, 0):
                    return True
        return False

    def _freed_claims(self, cluster: ClusterState) -> set[str]:
        gone = {u for u in self.released if u not in cluster.placements}
        if not gone:
            return set()
        # Forget evicted pods no claim names any more (their claims were released).
        reserved = {u for c in self.claims.values() for u in c.reserved_for}
        self.released -= gone - reserved
        return {
            key
            for key, c in self.claims.items()
            if c.allocation is not None and c.reserved_for and gone.issuperset(c.reserved_for)
        }

    def _charge(self, into: InUse, results: Iterable[DeviceResult]) -> None:
        for r in results:
            if r.admin or r.key in into.devices:
                continue
            into.devices.add(r.key)
            device = self.device(r.key)
            if device is None:
                continue
            for set_name, amounts in device.consumes.items():
                used = into.counters.setdefault((r.driver, r.pool, set_name), {})
                for counter, amount in amounts.items():
                    used[counter] = used.get(counter, 0) + amount

    # ---- GPUs through claims (fair shares, quotas, metrics) ---------------------------------
    def gpu_milli(self, device: DeviceInfo) -> int:
        """How much of a GPU ``device`` is, milli-GPU (see :func:`device_gpu_milli`)."""
        return device_gpu_milli(device, self.counter_totals)

    def _gpu(self, device: DeviceInfo) -> tuple[int, int]:
        """(milli-GPU, GPU memory MiB) of ``device``; (0, 0) when it is no GPU."""
        milli = self.gpu_milli(device)
        return (milli, device_gpu_memory_mib(device)) if milli else (0, 0)

    def gpu_capacity_milli(self) -> int:
        """GPUs (milli) the slices publish: each device without counters at its size, and
        each counter set of a GPU driver as one GPU (its partitions share it)."""
        return self._gpu_capacity()[0]

    def gpu_memory_capacity_mib(self) -> int:
        """GPU memory (MiB) the slices publish, counted as :meth:`gpu_capacity_milli` counts
        GPUs: a counter set of a GPU driver once, at its ``memory`` counter (else the largest
        memory of the devices that consume it)."""
        return self._gpu_capacity()[1]

    def _gpu_capacity(self) -> tuple[int, int]:
        if self._capacity_version != self.slice_version:
            milli = memory = 0
            sets: dict[CounterKey, int] = {}
            self._index()
            for device in self._devices.values():
                gpu = self._gpu(device)
                if not device.consumes:
                    milli, memory = milli + gpu[0], memory + gpu[1]
                elif gpu[0]:
                    for name in device.consumes:
                        key = (device.driver, device.pool, name)
                        sets[key] = max(sets.get(key, 0), gpu[1])
            for key, largest in sets.items():
                counted = self.counter_totals(key).get("memory")
                memory += counted // MIB if counted else largest
            self._capacity = (milli + WHOLE * len(sets), memory)
            self._capacity_version = self.slice_version
        return self._capacity

    def _results_gpu(self, results: Iterable[DeviceResult]) -> tuple[int, int]:
        milli = memory = 0
        for r in results:
            device = self.device(r.key)
            if device is not None and not r.admin:  # admin access takes nothing
                gpu = self._gpu(device)
                milli, memory = milli + gpu[0], memory + gpu[1]
        return milli, memory

    def held_gpu(self, pod: PodInfo, cluster: ClusterState) -> tuple[int, int]:
        """(milli-GPU, GPU memory MiB) placed ``pod`` holds through its claims. A claim
        shared with a pod placed before counts for that pod only."""
        milli = memory = 0
        uid = pod.uid
        for ref in pod.resource_claims:
            claim = self.pod_claim(pod, ref)
            if claim is None:
                continue
            if any(u != uid and u in cluster.placements for u in claim.reserved_for):
                continue
            alloc = self.effective(claim, cluster)
            if alloc is not None:
                gpu = self._results_gpu(alloc.results)
                milli, memory = milli + gpu[0], memory + gpu[1]
        return milli, memory

    def held_gpu_milli(self, pod: PodInfo, cluster: ClusterState) -> int:
        """The milli-GPU of :meth:`held_gpu`."""
        return self.held_gpu(pod, cluster)[0]

    def asked_gpu(self, pod: PodInfo, cluster: ClusterState) -> tuple[int, int]:
        """(milli-GPU, GPU memory MiB) a pending pod asks for through its claims: a claim
        allocated already (and held by no placed pod) counts its devices; one still to
        allocate counts each request's devices (its first alternative; ``All`` as one) at the
        size of the first device, in pool order, that its class and selectors select."""
        milli = memory = 0
        for ref in pod.resource_claims:
            claim = self.pod_claim(pod, ref)
            if claim is None or any(u in cluster.placements for u in claim.reserved_for):
                continue
            if claim.allocation is not None:
                gpu = self._results_gpu(claim.allocation)
                milli, memory = milli + gpu[0], memory + gpu[1]
                continue
            for req in claim.spec.requests:
                first = req.alternatives[0] if req.alternatives else req
                device = self._first_selected(first)
                if device is not None:
                    gpu = self._gpu(device)
                    n = max(1, first.count)
                    milli, memory = milli + n * gpu[0], memory + n * gpu[1]
        return milli, memory

    def asked_gpu_milli(self, pod: PodInfo, cluster: ClusterState) -> int:
        """The milli-GPU of :meth:`asked_gpu`."""
        return self.asked_gpu(pod, cluster)[0]

    def _first_selected(self, req: RequestInfo) -> DeviceInfo | None:
        """The first device, in pool order, that ``req``'s class and selectors select."""
        key = (req.class_name, req.selectors)
        if self._asks_version != self.slice_version:
            self._asks = {}
            self._asks_version = self.slice_version
        if key not in self._asks:
            found = None
            cls = self.classes.get(req.class_name)
            self._index()
            if cls is not None:
                for device in sorted(self._devices.values(), key=lambda d: d.key):
                    if selects(cls.selectors + req.selectors, device):
                        found = device
                        break
            self._asks[key] = found
        return self._asks[key]

    # ---- decisions -------------------------------------------------------------------------
    def decision(self, uid: str, node: int) -> tuple[ClaimAllocation, ...]:
        """What kube-scheduler's PreBind writes for pod ``uid`` placed on slot ``node``: each
        claim it allocated, with results in order (request, driver, pool, device)."""
        choice = self.choices.get(uid)
        return choice.node.get(node, ()) if choice is not None else ()

    def commit(self, pod: PodInfo, node: int) -> list[str]:
        """Apply ``pod``'s choice on slot ``node`` as the pre-bind step does: write each new
        allocation and add the pod to every claim's ``reservedFor``. Returns the claims
        changed."""
        uid = pod.uid
        allocs = {a.claim: a for a in self.decision(uid, node)}
        changed = []
        for ref in pod.resource_claims:
            claim = self.pod_claim(pod, ref)
            if claim is None:
                continue
            alloc = allocs.get(claim.key)
            if alloc is not None and claim.allocation is None:
                claim = replace(claim, allocation=alloc.results, node=alloc.node, pin=alloc.pin)
            if uid not in claim.reserved_for:
                claim = replace(claim, reserved_for=(*claim.reserved_for, uid))
            self.set_claim(claim)
            changed.append(claim.key)
        self.choices.pop(uid, None)
        return changed

    def release_pod(self, pod: PodInfo) -> None:
        """The pod is gone: drop it from ``reservedFor``; a claim nobody reserves any more is
        deallocated (kube-controller-manager's resourceclaim controller), and a claim
        generated for the pod is deleted with it."""
        uid = pod.uid
        self.choices.pop(uid, None)
        self.released.discard(uid)
        for ref in pod.resource_claims:
            claim = self.pod_claim(pod, ref)
            if claim is None:
                continue
            if claim.owner_pod == uid:
                self.remove("claim", claim.key)
                continue
            left = tuple(u for u in claim.reserved_for if u != uid)
            if left == claim.reserved_for:
                continue
            self.set_claim(
                replace(
                    claim,
                    reserved_for=left,
                    allocation=claim.allocation if left else None,
                    node=claim.node if left else "",
                    pin=claim.pin if left else None,
                )
            )

    def create_pod_claims(self, pod: PodInfo) -> list[str]:
        """Create the claims of the pod's template entries and record each in the pod's
        status (``pod.claim_statuses``, updated in place), as kube-controller-manager's
        resourceclaim controller does: for an entry whose status names no claim, or one that
        is gone or not the pod's, a new claim owned by the pod (named ``<pod>-<entry>``, with
        a suffix if that name is taken). A missing template creates nothing: the pod then
        waits. Returns the claims created."""
        made = []
        for ref in pod.resource_claims:
            template = ref[2]
            if not template or not isinstance(self.resolve(pod, ref), str):
                continue  # a claim by name, the pod's own claim, or no claim needed
            tpl = self.templates.get(f"{pod.namespace}/{template}")
            if tpl is None:
                continue
            name = self._free_name(pod.namespace, f"{pod.name}-{ref[0]}")
            claim = ClaimInfo(
                pod.namespace, name, f"{pod.uid}-{ref[0]}", tpl.spec, owner_pod=pod.uid
            )
            self.set_claim(claim)
            pod.claim_statuses = _with_status(pod.claim_statuses, ref[0], name)
            made.append(claim.key)
        return made

    def _free_name(self, namespace: str, base: str) -> str:
        """``base``, or ``base-<n>`` when a claim of that name exists (the controller's
        generateName never reuses a name)."""
        name, n = base, 1
        while f"{namespace}/{name}" in self.claims:
            n += 1
            name = f"{base}-{n}"
        return name


def _with_status(
    statuses: tuple[tuple[str, str | None], ...], entry: str, claim: str
) -> tuple[tuple[str, str | None], ...]:
    """``statuses`` with ``entry`` naming ``claim`` (its entry replaced, else appended)."""
    if any(name == entry for name, _ in statuses):
        return tuple((name, claim if name == entry else c) for name, c in statuses)
    return (*statuses, (entry, claim))
