"""An auditor of the API server's own state: no GPU, node or pod slot is ever booked twice.

It reads only what the API server holds (all Nodes, and all Pods of every namespace or of one,
those being deleted included: a terminating pod keeps its node's resources until it is gone),
never the scheduler's cache, and reports every violation as a sentence naming the node and pods:

* per node, the ``fairgpu.io/gpu-devices`` annotations of its pods add up to at most one whole
  device (1000 milli-GPU, and the device's memory when the share names memory) on every device,
  and name only devices the node has;
* per node, the devices so booked plus the whole GPUs of pods without the annotation (bound by
  another scheduler) are at most the node's ``nvidia.com/gpu``;
* per node, the pods' effective CPU, memory and ephemeral-storage requests (sidecars and init
  containers counted as kube-scheduler counts them, plus overhead) and their number are at most
  its allocatable;
* across the states audited, no pod (by uid) moves to another node or changes the devices it
  was bound with: a pod is bound once;
* no pod is deleted before it was ever bound, unless the test deleted it itself (an Eviction
  of a pod never bound deletes it outright: a scheduler must never choose one as a victim).
* when the test names queue limits (:attr:`Auditor.limits`), the pods of those queues
  (``fairgpu.io/queue``) hold at most that many GPUs together.

Pods bound to a node that does not exist (deleted, not re-created yet) are still checked for
device overlap among themselves; a node showing 0 GPUs (its status not written yet) is not
judged on its GPUs. Use :meth:`Auditor.watching` to audit the state after every Pod and Node
event, or call :meth:`Auditor.check` (:meth:`Auditor.running` in the background) to audit
listed states.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from fairgpu.api.quantity import parse_quantity
from fairgpu.devcluster import KubeClient, WatchStream
from fairgpu.model.gang_topology import ANN_TOPOLOGY_REQUIRED
from fairgpu.model.gpu import ANN_GPU_DEVICES, WHOLE, decode_gpu_devices
from fairgpu.model.pod import LABEL_QUEUE
from fairgpu.tenancy.resolve import LABEL_POD_GROUP

GPU = "nvidia.com/gpu"
MEMORY_LABEL = "nvidia.com/gpu.memory"
TERMINAL = ("Succeeded", "Failed")
SCALAR = ("cpu", "memory", "ephemeral-storage")


def _amount(value: Any) -> float:
    return float(parse_quantity(value))


def _requests(container: dict[str, Any]) -> dict[str, float]:
    res = container.get("resources") or {}
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}  # limits default them
    return {k: _amount(v) for k, v in merged.items()}


def _held(container: dict[str, Any], status: dict[str, Any] | None) -> dict[str, float]:
    """What a running container holds on its node: once the kubelet reports its resources,
    the larger of what it configured and what it admitted (a resize it has not applied,
    down or up, changes neither); before that, its spec. (A scheduler counts a resize up
    that waits as taken already -- more than this, never less.)"""
    if not status or not status.get("resources"):
        return _requests(container)
    out: dict[str, float] = {}
    for source in (
        status["resources"].get("requests") or {},
        status.get("allocatedResources") or {},
    ):
        for k, v in source.items():
            out[k] = max(out.get(k, 0.0), _amount(v))
    # Resources the kubelet does not report (GPUs, extended ones) stay as the spec asks.
    for k, v in _requests(container).items():
        out.setdefault(k, v)
    return out


def effective_requests(pod: dict[str, Any]) -> dict[str, float]:
    """A pod's requests as kube-scheduler counts them: app containers plus sidecars (init
    containers with ``restartPolicy: Always``), at least each plain init container on top of the
    sidecars started before it; a pod-level cpu, memory or hugepages request in place of the
    containers'; plus ``spec.overhead``. A bound pod's running containers count what the
    kubelet holds for them (:func:`_held`), whatever an in-place resize asks."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    statuses = (
        {
            s.get("name"): s
            for s in (status.get("containerStatuses") or [])
            + (status.get("initContainerStatuses") or [])
        }
        if spec.get("nodeName")
        else {}
    )
    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        for k, v in _held(c, statuses.get(c.get("name"))).items():
            total[k] = total.get(k, 0.0) + v
    sidecars: dict[str, float] = {}
    floor: dict[str, float] = {}
    for c in spec.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            for k, v in _held(c, statuses.get(c.get("name"))).items():
                sidecars[k] = sidecars.get(k, 0.0) + v
            req: dict[str, float] = {}
        else:
            req = _requests(c)
        for k in set(req) | set(sidecars):
            floor[k] = max(floor.get(k, 0.0), sidecars.get(k, 0.0) + req.get(k, 0.0))
    for k, v in sidecars.items():
        total[k] = total.get(k, 0.0) + v
    for k, v in floor.items():
        total[k] = max(total.get(k, 0.0), v)
    pod_level = (spec.get("resources") or {}).get("requests") or {}
    for k, v in pod_level.items():
        if k in ("cpu", "memory") or k.startswith("hugepages-"):
            total[k] = _amount(v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, 0.0) + _amount(v)
    return total


