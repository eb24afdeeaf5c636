"""A running pod whose annotations make it malformed for this scheduler still holds its
node: a scheduler that starts (or restarts) then counts what the pod asked, not nothing, and
books nobody onto its GPUs. Audited from the API server's state."""

from __future__ import annotations

import time

from auditor import Auditor
from live_helpers import bound, condition, create, pod, pods, scheduler, wait_for
from typer.testing import CliRunner

from fairgpu.cli import app
from fairgpu.devcluster import ControlPlane, KubeClient

NODE = "lv-training-a100"


def on_node(name: str, gpus: int) -> dict:
    manifest = pod(name, gpus=gpus)
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    return manifest


def test_a_running_pod_annotated_malformed_keeps_its_gpus(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    auditor = Auditor(admin, namespace=None)
    with scheduler(live_cp):
        create(admin, ns, on_node("first", 6))
        wait_for(lambda: bound(admin, ns).get("first") == NODE, 20)
    # Annotations of a running pod may change at any time; this one is no label key.
    patch = {"metadata": {"annotations": {"fairgpu.io/topology-required": "not a label!"}}}
    admin.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/first",
        patch,
        content_type="application/merge-patch+json",
    )
    with scheduler(live_cp):  # a restart: the pod is read afresh
        create(admin, ns, on_node("second", 4))

        def judged() -> bool:
            second = next(p for p in pods(admin, ns) if p["metadata"]["name"] == "second")
            return condition(second) is not None or bool(second["spec"].get("nodeName"))

        wait_for(judged, 20)
        time.sleep(2)  # several cycles
        placed = bound(admin, ns)
    assert auditor.check() == [], auditor.check()
    assert placed == {"first": NODE}, placed
    # explain says why and how the pod is counted.
    said = CliRunner().invoke(
        app, ["explain", f"{ns}/first", "--kubeconfig", str(live_cp.kubeconfig_path)]
    )
    assert said.exit_code == 0, said.output
    assert f"is bound to node {NODE}" in said.stdout
    assert "The scheduler cannot read it (Pod " in said.stdout, said.stdout
    assert "topology-required" in said.stdout
