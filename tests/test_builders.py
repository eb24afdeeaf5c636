"""The two forms of test pods and nodes agree: a manifest decoded by production code and the
struct built directly give the same scheduler-visible fields for the same keywords."""

from __future__ import annotations

from typing import Any

from fairgpu.model.pod import PodInfo
from tests.builders import EPOCH, GI, cluster, k8s_node, k8s_pod, node_info, pod_info


def _seen(p: PodInfo) -> tuple[object, ...]:
    return (p.key, p.uid, p.gpu, p.requests, p.priority, p.labels, p.annotations)


def test_a_decoded_pod_and_a_built_pod_agree() -> None:
    common: dict[str, Any] = {
        "group": "g",
        "min_member": 2,
        "queue": "q",
        "user": "u",
        "duration": 30,
    }
    decoded = k8s_pod("p", "team-a", gpus=2, cpu="500m", memory="2Gi", priority=7, **common)
    built = pod_info("p", "team-a", gpus=2, cpu=500, memory=2 * GI, priority=7, **common)
    assert _seen(decoded) == _seen(built)


def test_a_decoded_share_and_a_built_share_agree() -> None:
    decoded = k8s_pod("s", cpu="1", memory="1Gi", requests={"nvidia.com/gpucores": 30})
    assert decoded.gpu == pod_info("s", milli=300).gpu


def test_created_is_seconds_after_the_epoch_in_a_manifest() -> None:
    assert k8s_pod("p", created=90).created == EPOCH.timestamp() + 90
    assert pod_info("p", created=90).created == 90


def test_a_decoded_node_and_a_built_node_agree() -> None:
    decoded = k8s_node("n", gpus=4, model="V100M16", cpu="64", memory="512Gi")
    built = node_info("n", gpus=4, model="V100M16", labels={"kubernetes.io/hostname": "n"})
    assert decoded.labels == built.labels
    assert decoded.allocatable == built.allocatable
    assert (decoded.gpu_count, decoded.gpu_model) == (built.gpu_count, built.gpu_model)


def test_placed_gpu_pods_take_the_first_wholly_free_devices() -> None:
    first, second = pod_info("a", gpus=2), pod_info("b", gpus=1)
    state = cluster(node_info("n", gpus=4), placed=[(first, "n"), (second, "n", 5.0)])
    assert state.placements[first.uid].devices == (0, 1)
    assert state.placements[second.uid].devices == (2,)
    assert state.placements[second.uid].started == 5.0
