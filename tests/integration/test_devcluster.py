"""The dev cluster itself: control plane, fake nodes, namespaces, fake kubelet, restarts."""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import pytest
import yaml

from fairgpu.devcluster import (
    DURATION_ANNOTATION,
    K8S_VERSION,
    ControlPlane,
    FakeKubelet,
    KubeClient,
    NodeSpec,
    create_nodes,
    delete_nodes,
    ensure_namespace,
    gpu_node_specs,
)
from fairgpu.devcluster.nodes import NOT_READY_TAINT_KEY
from tests.polling import wait_for

pytestmark = pytest.mark.integration


def pod_manifest(
    name: str,
    *,
    duration: float | None = None,
    scheduler: str = "fairgpu",
    tolerate_all: bool = True,
) -> dict[str, Any]:
    annotations = {DURATION_ANNOTATION: str(duration)} if duration is not None else {}
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/fake:1",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            }
        ],
    }
    if tolerate_all:
        spec["tolerations"] = [{"operator": "Exists"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": spec,
    }


def create_pod(client: KubeClient, ns: str, manifest: dict[str, Any]) -> dict[str, Any]:
    return client.post(f"/api/v1/namespaces/{ns}/pods", manifest)


def bind(client: KubeClient, ns: str, pod: dict[str, Any], node: str) -> int:
    """Raw ``pods/{name}/binding`` call; returns the HTTP status."""
    meta = pod["metadata"]
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": meta["name"], "namespace": ns, "uid": meta["uid"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    resp = client.request("POST", f"/api/v1/namespaces/{ns}/pods/{meta['name']}/binding", body)
    return resp.status


def get_pod(client: KubeClient, ns: str, name: str) -> dict[str, Any]:
    return client.get(f"/api/v1/namespaces/{ns}/pods/{name}")


def phase_of(client: KubeClient, ns: str, name: str) -> str:
    return get_pod(client, ns, name).get("status", {}).get("phase", "")


def conditions(pod: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}


# --- control plane ---------------------------------------------------------------------------


def test_apiserver_ready(control_plane: ControlPlane, kube_client: KubeClient) -> None:
    resp = kube_client.request("GET", "/readyz")
    assert resp.status == 200
    assert resp.body == "ok"
    version = kube_client.get("/version")
    assert version["gitVersion"] == f"v{K8S_VERSION}"
    assert control_plane.url.startswith("https://127.0.0.1:")

    kubeconfig = yaml.safe_load(control_plane.kubeconfig_path.read_text())
    assert kubeconfig["clusters"][0]["cluster"]["server"] == control_plane.url
    assert kubeconfig["users"][0]["user"]["token"] == control_plane.token

    # The token user is in system:masters, and RBAC is on.
    review = kube_client.post(
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": "create", "resource": "nodes"}},
        },
    )
    assert review["status"]["allowed"] is True
    assert kube_client.get("/apis/rbac.authorization.k8s.io/v1/clusterroles/cluster-admin")


def test_official_client_reads_kubeconfig(control_plane: ControlPlane) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    api_client = kubernetes.config.new_client_from_config(str(control_plane.kubeconfig_path))
    try:
        names = {
            n.metadata.name for n in kubernetes.client.CoreV1Api(api_client).list_namespace().items
        }
    finally:
        api_client.close()
    assert {"default", "kube-system"} <= names


# --- nodes -----------------------------------------------------------------------------------


def test_nodes_have_status_labels_and_taints(
    kube_client: KubeClient, fake_nodes: list[NodeSpec], node_domain: str
) -> None:
    for spec in fake_nodes:
        node = kube_client.get(f"/api/v1/nodes/{spec.name}")
        labels = node["metadata"]["labels"]
        taints = {(t["key"], t.get("value"), t["effect"]) for t in node["spec"].get("taints", [])}
        status = node["status"]

        assert labels[f"{node_domain}/node.usage"] == spec.pool
        assert (f"{node_domain}/node.usage", spec.pool, "NoSchedule") in taints
        assert not any(t[0] == NOT_READY_TAINT_KEY for t in taints), taints
        assert conditions(node)["Ready"] == "True"
        assert status["allocatable"]["cpu"] == spec.cpu
        assert status["allocatable"]["pods"] == "110"
        if spec.gpu_model:
            assert labels["nvidia.com/gpu.product"] == spec.gpu_model
            assert labels["nvidia.com/gpu.count"] == "8"
            assert int(labels["nvidia.com/gpu.memory"]) > 10_000
            assert ("nvidia.com/gpu.product", spec.gpu_model, "NoSchedule") in taints
            assert status["capacity"]["nvidia.com/gpu"] == "8"
            assert status["allocatable"]["nvidia.com/gpu"] == "8"
        else:
            assert "nvidia.com/gpu.product" not in labels
            assert "nvidia.com/gpu" not in status["allocatable"]


