"""The manifests in deploy/ work: the scheduler runs with exactly the RBAC granted there, and
the example inference workload lands in its node pool (written out and derived)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from live_helpers import bound, condition, create, events_for, pod, pods, scheduler, wait_for

from fairgpu.devcluster import ControlPlane, KubeClient
from fairgpu.kube.client import Connection

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"

_PATHS = {
    "Namespace": "/api/v1/namespaces",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
}


def apply(client: KubeClient, doc: dict[str, Any]) -> None:
    """Create ``doc`` (kinds used by deploy/), accepting AlreadyExists."""
    path = _PATHS[doc["kind"]].format(ns=doc["metadata"].get("namespace", ""))
    r = client.request("POST", path, doc)
    assert r.ok or r.status == 409, (doc["kind"], r.status, r.body)


def docs(name: str) -> list[dict[str, Any]]:
    """The YAML documents of ``deploy/<name>``."""
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def install_rbac(client: KubeClient) -> str:
    """Apply deploy/'s namespace, service account and RBAC; returns a token of that service
    account (the scheduler's least privilege)."""
    for name in ("namespace.yaml", "serviceaccount.yaml", "rbac.yaml"):
        for d in docs(name):
            apply(client, d)
    return client.post(
        "/api/v1/namespaces/fairgpu-system/serviceaccounts/fairgpu-scheduler/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )["status"]["token"]


def templates(name: str) -> list[dict[str, Any]]:
    """Pod templates of the Deployments in ``deploy/examples/<name>``."""
    return [
        d["spec"]["template"]
        for d in yaml.safe_load_all((DEPLOY / "examples" / name).read_text())
        if d and d["kind"] == "Deployment"
    ]


def test_runs_with_the_least_privilege_rbac_of_deploy(
    live_cp: ControlPlane, admin: KubeClient, ns: str, podgroup_crd: None
) -> None:
    # With the PodGroup CRD installed the scheduler also lists and watches PodGroups.
    token = install_rbac(admin)
    conn = Connection(live_cp.url, token, live_cp.ca_file)
    # The example Deployments' pod templates (no controller-manager runs here).
    for tmpl in templates("inference-deployment.yaml"):
        for i in range(2):
            m = {"apiVersion": "v1", "kind": "Pod", "metadata": dict(tmpl["metadata"])}
            m["metadata"]["name"] = f"{tmpl['metadata']['labels']['app']}-{i}"
            m["spec"] = tmpl["spec"]
            create(admin, ns, m)
    create(admin, ns, pod("too-big", gpus=16))
    with scheduler(
        live_cp,
        connection=conn,
        leader_elect=True,
        lease_namespace="fairgpu-system",
        lease_name="fairgpu-scheduler",
        lease_duration=4,
        renew_deadline=3,
        retry_period=0.5,
    ) as s:
        placed = wait_for(lambda: b if len(b := bound(admin, ns)) == 4 else None)
        assert s.is_leader()
        watched = [r.path for r in s.pod_group_reflectors]
        assert "/apis/scheduling.x-k8s.io/v1alpha1/podgroups" in watched
        c = wait_for(
            lambda: condition(
                next(p for p in pods(admin, ns) if p["metadata"]["name"] == "too-big")
            )
        )
        assert c["status"] == "False"
        assert wait_for(lambda: events_for(admin, ns, "too-big"))
        assert s.metrics.binds.labels("error")._value.get() == 0
        # The leader publishes its settings for the read-only commands.
        published = admin.get("/api/v1/namespaces/fairgpu-system/configmaps/fairgpu-settings")
        assert published["data"]["ordering"] == "fair"
    lease = admin.get(
        "/apis/coordination.k8s.io/v1/namespaces/fairgpu-system/leases/fairgpu-scheduler"
    )
    # Released on graceful shutdown.
    assert lease["spec"].get("holderIdentity", "") == ""
    # Inference T4 pods stay in the inference pool (or overflow to hybrid), hand-written or
    # derived from fairgpu.io/workload-type.
    assert set(placed.values()) <= {"lv-inference-t4", "lv-hybrid-t4"}
    assert placed["ranker-derived-0"] == "lv-inference-t4"
