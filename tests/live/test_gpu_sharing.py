"""A GPU share bound to a node whose device plugin advertises only the physical GPUs is
reported once (log and metric): the kubelet there admits no more pods requesting
``nvidia.com/gpu`` than it has GPUs, so shares beyond that would be rejected."""

from __future__ import annotations

import logging

import pytest
from live_helpers import T4, bound, create, pod, scheduler, wait_for

from fairgpu.devcluster import ControlPlane, KubeClient

pytestmark = pytest.mark.integration

METRIC = "fairgpu_node_gpu_sharing_problem"


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_share_on_a_node_without_virtual_devices_is_reported_once(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    # The dev nodes carry GPU feature discovery's nvidia.com/gpu.count equal to allocatable.
    shares = [pod(f"share-{i}", extra_resources={"nvidia.com/gpucores": "30"}) for i in range(3)]
    whole = pod("whole", gpus=1, pool="inference", model=T4)
    records = _Records()
    logger = logging.getLogger("fairgpu.kube")
    logger.addHandler(records)
    try:
        for m in [*shares, whole]:
            create(admin, ns, m)
        with scheduler(live_cp) as s:
            where = wait_for(lambda: b if len(b := bound(admin, ns)) == 4 else None)
            node = where["share-0"]
            assert {where[f"share-{i}"] for i in range(3)} == {node}
            sample = s.metrics.registry.get_sample_value
            assert wait_for(lambda: sample(METRIC, {"node": node})) == 1
            assert sample(METRIC, {"node": where["whole"]}) is None  # no share there
    finally:
        logger.removeHandler(records)
    warned = [
        r for r in records.records if r.getMessage() == "GPU shares on this node may not work"
    ]
    assert len(warned) == 1
    problem = warned[0].__dict__["problem"]
    assert problem.startswith(f"Node {node}: allocatable nvidia.com/gpu (8) equals")


def test_a_share_of_two_devices_is_bound_with_a_part_of_each(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    """HAMi's share of several devices (``nvidia.com/gpu: 2`` with ``gpucores``): each pod
    is bound with its part on two distinct devices, and no device holds more than it has
    (audited from the pods' annotations on the API server)."""
    from auditor import Auditor

    from fairgpu.model.gpu import ANN_GPU_DEVICES, decode_gpu_devices

    node = {"kubernetes.io/hostname": "lv-training-a100"}
    for i in range(5):
        m = pod(f"pair-{i}", gpus=2, extra_resources={"nvidia.com/gpucores": "40"})
        m["spec"]["nodeSelector"] = node
        create(admin, ns, m)
    auditor = Auditor(admin, namespace=None)
    with scheduler(live_cp):
        placed = wait_for(lambda: b if len(b := bound(admin, ns)) == 5 else None, 30)
    assert set(placed.values()) == {"lv-training-a100"}
    parts = []
    for p in admin.get(f"/api/v1/namespaces/{ns}/pods")["items"]:
        devices = decode_gpu_devices(p["metadata"]["annotations"][ANN_GPU_DEVICES])
        assert len({d.index for d in devices}) == 2 and {d.milli for d in devices} == {400}
        parts += [d.index for d in devices]
    assert len(parts) == 10 and max(parts.count(d) for d in set(parts)) <= 2  # 2 x 400m fit
    assert auditor.check() == []