@dataclass
class _NodeLoad:
    pods: list[str] = field(default_factory=list)
    milli: dict[int, list[tuple[str, int]]] = field(default_factory=dict)
    memory: dict[int, int] = field(default_factory=dict)
    unannotated_gpus: int = 0
    requested: dict[str, float] = field(default_factory=dict)


def _key(p: dict[str, Any]) -> str:
    return f"{p['metadata']['namespace']}/{p['metadata']['name']}"


def _node_of(p: dict[str, Any] | None) -> str:
    return ((p or {}).get("spec") or {}).get("nodeName") or ""


def holds(p: dict[str, Any]) -> bool:
    """Does ``p`` hold its node's resources (bound, not finished; terminating ones do)?"""
    return bool(_node_of(p)) and (p.get("status") or {}).get("phase") not in TERMINAL


class Auditor:
    """Checks invariants of the API server's state; remembers each pod's node and devices.

    Two ways to run it: :meth:`check` (or :meth:`running`, which calls it in the background)
    lists Nodes and Pods and audits that state; :meth:`watching` follows every Pod and Node
    event through watches and audits the state after each one, so no passing state is missed,
    and also records pods deleted while unbound (an Eviction of a pod never bound deletes it
    outright) unless the test deleted them itself (:attr:`expected_deletes`).

    Args:
        client: an API client that may list and watch all pods and nodes.
        namespace: only audit this namespace's pods (None: every namespace).

    Attributes:
        violations: every distinct violation seen (devices, GPUs, CPU, memory or pods beyond a
            node's capacity; a pod moved to another node or given other devices).
        unbound_deleted: ``namespace/name`` of pods deleted before they were ever bound,
            that are not in :attr:`expected_deletes` (seen by :meth:`watching` only).
        expected_deletes: ``namespace/name`` or uid of pods the test deletes itself (the uid
            when the test creates a pod again under the same name).
        limits: per limit's name, the queues it caps together and the most milli-GPU their
            pods may hold (a department's ``limit``).
        checks: states audited so far (lists, or events while watching).
        gaps: times a watch had to relist (410 Gone): the states in between were not seen.
            A problem (:meth:`problems`) unless ``gaps_allowed`` is set (a test that restarts
            the API server, after which every watch resumes with 410).
        unjudged: ``namespace/name`` of pods that went in such a gap while last seen unbound
            -- deleted unbound, or bound and deleted within the gap: the events cannot tell.
    """

    def __init__(self, client: KubeClient, namespace: str | None = None) -> None:
        self.client = client
        self.namespace = namespace
        self.bound: dict[str, tuple[str, str, str]] = {}  # uid -> (pod, node, annotation)
        self.violations: list[str] = []
        self.unbound_deleted: list[str] = []
        self.expected_deletes: set[str] = set()
        self.limits: dict[str, tuple[frozenset[str], int]] = {}
        self.checks = 0
        self.gaps = 0
        self.gaps_allowed = False
        self.unjudged: list[str] = []
        self._lock = threading.Lock()
        # (uid, resourceVersion) -> effective requests
        self._requests: dict[tuple[str, str], dict[str, float]] = {}
        self._nodes: dict[str, dict[str, Any]] = {}  # the state followed by watching()
        self._pods: dict[str, dict[str, Any]] = {}

    def _expected(self, pod: dict[str, Any]) -> bool:
        """Did the test delete ``pod`` itself?"""
        expected = self.expected_deletes
        return _key(pod) in expected or pod["metadata"]["uid"] in expected

    def _pods_path(self) -> str:
        if self.namespace:
            return f"/api/v1/namespaces/{self.namespace}/pods"
        return "/api/v1/pods"

    def problems(self) -> list[str]:
        """Every violation and every unbound pod deleted, as sentences (empty: all clean)."""
        gone = [f"pod {k} was deleted before it was ever bound" for k in self.unbound_deleted]
        missed = [] if self.gaps_allowed or not self.gaps else [f"{self.gaps} watch gaps (410)"]
        return [*self.violations, *gone, *missed]

    def check(self) -> list[str]:
        """Audit the current state once; returns the violations found now (those not seen
        before are also appended to :attr:`violations`)."""
        nodes = {n["metadata"]["name"]: n for n in self.client.get("/api/v1/nodes")["items"]}
        pods = self.client.get(self._pods_path())["items"]
        with self._lock:
            found = self._audit(nodes, [p for p in pods if holds(p)], None)
            self.checks += 1
            self._note(found)
        return found

    def _note(self, found: list[str]) -> None:
        for v in found:
            if v not in self.violations:
                self.violations.append(v)

    def _audit(
        self, nodes: dict[str, dict[str, Any]], pods: list[dict[str, Any]], only: set[str] | None
    ) -> list[str]:
        """Violations among ``pods`` (those holding their node), per node (those in ``only``
        if given), plus pods bound elsewhere or with other devices than before."""
        found: list[str] = []
        loads: dict[str, _NodeLoad] = {}
        for p in pods:
            node = _node_of(p)
            if only is not None and node not in only:
                continue
            found.extend(self._once(p, node))
            self._add(loads.setdefault(node, _NodeLoad()), p, found)
        for name, load in sorted(loads.items()):
            found.extend(_node_violations(name, nodes.get(name), load))
        found.extend(_confined_violations(nodes, pods))
        found.extend(self._limit_violations(pods))
        return found

    def _limit_violations(self, pods: list[dict[str, Any]]) -> list[str]:
        """The limits of :attr:`limits` that ``pods`` (those holding their node) exceed."""
        found = []
        for name, (queues, most) in sorted(self.limits.items()):
            mine = [p for p in pods if _labels(p).get(LABEL_QUEUE) in queues]
            held = sum(_gpu_milli(p) for p in mine)
            if held > most:
                keys = sorted(_key(p) for p in mine)
                found.append(f"{name} holds {held} milli-GPU, above its limit of {most}: {keys}")
        return found

    def _once(self, p: dict[str, Any], node: str) -> list[str]:
        meta = p["metadata"]
        key = _key(p)
        ann = (meta.get("annotations") or {}).get(ANN_GPU_DEVICES, "")
        before = self.bound.setdefault(meta["uid"], (key, node, ann))
        if before[1:] != (node, ann):
            return [f"pod {key} was bound to {before[1]} [{before[2]}], now {node} [{ann}]"]
        return []

    def _add(self, load: _NodeLoad, p: dict[str, Any], found: list[str]) -> None:
        meta = p["metadata"]
        key = _key(p)
        load.pods.append(key)
        # A resize changes what a pod holds: keyed by version, not by pod alone.
        version = (meta["uid"], meta.get("resourceVersion", ""))
        req = self._requests.get(version)
        if req is None:
            if len(self._requests) > 100_000:
                self._requests.clear()
            req = self._requests[version] = effective_requests(p)
        for k in SCALAR:
            load.requested[k] = load.requested.get(k, 0.0) + req.get(k, 0.0)
        ann = (meta.get("annotations") or {}).get(ANN_GPU_DEVICES)
        if not ann:
            load.unannotated_gpus += int(req.get(GPU, 0))
            return
        try:
            shares = decode_gpu_devices(ann)
        except ValueError as error:
            found.append(f"pod {key}: unreadable {ANN_GPU_DEVICES} {ann!r}: {error}")
            return
        for s in shares:
            load.milli.setdefault(s.index, []).append((key, s.milli))
            load.memory[s.index] = load.memory.get(s.index, 0) + s.memory_mib

    @contextlib.contextmanager
    def running(self, interval: float = 0.2) -> Iterator[Auditor]:
        """Audit every ``interval`` seconds in a background thread while the block runs (and
        once more at its end)."""
        try:
            with repeating(self.check, interval, "auditor"):
                yield self
        finally:
            self.check()

    # ---- following every event ------------------------------------------------------------
    @contextlib.contextmanager
    def watching(self) -> Iterator[Auditor]:
        """Follow Pods and Nodes through watches while the block runs and audit the nodes each
        event touches, in the state just after it (terminating pods included, pods on a node
        that does not exist checked for device overlap); record unbound pods deleted."""
        stop = threading.Event()
        streams: list[WatchStream] = []
        threads = []
        for kind, path in (("node", "/api/v1/nodes"), ("pod", self._pods_path())):
            listed = self.client.get(path)
            with self._lock:
                for obj in listed["items"]:
                    self._apply(kind, "ADDED", obj)
            rv = listed["metadata"]["resourceVersion"]
            args = (kind, path, rv, stop, streams)
            threads.append(threading.Thread(target=self._follow, args=args, daemon=True))
        for t in threads:
            t.start()
        try:
            yield self
        finally:
            stop.set()
            for s in list(streams):
                s.close()
            for t in threads:
                t.join(10)

    def _follow(
        self, kind: str, path: str, rv: str, stop: threading.Event, streams: list[WatchStream]
    ) -> None:
        """Follow one watch until ``stop``: resume from the last resourceVersion when the stream
        ends or drops, retry while the API server is down, relist on 410 Gone."""
        while not stop.is_set():
            try:
                stream = self.client.watch(path, {"resourceVersion": rv}, timeout_seconds=300)
            except Exception:  # the API server restarting: connection refused, 503
                stop.wait(0.05)
                continue
            streams.append(stream)
            with contextlib.suppress(Exception):  # dropped, or closed at the end of the block
                for ev in stream:
                    obj = ev["object"]
                    if ev["type"] == "ERROR":  # 410 Gone: a gap; audit what is listed now
                        rv = self._relist(kind, path)
                        break
                    rv = obj["metadata"].get("resourceVersion", rv)
                    with self._lock:
                        self._apply(kind, ev["type"], obj)
            streams.remove(stream)

    def _relist(self, kind: str, path: str) -> str:
        """After a gap in the events (410 Gone, as after an API server restart): audit the
        listed state. A pod gone in the gap that was last seen unbound may have been bound and
        deleted within it, so it is not judged; it goes to :attr:`unjudged`."""
        while True:
            try:
                listed = self.client.get(path)
                break
            except Exception:  # still restarting
                time.sleep(0.05)
        with self._lock:
            self.gaps += 1
            store = self._nodes if kind == "node" else self._pods
            before = dict(store)
            store.clear()
            for obj in listed["items"]:
                self._apply(kind, "ADDED", obj)
            if kind == "pod":
                for uid, obj in before.items():
                    if uid not in store and not _node_of(obj) and not self._expected(obj):
                        self.unjudged.append(_key(obj))
        return str(listed["metadata"]["resourceVersion"])

    def _apply(self, kind: str, etype: str, obj: dict[str, Any]) -> None:
        """One event into the followed state, then audit the nodes it touched (lock held)."""
        meta = obj["metadata"]
        if kind == "node":
            name = meta["name"]
            if etype == "DELETED":
                self._nodes.pop(name, None)
            else:
                self._nodes[name] = obj
            touched = {name}
        else:
            before = self._pods.pop(meta["uid"], None)
            touched = {_node_of(before), _node_of(obj)} - {""}
            if etype != "DELETED":
                self._pods[meta["uid"]] = obj
            elif not _node_of(obj) and not _node_of(before):
                key = _key(obj)
                if not self._expected(obj) and key not in self.unbound_deleted:
                    self.unbound_deleted.append(key)
        if touched:
            held = [p for p in self._pods.values() if holds(p)]
            self._note(self._audit(self._nodes, held, touched))
        self.checks += 1


