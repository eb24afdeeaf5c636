"""Fixtures for the live scheduler against a real etcd + kube-apiserver on loopback.

The control plane, the fake nodes and the fake kubelet are shared by the session; every test
gets a fresh namespace whose pods are deleted afterwards, and starts its own scheduler (in a
thread, or as a subprocess for the crash and leader-election tests). Without the binaries
from ``tools/kube/build-control-plane.sh`` every test here is skipped.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_helpers import (
    DOMAIN,
    control_plane,
    delete_pods,
    install_podgroup_crd,
    live_node_specs,
)

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


@pytest.fixture(scope="session")
def live_bin_dir() -> Path:
    """Directory with kube-apiserver, kube-scheduler and etcd, or skip."""
    found = find_binaries()
    if found is None:
        pytest.skip(
            "Kubernetes control-plane binaries not found (looked in $FAIRGPU_KUBE_BIN or "
            f"{default_cache_dir()}); build them with tools/kube/build-control-plane.sh"
        )
    return found


@pytest.fixture(scope="session")
def live_cp(live_bin_dir: Path) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver for the live tests, with the fairgpu-system namespace."""
    with control_plane(live_bin_dir) as cp:
        yield cp


@pytest.fixture(scope="session")
def admin(live_cp: ControlPlane) -> Iterator[KubeClient]:
    """Raw admin client."""
    client = live_cp.client(maxsize=32)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def live_nodes(admin: KubeClient) -> list[NodeSpec]:
    """Seven nodes: an A100 and a T4 node (8 GPUs each) per pool, one CPU-only hybrid node."""
    specs = live_node_specs()
    create_nodes(admin, specs, domain=DOMAIN)
    return specs


@pytest.fixture(scope="session")
def kubelet(live_cp: ControlPlane, live_nodes: list[NodeSpec]) -> Iterator[FakeKubelet]:
    """A fake kubelet: bound pods go Running, evicted pods are removed."""
    client = live_cp.client(maxsize=8)
    k = FakeKubelet(client, workers=4).start()
    assert k.wait_synced(30)
    try:
        yield k
    finally:
        k.stop()
        client.close()


@pytest.fixture
def ns(live_cp: ControlPlane, admin: KubeClient, kubelet: FakeKubelet) -> Iterator[str]:
    """A fresh namespace (its pods are deleted at the end, freeing the nodes)."""
    name = f"lv-{uuid.uuid4().hex[:8]}"
    ensure_namespace(admin, name, ca_pem=Path(live_cp.ca_file).read_text())
    try:
        yield name
    finally:
        delete_pods(admin, name)


@pytest.fixture(autouse=True)
def no_published_settings(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test on the shared control plane starts and ends without published scheduler
    settings (:mod:`fairgpu.kube.published_settings`): they outlive their scheduler, and a
    command in one test must not answer with another test's scheduler's settings."""
    if "live_cp" not in request.fixturenames:
        yield
        return
    admin: KubeClient = request.getfixturevalue("admin")
    path = "/api/v1/namespaces/fairgpu-system/configmaps"
    ours = {"labelSelector": "app.kubernetes.io/name=fairgpu"}
    admin.request("DELETE", path, params=ours)
    yield
    admin.request("DELETE", path, params=ours)


@pytest.fixture(scope="session")
def podgroup_crd(admin: KubeClient) -> Iterator[None]:
    """The coscheduling PodGroup CRD (scheduling.x-k8s.io/v1alpha1)."""
    install_podgroup_crd(admin, "scheduling.x-k8s.io", "v1alpha1")
    yield
