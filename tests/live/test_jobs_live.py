"""batch/v1 Jobs whose pods fairgpu preempts, with the real Job controller.

An eviction (policy/v1) marks the pod with the ``DisruptionTarget`` condition and the kubelet
ends it ``Failed``: the Job controller counts it against ``backoffLimit``, so a Job with
``backoffLimit: 0`` fails for good at its first preemption -- unless its
``podFailurePolicy`` ignores disruptions, which is what docs/running-on-a-cluster.md tells
users to write: then the controller replaces the pod and the Job goes on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from live_helpers import bound, create, pod, pods, scheduler, wait_for

from fairgpu.devcluster import ControlPlane, KubeClient

pytestmark = pytest.mark.integration

JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"
NODE = "lv-training-a100"
TENANCY = """
mode: dynamic
namespaceQueues: false
history: {halfLifeSeconds: 0}
preemption: {reclaimMinRuntimeSeconds: 0, reclaimCooldownSeconds: 0}
queues:
  - {name: a, weight: 1}
  - {name: b, weight: 1}
"""
IGNORE_DISRUPTIONS = {
    "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
}


@pytest.fixture
def job_controller(live_cp: ControlPlane, kubelet: Any) -> Iterator[None]:
    """The real kube-controller-manager running only the Job controller."""
    if not (live_cp.bin_dir / "kube-controller-manager").exists():
        pytest.skip("kube-controller-manager not built (tools/kube/build-control-plane.sh)")
    live_cp.start_controller_manager(("job-controller",))
    try:
        yield
    finally:
        live_cp.stop_controller_manager()


def job(name: str, failure_policy: dict[str, Any] | None) -> dict[str, Any]:
    """Queue a's Job of two 4-GPU pods at once on the A100 training node, ``backoffLimit``
    0 (one failed pod fails it), running an hour."""
    template = pod(
        "unused",
        gpus=4,
        labels={"fairgpu.io/queue": "a"},
        annotations={"fairgpu.io/duration-seconds": "3600"},
        node_selector={"kubernetes.io/hostname": NODE},
    )
    template["spec"]["restartPolicy"] = "Never"
    spec: dict[str, Any] = {
        "parallelism": 2,
        "completions": 2,
        "backoffLimit": 0,
        "template": {"metadata": template["metadata"], "spec": template["spec"]},
    }
    del spec["template"]["metadata"]["name"]
    if failure_policy is not None:
        spec["podFailurePolicy"] = failure_policy
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def job_condition(admin: KubeClient, ns: str, name: str, kind: str) -> bool:
    got = admin.get(f"{JOBS.format(ns=ns)}/{name}")
    return any(
        c["type"] == kind and c["status"] == "True"
        for c in (got.get("status") or {}).get("conditions") or []
    )


def drop_jobs(admin: KubeClient, ns: str) -> None:
    """Delete the Jobs and let their pods go (no garbage collector runs here): their
    tracking finalizers are removed, as the Job controller does for a deleted Job's pods."""
    for item in admin.get(JOBS.format(ns=ns))["items"]:
        admin.request("DELETE", f"{JOBS.format(ns=ns)}/{item['metadata']['name']}")
    for p in pods(admin, ns):
        if p["metadata"].get("finalizers"):
            path = f"/api/v1/namespaces/{ns}/pods/{p['metadata']['name']}"
            admin.patch(path, {"metadata": {"finalizers": None}})


@pytest.mark.parametrize("ignore", [True, False], ids=["ignores-disruptions", "counts-them"])
def test_a_preempted_job_pod_is_replaced_only_if_the_job_ignores_disruptions(
    live_cp: ControlPlane, admin: KubeClient, ns: str, job_controller: None, ignore: bool
) -> None:
    with scheduler(live_cp, tenancy=TENANCY):
        try:
            admin.post(JOBS.format(ns=ns), job("train", IGNORE_DISRUPTIONS if ignore else None))
            wait_for(lambda: len(bound(admin, ns)) == 2, timeout=30)
            first = set(bound(admin, ns))
            # Queue b, below its share, takes back half the node: one of a's pods is evicted.
            create(
                admin,
                ns,
                pod(
                    "b-0",
                    gpus=4,
                    labels={"fairgpu.io/queue": "b"},
                    node_selector={"kubernetes.io/hostname": NODE},
                ),
            )
            wait_for(lambda: bound(admin, ns).get("b-0") == NODE, timeout=30)
            status = lambda: admin.get(f"{JOBS.format(ns=ns)}/train").get("status") or {}  # noqa: E731

            def replacement() -> set[str]:
                return {p["metadata"]["name"] for p in pods(admin, ns)} - first - {"b-0"}

            if ignore:
                # The controller replaces the evicted pod (it waits: the node is full); the
                # Job neither fails nor counts a failure.
                assert len(wait_for(replacement, timeout=60)) == 1
                assert not job_condition(admin, ns, "train", "Failed")
                assert not status().get("failed")
            else:
                # One eviction fails the Job, and the failed Job kills its other pod too.
                wait_for(lambda: job_condition(admin, ns, "train", "Failed"), timeout=60)
                wait_for(lambda: status().get("failed") == 2, timeout=30)
                assert not replacement()
        finally:
            drop_jobs(admin, ns)