def _labels(p: dict[str, Any]) -> dict[str, str]:
    return p["metadata"].get("labels") or {}


def _gpu_milli(p: dict[str, Any]) -> int:
    """The milli-GPU ``p`` holds: its devices' shares as annotated, else its whole GPUs."""
    ann = (p["metadata"].get("annotations") or {}).get(ANN_GPU_DEVICES)
    if ann:
        try:
            return sum(s.milli for s in decode_gpu_devices(ann))
        except ValueError:
            pass  # reported per node
    return int(effective_requests(p).get(GPU, 0)) * WHOLE


def _confined_violations(nodes: dict[str, dict[str, Any]], pods: list[dict[str, Any]]) -> list[str]:
    """Pod groups whose members must share a topology domain (the
    ``fairgpu.io/topology-required`` annotation) holding nodes of more than one."""
    domains: dict[tuple[str, str], set[str]] = {}
    for p in pods:
        meta = p["metadata"]
        key = (meta.get("annotations") or {}).get(ANN_TOPOLOGY_REQUIRED)
        group = (meta.get("labels") or {}).get(LABEL_POD_GROUP)
        node = nodes.get(_node_of(p))
        if not key or not group or node is None:
            continue
        value = (node["metadata"].get("labels") or {}).get(key, "<no label>")
        domains.setdefault((f"{meta['namespace']}/{group}", key), set()).add(value)
    return [
        f"pod group {group} must share one {key} domain, runs in {sorted(found)}"
        for (group, key), found in sorted(domains.items())
        if len(found) > 1
    ]


