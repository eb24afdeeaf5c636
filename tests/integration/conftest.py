"""Fixtures for tests against a real etcd + kube-apiserver on loopback.

Binaries come from ``tools/kube/build-control-plane.sh`` (cache directory
``${FAIRGPU_KUBE_CACHE:-~/.cache/fairgpu/kube}/v<version>``); ``FAIRGPU_KUBE_BIN`` points at
another directory. Without them every test using these fixtures is skipped.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairgpu.devcluster import (
    ControlPlane,
    FakeKubelet,
    KubeClient,
    NodeSpec,
    create_nodes,
    default_cache_dir,
    ensure_namespace,
    find_binaries,
)

#: Node-pool domain used by the integration fixtures.
DOMAIN = "example.com"


@pytest.fixture(scope="session")
def node_domain() -> str:
    """Domain of the node-pool label and taint key (``<domain>/node.usage``)."""
    return DOMAIN


@pytest.fixture(scope="session")
def kube_bin_dir() -> Path:
    """Directory with kube-apiserver, kube-scheduler and etcd, or skip."""
    found = find_binaries()
    if found is None:
        where = os.environ.get("FAIRGPU_KUBE_BIN") or f"{default_cache_dir()}/v*"
        pytest.skip(
            f"Kubernetes control-plane binaries (kube-apiserver, etcd) not found in {where}; "
            "build them with tools/kube/build-control-plane.sh"
        )
    return found


@pytest.fixture(scope="session")
def control_plane(kube_bin_dir: Path) -> Iterator[ControlPlane]:
    """A running etcd + kube-apiserver shared by the whole session."""
    cp = ControlPlane(kube_bin_dir)
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def kube_client(control_plane: ControlPlane) -> Iterator[KubeClient]:
    """Raw admin client (``system:masters``) for the session control plane."""
    client = control_plane.client(maxsize=32)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def namespace(control_plane: ControlPlane, kube_client: KubeClient) -> str:
    """A fresh namespace with its ``default`` ServiceAccount and ``kube-root-ca.crt``."""
    name = f"it-{uuid.uuid4().hex[:10]}"
    ensure_namespace(kube_client, name, ca_pem=Path(control_plane.ca_file).read_text())
    return name


def _fixture_node_specs() -> list[NodeSpec]:
    specs: list[NodeSpec] = []
    for pool in ("training", "inference", "hybrid"):
        for model in ("NVIDIA-A100-SXM4-80GB", "Tesla-T4"):
            short = "a100" if "A100" in model else "t4"
            specs.append(
                NodeSpec(name=f"it-{pool}-{short}", pool=pool, gpu_model=model, gpus=8, cpu="64")
            )
    specs.append(NodeSpec(name="it-cpu-0", pool="hybrid", cpu="32", memory="128Gi"))
    return specs


@pytest.fixture(scope="session")
def fake_nodes(kube_client: KubeClient) -> list[NodeSpec]:
    """Seven fake nodes: an A100 and a T4 node per pool, plus one CPU-only hybrid node."""
    specs = _fixture_node_specs()
    create_nodes(kube_client, specs, domain=DOMAIN)
    return specs


@pytest.fixture(scope="session")
def fake_kubelet(control_plane: ControlPlane) -> Iterator[FakeKubelet]:
    """A fake kubelet for every node of the session control plane."""
    client = control_plane.client(maxsize=8)
    kubelet = FakeKubelet(client, workers=4)
    kubelet.start()
    assert kubelet.wait_synced(30), "fake kubelet did not finish its first list"
    try:
        yield kubelet
    finally:
        kubelet.stop()
        client.close()