def test_create_many_nodes_fast(kube_client: KubeClient, node_domain: str) -> None:
    count = int(os.environ.get("FAIRGPU_IT_NODE_COUNT", "500"))
    prefix = f"bulk-{uuid.uuid4().hex[:6]}"
    specs = gpu_node_specs(count, prefix=prefix, models=("NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"))
    t0 = time.perf_counter()
    names = create_nodes(kube_client, specs, domain=node_domain, workers=16)
    elapsed = time.perf_counter() - t0
    try:
        print(f"created {count} nodes in {elapsed:.2f}s ({count / elapsed:.0f} nodes/s)")
        assert len(names) == count
        listing = kube_client.get(
            "/api/v1/nodes", params={"labelSelector": f"{node_domain}/node.usage"}
        )
        mine = [n for n in listing["items"] if n["metadata"]["name"].startswith(prefix)]
        assert len(mine) == count
        assert all(
            not any(t["key"] == NOT_READY_TAINT_KEY for t in n["spec"].get("taints", []))
            and conditions(n).get("Ready") == "True"
            for n in mine
        )
        assert elapsed < max(60.0, count / 20), f"{count} nodes took {elapsed:.1f}s"
    finally:
        delete_nodes(kube_client, names or [s.name for s in specs])


# --- namespaces and pods ---------------------------------------------------------------------


def test_pod_needs_default_service_account(kube_client: KubeClient, namespace: str) -> None:
    pod = create_pod(kube_client, namespace, pod_manifest("hello"))
    assert pod["spec"]["serviceAccountName"] == "default"
    assert pod["status"]["phase"] == "Pending"

    # A namespace created without ensure_namespace has no default ServiceAccount: refused.
    bare = f"bare-{uuid.uuid4().hex[:8]}"
    kube_client.post(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": bare}}
    )
    resp = kube_client.request("POST", f"/api/v1/namespaces/{bare}/pods", pod_manifest("hello"))
    assert resp.status == 403, resp.body
    assert "serviceaccount" in str(resp.body).lower()
    ensure_namespace(kube_client, bare)  # idempotent, and fixes it
    assert kube_client.request("POST", f"/api/v1/namespaces/{bare}/pods", pod_manifest("hello")).ok


def test_bound_pod_runs_then_succeeds(
    kube_client: KubeClient,
    namespace: str,
    fake_nodes: list[NodeSpec],
    fake_kubelet: FakeKubelet,
) -> None:
    pod = create_pod(kube_client, namespace, pod_manifest("job-0", duration=1.5))
    assert bind(kube_client, namespace, pod, fake_nodes[0].name) == 201

    wait_for(lambda: phase_of(kube_client, namespace, "job-0") == "Running")
    running = get_pod(kube_client, namespace, "job-0")
    assert running["spec"]["nodeName"] == fake_nodes[0].name
    assert running["status"]["startTime"]
    cond = conditions(running)
    assert cond["PodScheduled"] == "True"
    assert cond["Ready"] == "True"
    assert running["status"]["containerStatuses"][0]["state"]["running"]

    t_running = time.monotonic()
    wait_for(lambda: phase_of(kube_client, namespace, "job-0") == "Succeeded", timeout=20)
    assert time.monotonic() - t_running > 0.3  # it ran for a while, not at once
    done = get_pod(kube_client, namespace, "job-0")
    state = done["status"]["containerStatuses"][0]["state"]
    assert state["terminated"]["exitCode"] == 0
    assert "running" not in state
    assert conditions(done)["Ready"] == "False"