def _node_violations(name: str, node: dict[str, Any] | None, load: _NodeLoad) -> list[str]:
    out = []
    for d, shares in sorted(load.milli.items()):
        if sum(m for _, m in shares) > WHOLE:
            holders = sorted(shares)
            out.append(f"node {name}: GPU {d} booked {sum(m for _, m in shares)}m by {holders}")
    if node is None:
        return out
    alloc = (node.get("status") or {}).get("allocatable") or {}
    gpus = int(_amount(alloc.get(GPU, 0)))
    label = ((node["metadata"].get("labels") or {}).get(MEMORY_LABEL) or "").strip()
    device_memory = int(label) if label.isdigit() else 0
    if gpus:  # a node showing 0 GPUs (status not written yet) cannot be judged on its devices
        beyond = sorted(d for d in load.milli if d >= gpus)
        if beyond:
            out.append(f"node {name}: devices {beyond} booked but it has {gpus} GPUs")
        used = len(load.milli) + load.unannotated_gpus
        if used > gpus:
            out.append(f"node {name}: {used} GPUs booked of {gpus}")
        for d, mem in sorted(load.memory.items()):
            if device_memory and mem > device_memory:
                out.append(f"node {name}: GPU {d} memory booked {mem} MiB of {device_memory}")
    for k in SCALAR:
        if k in alloc and load.requested.get(k, 0.0) > _amount(alloc[k]):
            out.append(f"node {name}: {k} requested {load.requested[k]} > {alloc[k]}")
    if "pods" in alloc and len(load.pods) > int(_amount(alloc["pods"])):
        out.append(f"node {name}: {len(load.pods)} pods > {alloc['pods']}")
    return out


@contextlib.contextmanager
def repeating(call: Callable[[], object], interval: float, name: str) -> Iterator[None]:
    """Call ``call`` every ``interval`` seconds in a background thread ``name`` while the
    block runs."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval):
            call()

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)
