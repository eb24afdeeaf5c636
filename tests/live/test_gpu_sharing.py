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
