"""The live scheduler places pods on the real API server honouring affinity and taints, writes
the GPU device annotation with the binding, and explains pods it cannot place."""

from __future__ import annotations

import pytest
from live_helpers import (
    A100,
    T4,
    USAGE,
    bound,
    condition,
    create,
    events_for,
    pod,
    pods,
    scheduler,
    wait_for,
)

from fairgpu.devcluster import ControlPlane, KubeClient
from fairgpu.model.gpu import decode_gpu_devices

pytestmark = pytest.mark.integration


def test_binds_on_nodes_matching_selectors_affinity_and_tolerations(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    affinity_pod = pod("infer-t4", gpus=1, pool="inference", model=T4)
    # Required node affinity instead of a nodeSelector: hybrid pool only.
    affinity_pod["spec"].pop("nodeSelector")
    affinity_pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": USAGE, "operator": "In", "values": ["hybrid"]}]}
                ]
            }
        }
    }
    affinity_pod["spec"]["tolerations"] = [
        {"key": USAGE, "operator": "Exists"},
        {"key": "nvidia.com/gpu.product", "operator": "Equal", "value": T4},
    ]
    manifests = [
        pod("train-a100", gpus=4, pool="training", model=A100),
        pod("infer-a100", gpus=2, pool="inference", model=A100),
        affinity_pod,
        # No toleration for any pool taint: must stay pending.
        pod("untolerated", gpus=0, pool=None, model=None),
        # Asks for a different scheduler: never touched.
        pod("other-scheduler", gpus=1, scheduler="someone-else"),
    ]
    for m in manifests:
        create(admin, ns, m)
    with scheduler(live_cp):
        placed = wait_for(lambda: b if len(b := bound(admin, ns)) >= 3 else None)
        assert placed["train-a100"] == "lv-training-a100"
        assert placed["infer-a100"] == "lv-inference-a100"
        # The T4 model taint and the hybrid-only affinity leave exactly one node.
        assert placed["infer-t4"] == "lv-hybrid-t4"

        def explained() -> dict | None:
            p = next(p for p in pods(admin, ns) if p["metadata"]["name"] == "untolerated")
            c = condition(p)
            return c if c and c["status"] == "False" else None

        cond = explained()
        cond = cond or wait_for(explained)
        assert cond["reason"] == "Unschedulable"
        assert "0/7 nodes are available" in cond["message"]
        assert "untolerated taint" in cond["message"]
        ev = wait_for(lambda: events_for(admin, ns, "untolerated"))
        assert ev[0]["reason"] == "FailedScheduling" and ev[0]["type"] == "Warning"
    by_name = {p["metadata"]["name"]: p for p in pods(admin, ns)}
    assert "nodeName" not in by_name["untolerated"]["spec"]
    assert "nodeName" not in by_name["other-scheduler"]["spec"]
    assert condition(by_name["other-scheduler"]) is None
    # Devices travel with the binding: whole GPUs, as many as asked, distinct.
    for name, count in (("train-a100", 4), ("infer-a100", 2), ("infer-t4", 1)):
        ann = by_name[name]["metadata"]["annotations"]["fairgpu.io/gpu-devices"]
        devices = decode_gpu_devices(ann)
        assert len({d.index for d in devices}) == count and all(d.whole for d in devices)


def test_devices_are_not_shared_between_pods_on_one_node(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    for i in range(4):
        create(admin, ns, pod(f"p{i}", gpus=2, pool="training", model=A100))
    with scheduler(live_cp):
        wait_for(lambda: len(bound(admin, ns)) == 4)
    used: list[int] = []
    for p in pods(admin, ns):
        assert p["spec"]["nodeName"] == "lv-training-a100"
        used += [
            d.index
            for d in decode_gpu_devices(p["metadata"]["annotations"]["fairgpu.io/gpu-devices"])
        ]
    assert sorted(used) == list(range(8))


def test_metrics_health_and_readiness_endpoints(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    import urllib.request

    create(admin, ns, pod("m-0", gpus=3, labels={"fairgpu.io/queue": "team-m"}))
    create(admin, ns, pod("m-stuck", gpus=16, labels={"fairgpu.io/queue": "team-m"}))
    with scheduler(live_cp) as s:
        wait_for(lambda: "m-0" in bound(admin, ns))
        base = f"http://127.0.0.1:{s.metrics_port}"

        def scrape() -> str:
            with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
                return r.read().decode()

        text = wait_for(
            lambda: (
                t if 'fairgpu_queue_gpus_allocated{queue="team-m"} 3.0' in (t := scrape()) else None
            )
        )
        for path in ("/healthz", "/readyz"):
            with urllib.request.urlopen(base + path, timeout=5) as r:
                assert r.status == 200 and r.read() == b"ok"
    assert 'fairgpu_pending_pods{queue="team-m"} 1.0' in text
    assert 'fairgpu_node_gpus_allocated{node="lv-training-a100"} 3.0' in text
    assert 'fairgpu_scheduling_attempts_total{result="scheduled"}' in text
    assert "fairgpu_pod_scheduling_duration_seconds_bucket" in text
    assert 'fairgpu_binds_total{result="ok"} 1.0' in text
    assert "fairgpu_leader 1.0" in text
