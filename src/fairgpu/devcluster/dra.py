"""NVIDIA-shaped Dynamic Resource Allocation objects on a dev cluster.

What NVIDIA's DRA driver would publish for each node (see
:mod:`fairgpu.sim.workloads.nvidia_dra`: GPUs, and with ``mig=True`` every MIG placement as a
device consuming its GPU's shared counters), created through the API so that the live
scheduler, kube-scheduler and kube-controller-manager see the same objects a real cluster
would show.

Counter sets and ``consumesCounters`` (partitionable devices, KEP-4815) are alpha in
Kubernetes 1.34: kube-apiserver drops those fields unless :data:`DRA_FEATURE_GATES` is on, so
pass it to the API server (``ControlPlane(extra_apiserver_args=[...])``) and to
kube-scheduler or kube-controller-manager when they run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fairgpu.devcluster.client import ApiError, KubeClient, Response
from fairgpu.sim.workloads.nvidia_dra import nvidia_device_classes, nvidia_slice

__all__ = ["DRA_API", "DRA_FEATURE_GATES", "apiserver_args", "publish_nvidia_dra"]

#: resource.k8s.io/v1 (GA and served by default in 1.34).
DRA_API = "/apis/resource.k8s.io/v1"
#: Feature gates the MIG (counter set) devices need in 1.34.
DRA_FEATURE_GATES = "DRAPartitionableDevices=true"


def apiserver_args() -> list[str]:
    """kube-apiserver arguments for DRA with partitionable (MIG) devices."""
    return [f"--feature-gates={DRA_FEATURE_GATES}"]


def publish_nvidia_dra(
    client: KubeClient, nodes: Iterable[str], gpus: int = 8, mig: bool = True
) -> list[dict[str, Any]]:
    """Create NVIDIA's two DeviceClasses (if missing) and one ResourceSlice per node; returns
    the slices as the API server stored them.

    Raises :class:`ApiError` when the server drops the counter fields (the feature gate is
    off), since MIG devices without counters would all look independent.
    """
    for cls in nvidia_device_classes():
        try:
            client.post(f"{DRA_API}/deviceclasses", cls)
        except ApiError as error:
            if error.status != 409:
                raise
    stored = []
    for node in nodes:
        body = nvidia_slice(node, gpus=gpus, mig=mig)
        got = client.post(f"{DRA_API}/resourceslices", body)
        if mig and not got["spec"].get("sharedCounters"):
            raise ApiError("POST", f"{DRA_API}/resourceslices", _dropped(got))
        stored.append(got)
    return stored


def _dropped(got: dict[str, Any]) -> Response:
    message = (
        f"ResourceSlice {got['metadata']['name']}: sharedCounters dropped by the API server; "
        f"start kube-apiserver with --feature-gates={DRA_FEATURE_GATES}"
    )
    return Response(422, {"message": message})
