"""Fake GPU nodes: Node objects with status set through the status subresource.

A node is created in three requests, as a kubelet plus GPU feature discovery plus a node
lifecycle controller would leave it:

1. ``POST /api/v1/nodes`` with labels (hostname, node pool, GPU feature discovery) and taints
   (node pool, GPU model);
2. ``PATCH /api/v1/nodes/{name}/status`` with capacity, allocatable, addresses, node info and
   a ``Ready=True`` condition;
3. ``PATCH /api/v1/nodes/{name}`` resetting ``spec.taints`` to the wanted ones, which drops the
   ``node.kubernetes.io/not-ready:NoSchedule`` taint that the TaintNodesByCondition admission
   plugin adds on create (no node lifecycle controller runs to remove it).

Many nodes are created concurrently over one pooled connection set.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import zlib
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fairgpu.devcluster.client import ApiError, KubeClient

__all__ = [
    "GPU_MEMORY_MIB",
    "NOT_READY_TAINT_KEY",
    "POOLS",
    "NodeSpec",
    "create_nodes",
    "delete_nodes",
    "gpu_node_specs",
    "labels_of",
    "node_manifest",
    "node_status",
    "node_taints",
    "pool_label_key",
]

#: GPU memory in MiB per ``nvidia.com/gpu.product`` value, as GPU feature discovery reports.
GPU_MEMORY_MIB: dict[str, int] = {
    "NVIDIA-H100-80GB-HBM3": 81559,
    "NVIDIA-A100-SXM4-80GB": 81920,
    "NVIDIA-A100-SXM4-40GB": 40960,
    "Tesla-V100-SXM2-32GB": 32768,
    "NVIDIA-L4": 23034,
    "NVIDIA-A10": 23028,
    "Tesla-T4": 15360,
}
#: Node-pool values of ``<domain>/node.usage``.
POOLS = ("training", "inference", "hybrid")
#: Taint the TaintNodesByCondition admission plugin puts on every new Node.
NOT_READY_TAINT_KEY = "node.kubernetes.io/not-ready"

_ADDRESS_BASE = ipaddress.ip_network("198.18.0.0/15")  # benchmarking range, never routed here


@dataclass(slots=True)
class NodeSpec:
    """What a fake node looks like.

    Attributes:
        name: node name (also ``kubernetes.io/hostname``).
        pool: ``training``, ``inference``, ``hybrid`` or ``None`` for no pool label/taint.
        gpu_model: ``nvidia.com/gpu.product`` value, ``None`` for a CPU-only node.
        gpus: number of whole GPUs (``nvidia.com/gpu`` capacity).
        gpu_memory_mib: per-GPU memory; defaults from :data:`GPU_MEMORY_MIB`.
        cpu, memory, pods, ephemeral_storage: capacity quantities (allocatable is the same).
        driver_version: ``nvidia.com/gpu.driver-version`` label.
        labels: extra labels.
        taints: extra taints (``{"key", "value", "effect"}`` dicts).
        extra_resources: extra capacity, e.g. ``{"nvidia.com/gpumem": "655360"}``.
        images: ``status.images`` entries (``{"names": [...], "sizeBytes": n}``), the images
            the node's kubelet reports as pulled.
        unschedulable: ``spec.unschedulable`` (a cordoned node).
    """

    name: str
    pool: str | None = None
    gpu_model: str | None = None
    gpus: int = 0
    gpu_memory_mib: int | None = None
    cpu: str = "32"
    memory: str = "256Gi"
    pods: int = 110
    ephemeral_storage: str = "500Gi"
    driver_version: str = "550.54.15"
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    extra_resources: dict[str, str] = field(default_factory=dict)
    images: list[dict[str, Any]] = field(default_factory=list)
    unschedulable: bool = False


def gpu_node_specs(
    count: int,
    *,
    prefix: str = "gpu-node",
    pools: Sequence[str | None] = POOLS,
    models: Sequence[str] = ("NVIDIA-A100-SXM4-80GB",),
    gpus_per_node: int = 8,
    cpu: str = "96",
    memory: str = "1024Gi",
) -> list[NodeSpec]:
    """A deterministic list of ``count`` GPU nodes.

    Node ``i`` is named ``{prefix}-{i:05d}``, is in pool ``pools[i % len(pools)]`` and has GPU
    model ``models[(i // len(pools)) % len(models)]``, so every pool sees every model.
    """
    if not pools or not models:
        raise ValueError("pools and models must not be empty")
    return [
        NodeSpec(
            name=f"{prefix}-{i:05d}",
            pool=pools[i % len(pools)],
            gpu_model=models[(i // len(pools)) % len(models)],
            gpus=gpus_per_node,
            cpu=cpu,
            memory=memory,
        )
        for i in range(count)
    ]


def _usage_key(domain: str) -> str:
    return f"{domain}/node.usage"


def node_taints(spec: NodeSpec, *, domain: str = "example.com") -> list[dict[str, str]]:
    """The taints ``spec`` should end up with (never the not-ready one)."""
    taints: list[dict[str, str]] = []
    if spec.pool:
        taints.append({"key": _usage_key(domain), "value": spec.pool, "effect": "NoSchedule"})
    if spec.gpu_model and spec.gpus > 0:
        taints.append(
            {"key": "nvidia.com/gpu.product", "value": spec.gpu_model, "effect": "NoSchedule"}
        )
    taints.extend(dict(t) for t in spec.taints)
    return taints


def node_manifest(spec: NodeSpec, *, domain: str = "example.com") -> dict[str, Any]:
    """The Node object POSTed for ``spec`` (labels and taints, no status)."""
    labels = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }
    if spec.pool:
        labels[_usage_key(domain)] = spec.pool
    if spec.gpu_model and spec.gpus > 0:
        mem = spec.gpu_memory_mib or GPU_MEMORY_MIB.get(spec.gpu_model, 0)
        labels.update(
            {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": spec.gpu_model,
                "nvidia.com/gpu.count": str(spec.gpus),
                "nvidia.com/gpu.memory": str(mem),
                "nvidia.com/gpu.driver-version": spec.driver_version,
            }
        )
    labels.update(spec.labels)
    node_spec: dict[str, Any] = {"taints": node_taints(spec, domain=domain)}
    if spec.unschedulable:
        node_spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec.name, "labels": labels},
        "spec": node_spec,
    }


def _address(name: str) -> str:
    offset = zlib.crc32(name.encode()) % (_ADDRESS_BASE.num_addresses - 2) + 1
    return str(_ADDRESS_BASE.network_address + offset)


def node_status(spec: NodeSpec, *, now: _dt.datetime | None = None) -> dict[str, Any]:
    """The ``status`` written through the status subresource for ``spec``."""
    ts = (now or _dt.datetime.now(_dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    capacity = {
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": str(spec.pods),
        "ephemeral-storage": spec.ephemeral_storage,
    }
    if spec.gpus > 0:
        capacity["nvidia.com/gpu"] = str(spec.gpus)
    capacity.update(spec.extra_resources)

    def cond(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": ts,
            "lastTransitionTime": ts,
        }

    return {
        "capacity": capacity,
        "allocatable": dict(capacity),
        "images": list(spec.images),
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "fake node"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "fake node"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "fake node"),
            cond("Ready", "True", "KubeletReady", "fake kubelet is posting ready status"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": _address(spec.name)},
            {"type": "Hostname", "address": spec.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": f"{zlib.crc32(spec.name.encode()):032x}",
            "systemUUID": f"{zlib.crc32(spec.name.encode()):032x}",
            "bootID": "fairgpu-fake",
            "kernelVersion": "6.1.0",
            "osImage": "fairgpu fake node",
            "containerRuntimeVersion": "fake://1.0",
            "kubeletVersion": "v1.34.10",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "phase": "Running",
    }


def _create_one(client: KubeClient, spec: NodeSpec, domain: str, status_in_create: bool) -> str:
    manifest = node_manifest(spec, domain=domain)
    taints = manifest["spec"]["taints"]
    if status_in_create:
        manifest["status"] = node_status(spec)
    resp = client.request("POST", "/api/v1/nodes", manifest)
    if not resp.ok and resp.status != 409:
        raise ApiError("POST", "/api/v1/nodes", resp)
    path = f"/api/v1/nodes/{spec.name}"
    if not status_in_create or resp.status == 409:
        client.patch(f"{path}/status", {"status": node_status(spec)})
    # Merge patch replaces the whole list: this drops the admission-added not-ready taint.
    client.patch(path, {"spec": {"taints": taints or None}})
    return spec.name


def create_nodes(
    client: KubeClient,
    specs: Iterable[NodeSpec],
    *,
    domain: str = "example.com",
    workers: int = 16,
    status_in_create: bool = False,
) -> list[str]:
    """Create (or converge existing) nodes for ``specs`` concurrently; return their names.

    Args:
        client: API client; its pool should hold at least ``workers`` connections.
        specs: nodes to create.
        domain: prefix of the node-pool label and taint key ``<domain>/node.usage``.
        workers: concurrent requests.
        status_in_create: send the status with the POST (kube-apiserver keeps a new Node's
            status) instead of a separate status-subresource PATCH: two requests per node
            instead of three, for very large clusters. Existing nodes still get the PATCH.

    Raises:
        ApiError: the first failure, after all submitted work has finished.
    """
    specs = list(specs)
    if not specs:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(specs)))) as pool:
        futures = [pool.submit(_create_one, client, s, domain, status_in_create) for s in specs]
        return [f.result() for f in futures]


def delete_nodes(client: KubeClient, names: Iterable[str], *, workers: int = 16) -> None:
    """Delete the named nodes concurrently; missing ones are ignored."""

    def one(name: str) -> None:
        resp = client.request("DELETE", f"/api/v1/nodes/{name}")
        if not resp.ok and resp.status != 404:
            raise ApiError("DELETE", f"/api/v1/nodes/{name}", resp)

    names = list(names)
    if not names:
        return
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(names)))) as pool:
        for f in [pool.submit(one, n) for n in names]:
            f.result()


def pool_label_key(domain: str = "example.com") -> str:
    """``<domain>/node.usage``: the node-pool label and taint key."""
    return _usage_key(domain)


def labels_of(spec: NodeSpec, domain: str = "example.com") -> Mapping[str, str]:
    """The labels :func:`create_nodes` puts on ``spec``'s node."""
    return node_manifest(spec, domain=domain)["metadata"]["labels"]
