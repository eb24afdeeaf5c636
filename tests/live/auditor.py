"""An auditor of the API server's own state: no GPU, node or pod slot is ever booked twice.

It reads only what the API server holds (all Nodes, and all Pods of every namespace, those
being deleted included: a terminating pod keeps its node's resources until it is gone), never
the scheduler's cache, and reports every violation as a sentence naming the node and pods:

* per node, the ``fairgpu.io/gpu-devices`` annotations of its pods add up to at most one whole
  device (1000 milli-GPU, and the device's memory when the share names memory) on every device,
  and name only devices the node has;
* per node, the devices so booked plus the whole GPUs of pods without the annotation (bound by
  another scheduler) are at most the node's ``nvidia.com/gpu``;
* per node, the pods' effective CPU, memory and ephemeral-storage requests (sidecars and init
  containers counted as kube-scheduler counts them, plus overhead) and their number are at most
  its allocatable;
* across calls of :meth:`Auditor.check`, no pod (by uid) moves to another node or changes the
  devices it was bound with: a pod is bound once.

Pods bound to a node that does not exist (deleted, not re-created yet) are still checked for
device overlap among themselves. Call :meth:`Auditor.check` after every event of interest, or
run :meth:`Auditor.running` in the background while a test acts.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fairgpu.api.quantity import parse_quantity
from fairgpu.devcluster import KubeClient
from fairgpu.model.gpu import ANN_GPU_DEVICES, WHOLE, decode_gpu_devices

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


def effective_requests(pod: dict[str, Any]) -> dict[str, float]:
    """A pod's requests as kube-scheduler counts them: app containers plus sidecars (init
    containers with ``restartPolicy: Always``), at least each plain init container on top of the
    sidecars started before it, plus ``spec.overhead``."""
    spec = pod.get("spec") or {}
    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        for k, v in _requests(c).items():
            total[k] = total.get(k, 0.0) + v
    sidecars: dict[str, float] = {}
    floor: dict[str, float] = {}
    for c in spec.get("initContainers") or []:
        req = _requests(c)
        if c.get("restartPolicy") == "Always":
            for k, v in req.items():
                sidecars[k] = sidecars.get(k, 0.0) + v
            req = {}
        for k in set(req) | set(sidecars):
            floor[k] = max(floor.get(k, 0.0), sidecars.get(k, 0.0) + req.get(k, 0.0))
    for k, v in sidecars.items():
        total[k] = total.get(k, 0.0) + v
    for k, v in floor.items():
        total[k] = max(total.get(k, 0.0), v)
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


class Auditor:
    """Checks invariants of the API server's state; remembers each pod's node and devices.

    Args:
        client: an API client that may list all pods and nodes.
    """

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.bound: dict[str, tuple[str, str, str]] = {}  # uid -> (pod, node, annotation)
        self.violations: list[str] = []
        self.checks = 0

    def check(self) -> list[str]:
        """Audit the current state once; returns the violations found now (also appended to
        :attr:`violations`)."""
        nodes = {n["metadata"]["name"]: n for n in self.client.get("/api/v1/nodes")["items"]}
        pods = self.client.get("/api/v1/pods")["items"]
        found: list[str] = []
        loads: dict[str, _NodeLoad] = {}
        for p in pods:
            node = (p.get("spec") or {}).get("nodeName")
            if not node or (p.get("status") or {}).get("phase") in TERMINAL:
                continue
            found.extend(self._once(p, node))
            self._add(loads.setdefault(node, _NodeLoad()), p, found)
        for name, load in sorted(loads.items()):
            found.extend(_node_violations(name, nodes.get(name), load))
        self.checks += 1
        self.violations.extend(found)
        return found

    def _once(self, p: dict[str, Any], node: str) -> list[str]:
        meta = p["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        ann = (meta.get("annotations") or {}).get(ANN_GPU_DEVICES, "")
        before = self.bound.setdefault(meta["uid"], (key, node, ann))
        if before[1:] != (node, ann):
            return [f"pod {key} was bound to {before[1]} [{before[2]}], now {node} [{ann}]"]
        return []

    @staticmethod
    def _add(load: _NodeLoad, p: dict[str, Any], found: list[str]) -> None:
        meta = p["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        load.pods.append(key)
        req = effective_requests(p)
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
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(interval):
                self.check()

        thread = threading.Thread(target=loop, name="auditor", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(10)
            self.check()


def _node_violations(name: str, node: dict[str, Any] | None, load: _NodeLoad) -> list[str]:
    out = []
    for d, shares in sorted(load.milli.items()):
        if sum(m for _, m in shares) > WHOLE:
            out.append(f"node {name}: GPU {d} booked {sum(m for _, m in shares)}m by {shares}")
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
