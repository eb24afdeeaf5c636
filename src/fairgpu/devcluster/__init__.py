"""A local Kubernetes control plane with fake GPU nodes, for integration tests and demos.

Real ``etcd`` and ``kube-apiserver`` (and optionally ``kube-scheduler``) built by
``tools/kube/build-control-plane.sh`` run on loopback; nodes are Node objects whose status is
written through the status subresource; a fake kubelet moves bound pods to Running and, per
their ``fairgpu.io/duration-seconds`` annotation, to Succeeded.

Typical use::

    from fairgpu import devcluster

    with devcluster.ControlPlane() as cp:
        client = cp.client()
        devcluster.ensure_namespace(client, "team-a")
        devcluster.create_nodes(client, devcluster.gpu_node_specs(100))
        with devcluster.FakeKubelet(cp.client()):
            ...

or ``devcluster.up(nodes=50)`` to run one until Ctrl-C.
"""

from __future__ import annotations

from fairgpu.devcluster.client import ApiError, KubeClient, Response, WatchStream
from fairgpu.devcluster.cluster import DevCluster, up
from fairgpu.devcluster.controlplane import (
    BINARIES,
    K8S_VERSION,
    ControlPlane,
    ControlPlaneError,
    default_cache_dir,
    find_binaries,
)
from fairgpu.devcluster.kubelet import DURATION_ANNOTATION, FakeKubelet
from fairgpu.devcluster.namespaces import ensure_namespace
from fairgpu.devcluster.nodes import (
    GPU_MEMORY_MIB,
    POOLS,
    NodeSpec,
    create_nodes,
    delete_nodes,
    gpu_node_specs,
)

__all__ = [
    "BINARIES",
    "DURATION_ANNOTATION",
    "GPU_MEMORY_MIB",
    "K8S_VERSION",
    "POOLS",
    "ApiError",
    "ControlPlane",
    "ControlPlaneError",
    "DevCluster",
    "FakeKubelet",
    "KubeClient",
    "NodeSpec",
    "Response",
    "WatchStream",
    "create_nodes",
    "default_cache_dir",
    "delete_nodes",
    "ensure_namespace",
    "find_binaries",
    "gpu_node_specs",
    "up",
]