def test_pod_without_duration_keeps_running_and_unbound_stays_pending(
    kube_client: KubeClient,
    namespace: str,
    fake_nodes: list[NodeSpec],
    fake_kubelet: FakeKubelet,
) -> None:
    forever = create_pod(kube_client, namespace, pod_manifest("service-0"))
    create_pod(kube_client, namespace, pod_manifest("unbound-0", duration=0))
    assert bind(kube_client, namespace, forever, fake_nodes[1].name) == 201
    wait_for(lambda: phase_of(kube_client, namespace, "service-0") == "Running")
    time.sleep(1.0)
    assert phase_of(kube_client, namespace, "service-0") == "Running"
    assert phase_of(kube_client, namespace, "unbound-0") == "Pending"


def test_graceful_delete_of_bound_pod_completes(
    kube_client: KubeClient,
    namespace: str,
    fake_nodes: list[NodeSpec],
    fake_kubelet: FakeKubelet,
) -> None:
    pod = create_pod(kube_client, namespace, pod_manifest("victim"))
    assert bind(kube_client, namespace, pod, fake_nodes[2].name) == 201
    wait_for(lambda: phase_of(kube_client, namespace, "victim") == "Running")
    # An eviction deletes gracefully (30s default); the kubelet finishes it at once.
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "victim", "namespace": namespace},
    }
    resp = kube_client.request(
        "POST", f"/api/v1/namespaces/{namespace}/pods/victim/eviction", eviction
    )
    assert resp.status == 201, resp.body
    wait_for(
        lambda: (
            kube_client.request("GET", f"/api/v1/namespaces/{namespace}/pods/victim").status == 404
        ),
        timeout=15,
    )


def test_stock_kube_scheduler_binds_pod(
    control_plane: ControlPlane,
    kube_client: KubeClient,
    namespace: str,
    fake_nodes: list[NodeSpec],
    fake_kubelet: FakeKubelet,
    node_domain: str,
) -> None:
    target = next(s for s in fake_nodes if s.gpu_model == "Tesla-T4" and s.pool == "inference")
    manifest = pod_manifest("by-kube-scheduler", scheduler="default-scheduler", tolerate_all=False)
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": target.name}
    manifest["spec"]["tolerations"] = [
        {"key": f"{node_domain}/node.usage", "operator": "Equal", "value": "inference"},
        {"key": "nvidia.com/gpu.product", "operator": "Equal", "value": "Tesla-T4"},
    ]
    manifest["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1"},
        "limits": {"nvidia.com/gpu": "1"},
    }
    create_pod(kube_client, namespace, manifest)
    control_plane.start_scheduler()
    try:
        wait_for(
            lambda: phase_of(kube_client, namespace, "by-kube-scheduler") == "Running", timeout=60
        )
    finally:
        control_plane.stop_scheduler()
    assert get_pod(kube_client, namespace, "by-kube-scheduler")["spec"]["nodeName"] == target.name


# --- reliability: keep this last, it restarts the shared API server --------------------------


def test_restart_apiserver_keeps_data(
    control_plane: ControlPlane,
    kube_client: KubeClient,
    namespace: str,
    fake_nodes: list[NodeSpec],
    fake_kubelet: FakeKubelet,
) -> None:
    url_before = control_plane.url
    kube_client.post(
        f"/api/v1/namespaces/{namespace}/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "survivor"},
            "data": {"k": "v"},
        },
    )
    control_plane.restart_apiserver(downtime=0.5)
    assert control_plane.url == url_before

    def fetch() -> dict[str, Any] | None:
        try:
            return kube_client.get(f"/api/v1/namespaces/{namespace}/configmaps/survivor")
        except Exception:
            return None

    cm = wait_for(fetch, timeout=20)
    assert cm["data"] == {"k": "v"}
    assert kube_client.get(f"/api/v1/nodes/{fake_nodes[0].name}")["metadata"]["name"]

    # The fake kubelet's watch recovers: a pod bound after the restart still runs.
    pod = wait_for(lambda: _try_create(kube_client, namespace, pod_manifest("after", duration=0.5)))
    assert bind(kube_client, namespace, pod, fake_nodes[3].name) == 201
    wait_for(lambda: phase_of(kube_client, namespace, "after") == "Succeeded", timeout=30)


def _try_create(client: KubeClient, ns: str, manifest: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return create_pod(client, ns, manifest)
    except Exception:
        return None
