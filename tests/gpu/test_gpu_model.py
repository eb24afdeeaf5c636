"""GPU request model: the device annotation format, validation, MIG resources."""

from __future__ import annotations

import numpy as np
import pytest

from fairgpu.engine.policies import policy
from fairgpu.engine.scheduler import Scheduler
from fairgpu.model.gpu import (
    DEFAULT_NAMES,
    DeviceShare,
    decode_gpu_devices,
    encode_gpu_devices,
    gpu_request_from,
    is_mig_single,
    mig_profile,
    validate_gpu_request,
)
from tests.builders import cluster, k8s_node, k8s_pod, node_info, pod_info


def test_annotation_whole_devices_round_trip() -> None:
    text = encode_gpu_devices([3, 0, 1])
    assert text == "0,1,3"
    assert [d.index for d in decode_gpu_devices(text)] == [0, 1, 3]
    assert all(d.whole for d in decode_gpu_devices(text))


def test_annotation_share_round_trip() -> None:
    text = encode_gpu_devices([2], milli=300, memory_mib=4096)
    assert text == "2:300m/4096Mi"
    assert decode_gpu_devices(text) == [DeviceShare(2, 300, 4096, whole=False)]
    assert decode_gpu_devices(encode_gpu_devices([5], milli=250)) == [
        DeviceShare(5, 250, 0, whole=False)
    ]


@pytest.mark.parametrize("bad", ["x", "1:30", "1:2000m", "1:300m/4G", "0,0", "-1"])
def test_annotation_rejects_malformed(bad: str) -> None:
    with pytest.raises(ValueError, match=r"fairgpu\.io/gpu-devices"):
        decode_gpu_devices(bad)


def test_request_parsing_rejects_impossible_asks_only() -> None:
    names = DEFAULT_NAMES
    with pytest.raises(ValueError, match="gpucores"):
        gpu_request_from({names.cores_percent: 150}, names, None)
    # A share of several devices is a share of each (HAMi's several virtual GPUs).
    pair = gpu_request_from({names.gpu: 2, names.cores_percent: 50}, names, None)
    assert (pair.count, pair.milli, pair.is_shared) == (2, 500, True)
    share = gpu_request_from({names.cores_percent: 30, names.memory_mib: 2048}, names, None)
    assert (share.count, share.milli, share.memory_mib, share.is_shared) == (1, 300, 2048, True)


def test_validate_reports_each_problem() -> None:
    nodes = [node_info("a", gpus=2, model="T4"), node_info("b", gpus=4, model="V100M16")]
    assert validate_gpu_request(pod_info("ok", gpus=4), nodes) == []
    unknown = validate_gpu_request(pod_info("m", models=frozenset({"A100"})), nodes)
    assert len(unknown) == 1 and "A100" in unknown[0] and "not in the cluster" in unknown[0]
    too_many = validate_gpu_request(pod_info("n", gpus=3, models=frozenset({"T4"})), nodes)
    assert any("no node with GPU model T4 has more than 2" in p for p in too_many)
    memory = validate_gpu_request(pod_info("mem", milli=500, gpu_memory_mib=40000), nodes)
    assert any("40000 MiB" in p for p in memory)
    # A share of each of several devices: as many devices as any allowed node has.
    pair = pod_info("f", gpus=2, milli=500)
    assert validate_gpu_request(pair, cluster(*nodes)) == []
    five = validate_gpu_request(pod_info("g", gpus=5, milli=500), cluster(*nodes))
    assert any("5 GPUs asked" in p for p in five)


def test_mig_mixed_strategy_is_a_plain_extended_resource() -> None:
    assert mig_profile("nvidia.com/mig-1g.5gb") == "1g.5gb"
    assert mig_profile("nvidia.com/gpu") is None
    pod = k8s_pod("mig", cpu="1", requests={"nvidia.com/mig-1g.5gb": 2})
    assert pod.gpu.count == 0 and pod.requests["nvidia.com/mig-1g.5gb"] == 2
    small = k8s_node("small", memory="8Gi", pods=10, extra={"nvidia.com/mig-1g.5gb": 1})
    big = k8s_node("big", memory="8Gi", pods=10, extra={"nvidia.com/mig-1g.5gb": 7})
    state = cluster(small, big)
    sched = Scheduler(policy("best-fit"))
    result = sched.schedule(pod, state)
    assert result.node_name == "big"
    state.assign(pod, result.node, result.devices)
    col = state.resource_index["nvidia.com/mig-1g.5gb"]
    assert state.requested[state.node_index["big"], col] == 2
    assert validate_gpu_request(pod, [small, big]) == []
    greedy = k8s_pod("mig", requests={"nvidia.com/mig-1g.5gb": 9})
    assert any("MIG 1g.5gb" in p for p in validate_gpu_request(greedy, [small, big]))
    assert not sched.schedule(greedy, state).ok


def test_mig_single_strategy_slices_are_whole_devices() -> None:
    labels = {
        "nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb",
        "nvidia.com/mig.strategy": "single",
    }
    node = k8s_node("mig", labels, memory="8Gi", pods=10, gpus=7)
    assert is_mig_single(node.labels) and node.gpu_count == 7
    state = cluster(node)
    pod = k8s_pod("mig", gpus=3)
    result = Scheduler(policy("best-fit")).schedule(pod, state)
    assert result.devices == (0, 1, 2)
    share = pod_info("share", milli=300)
    assert any("MIG" in p for p in validate_gpu_request(share, [node]))


def test_state_arrays_stay_consistent_after_mig_assign() -> None:
    state = cluster(node_info("a", gpus=2))
    pod = pod_info("p", milli=400)
    state.assign(pod, 0, (1,))
    assert np.array_equal(state.device_milli_free[0, :2], [1000, 600])
    state.release("default/p")
    assert np.array_equal(state.device_milli_free[0, :2], [1000, 1000])
