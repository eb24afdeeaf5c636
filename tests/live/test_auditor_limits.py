"""The auditor's check of queue limits: the pods of the queues a limit caps hold at most that
many GPUs together -- whole GPUs and annotated shares counted -- and only they count."""

from __future__ import annotations

from typing import Any

from fairgpu.model.gpu import ANN_GPU_DEVICES, WHOLE
from fairgpu.model.pod import LABEL_QUEUE
from tests.live.auditor import Auditor


def bound_pod(name: str, queue: str, gpus: int = 0, devices: str = "") -> dict[str, Any]:
    notes = {ANN_GPU_DEVICES: devices} if devices else {}
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    meta = {"name": name, "namespace": "ns", "labels": {LABEL_QUEUE: queue}, "annotations": notes}
    return {
        "metadata": meta,
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "resources": {"requests": limits, "limits": limits}}],
        },
    }


def auditor() -> Auditor:
    a = Auditor(client=None)  # type: ignore[arg-type]  # judges given pods only
    a.limits = {"department d": (frozenset({"qa", "qb"}), 3 * WHOLE)}
    return a


def test_pods_within_the_limit_pass() -> None:
    pods = [
        bound_pod("a", "qa", devices="0:1000m"),
        bound_pod("b", "qb", gpus=2),
        bound_pod("c", "qc", gpus=4),  # another queue: not counted
    ]
    assert auditor()._limit_violations(pods) == []


def test_whole_gpus_and_shares_beyond_the_limit_are_a_violation() -> None:
    pods = [
        bound_pod("a", "qa", devices="0:1000m,1:1000m"),
        bound_pod("b", "qb", devices="2:500m"),
        bound_pod("c", "qb", gpus=1),
    ]
    found = auditor()._limit_violations(pods)
    assert found == [
        "department d holds 3500 milli-GPU, above its limit of 3000: ['ns/a', 'ns/b', 'ns/c']"
    ]
