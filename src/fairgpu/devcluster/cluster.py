"""A whole dev cluster: control plane, fake GPU nodes, namespaces and a fake kubelet."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from fairgpu.devcluster.client import KubeClient
from fairgpu.devcluster.controller_manager import RESOURCECLAIM_CONTROLLER, WORKLOAD_CONTROLLERS
from fairgpu.devcluster.controlplane import ControlPlane
from fairgpu.devcluster.dra import DRA_FEATURE_GATES, publish_nvidia_dra
from fairgpu.devcluster.dra import apiserver_args as dra_apiserver_args
from fairgpu.devcluster.kubelet import FakeKubelet
from fairgpu.devcluster.namespaces import ensure_namespace
from fairgpu.devcluster.nodes import POOLS, NodeSpec, create_nodes, gpu_node_specs

__all__ = ["DevCluster", "up"]

#: The namespace `fairgpu run` uses by default for its Lease and published settings.
SYSTEM_NAMESPACE = "fairgpu-system"


class DevCluster:
    """Control plane plus fake nodes, namespaces and (optionally) kubelet and kube-scheduler.

    Args:
        nodes: a node count (GPU nodes spread over the three pools, see
            :func:`~fairgpu.devcluster.nodes.gpu_node_specs`) or explicit node specs.
        bin_dir: binaries directory; ``None`` searches ``$FAIRGPU_KUBE_BIN`` and the cache.
        domain: node-pool label/taint domain (``<domain>/node.usage``).
        gpu_models: GPU models cycled over generated nodes.
        gpus_per_node: GPUs per generated node.
        namespaces: namespaces created with their ``default`` ServiceAccount.
        kubelet: run the fake kubelet for all nodes.
        kube_scheduler: also run the real kube-scheduler (default profile).
        controllers: run kube-controller-manager's workload controllers (Jobs, Deployments,
            ReplicaSets, PodDisruptionBudgets, garbage collection:
            :data:`~fairgpu.devcluster.controller_manager.WORKLOAD_CONTROLLERS`), so what a
            user applies makes pods as on a real cluster.
        dra: Dynamic Resource Allocation as NVIDIA's DRA driver would set it up: the API
            server (and kube-scheduler) with partitionable devices, NVIDIA-shaped
            ResourceSlices with the GPUs of every GPU node and their MIG placements, and
            kube-controller-manager's resourceclaim controller (see
            :mod:`fairgpu.devcluster.dra`).
        workdir: control-plane work directory (temporary by default).
        keep_workdir: keep the work directory after stopping.
    """

    def __init__(
        self,
        nodes: int | Sequence[NodeSpec] = 8,
        *,
        bin_dir: str | os.PathLike[str] | None = None,
        domain: str = "example.com",
        gpu_models: Sequence[str] = ("NVIDIA-A100-SXM4-80GB",),
        gpus_per_node: int = 8,
        namespaces: Sequence[str] = ("default",),
        kubelet: bool = True,
        kube_scheduler: bool = False,
        workdir: str | os.PathLike[str] | None = None,
        keep_workdir: bool = False,
        dra: bool = False,
        controllers: bool = False,
    ) -> None:
        if isinstance(nodes, int):
            self.node_specs = gpu_node_specs(
                nodes, pools=POOLS, models=gpu_models, gpus_per_node=gpus_per_node
            )
        else:
            self.node_specs = list(nodes)
        self.domain = domain
        self.namespaces = list(namespaces)
        self.with_kubelet = kubelet
        self.with_scheduler = kube_scheduler
        self.with_dra = dra
        self.with_controllers = controllers
        self.control_plane = ControlPlane(
            bin_dir,
            workdir=workdir,
            keep_workdir=keep_workdir,
            extra_apiserver_args=dra_apiserver_args() if dra else (),
        )
        self.client: KubeClient | None = None
        self.kubelet: FakeKubelet | None = None

    def start(self) -> DevCluster:
        """Start everything; return ``self``."""
        cp = self.control_plane
        cp.start()
        try:
            self.client = cp.client(maxsize=32)
            ca_pem = Path(cp.ca_file).read_text()
            # fairgpu-system: where `fairgpu run` keeps its Lease and publishes its settings,
            # as deploy/ creates it on a real cluster.
            for ns in dict.fromkeys([*self.namespaces, SYSTEM_NAMESPACE]):
                ensure_namespace(self.client, ns, ca_pem=ca_pem)
            create_nodes(self.client, self.node_specs, domain=self.domain)
            if self.with_kubelet:
                self.kubelet = FakeKubelet(cp.client(maxsize=8)).start()
                self.kubelet.wait_synced()
            if self.with_dra:
                gpu_nodes = [n for n in self.node_specs if n.gpus > 0]
                for count in sorted({n.gpus for n in gpu_nodes}):
                    names = [n.name for n in gpu_nodes if n.gpus == count]
                    publish_nvidia_dra(self.client, names, gpus=count, mig=True)
            controllers = list(WORKLOAD_CONTROLLERS) if self.with_controllers else []
            if self.with_dra:
                controllers.append(RESOURCECLAIM_CONTROLLER)
            if controllers:
                features = DRA_FEATURE_GATES if self.with_dra else ""
                cp.start_controller_manager(controllers, feature_gates=features)
            if self.with_scheduler:
                gates = [f"--feature-gates={DRA_FEATURE_GATES}"] if self.with_dra else []
                cp.start_scheduler(extra_args=gates)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the kubelet and the control plane."""
        if self.kubelet is not None:
            self.kubelet.stop()
            self.kubelet.client.close()
            self.kubelet = None
        if self.client is not None:
            self.client.close()
            self.client = None
        self.control_plane.stop()

    def __enter__(self) -> DevCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def up(
    nodes: int = 8,
    *,
    bin_dir: str | os.PathLike[str] | None = None,
    domain: str = "example.com",
    gpu_models: Sequence[str] = ("NVIDIA-A100-SXM4-80GB",),
    gpus_per_node: int = 8,
    namespaces: Sequence[str] = ("default",),
    kubelet: bool = True,
    kube_scheduler: bool = False,
    controllers: bool = True,
    kubeconfig_out: str | os.PathLike[str] | None = None,
    workdir: str | os.PathLike[str] | None = None,
    echo: Callable[[str], None] = print,
    ready: threading.Event | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Start a dev cluster, print how to reach it, and block until Ctrl-C or SIGTERM.

    Args:
        nodes: number of fake GPU nodes (spread over the training/inference/hybrid pools).
        bin_dir: binaries directory; ``None`` searches ``$FAIRGPU_KUBE_BIN`` and the cache.
        domain: node-pool label/taint domain.
        gpu_models: GPU models cycled over the nodes.
        gpus_per_node: GPUs per node.
        namespaces: namespaces to create with their ``default`` ServiceAccount.
        kubelet: run the fake kubelet.
        kube_scheduler: also run the stock kube-scheduler.
        controllers: run the workload controllers (Jobs, Deployments, ...; see
            :class:`DevCluster`).
        kubeconfig_out: also copy the kubeconfig to this path (it is removed on exit).
        workdir: keep certificates, etcd data and logs here instead of a temporary directory
            (kept after exit).
        echo: where progress lines go.
        ready: set once the cluster is up (for callers running ``up`` in a thread).
        stop: when set, ``up`` returns (besides Ctrl-C / SIGTERM).
    """
    stop_event = stop or threading.Event()
    previous: object = None
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:

        def on_term(signum: int, frame: FrameType | None) -> None:
            stop_event.set()

        previous = signal.signal(signal.SIGTERM, on_term)

    t0 = time.monotonic()
    cluster = DevCluster(
        nodes,
        bin_dir=bin_dir,
        domain=domain,
        gpu_models=gpu_models,
        gpus_per_node=gpus_per_node,
        namespaces=namespaces,
        kubelet=kubelet,
        kube_scheduler=kube_scheduler,
        controllers=controllers,
        workdir=workdir,
        keep_workdir=workdir is not None,
    )
    copied: Path | None = None
    try:
        cluster.start()
        cp = cluster.control_plane
        kubeconfig = cp.kubeconfig_path
        if kubeconfig_out is not None:
            copied = Path(kubeconfig_out)
            shutil.copyfile(kubeconfig, copied)
            copied.chmod(0o600)
            kubeconfig = copied
        echo(f"dev cluster up in {time.monotonic() - t0:.1f}s: {cp.url}")
        echo(f"  nodes: {len(cluster.node_specs)}  namespaces: {', '.join(namespaces)}")
        echo(f"  logs: {cp.log_dir}")
        echo(f"  export KUBECONFIG={kubeconfig}")
        echo("Press Ctrl-C to stop.")
        if ready is not None:
            ready.set()
        try:
            while not stop_event.wait(0.5):
                if not cp.running:
                    echo("control plane exited; see the logs above")
                    break
        except KeyboardInterrupt:
            pass
    finally:
        echo("stopping dev cluster")
        cluster.stop()
        if copied is not None:
            copied.unlink(missing_ok=True)
        if in_main:
            signal.signal(signal.SIGTERM, previous)  # type: ignore[arg-type]
