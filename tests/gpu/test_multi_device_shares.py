"""A share of several devices (HAMi's ``nvidia.com/gpu: N`` with ``gpumem``/``gpucores``):
N distinct devices, each with that part free -- through decoding, the filter, the device
choice of every device policy, preemption and the device annotation."""

from __future__ import annotations

from functools import partial

import pytest

from fairgpu.cluster.state import ClusterState
from fairgpu.engine.engine import Engine
from fairgpu.engine.plugins.gpu import NO_DEVICES
from fairgpu.engine.policies import POLICIES, policy
from fairgpu.model.gpu import GpuRequest, decode_gpu_devices, encode_gpu_devices
from fairgpu.model.pod import PodInfo
from tests.builders import cluster, k8s_node, k8s_pod

team_pod = partial(k8s_pod, namespace="team-a", cpu="1", memory="1Gi", created=0)


def share(name: str, devices: int, cores: int, mem: int = 0, **kw: object) -> PodInfo:
    limits = {"nvidia.com/gpu": devices, "nvidia.com/gpucores": cores}
    if mem:
        limits["nvidia.com/gpumem"] = mem
    return team_pod(name, limits=limits, **kw)


def test_a_share_of_two_devices_decodes_as_two_devices_with_that_part_each() -> None:
    pod = share("two", 2, 30, 4096)
    assert pod.gpu == GpuRequest(count=2, milli=300, memory_mib=4096)
    assert pod.gpu.is_shared and pod.gpu.total_milli == 600


def busy_node(taken: dict[int, int]) -> ClusterState:
    """One 4-GPU node whose devices ``taken`` (device -> milli) are partly used."""
    state = cluster(k8s_node("n", gpus=4))
    for device, milli in taken.items():
        filler = team_pod(f"fill-{device}", limits={"nvidia.com/gpucores": milli // 10})
        state.assign(filler, 0, (device,))
    return state


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_gives_each_part_its_own_device_with_room(name: str) -> None:
    # Devices 0 and 1 have 200m free, 2 and 3 have 600m: a 2 x 50% share fits only on 2, 3.
    state = busy_node({0: 800, 1: 800, 2: 400, 3: 400})
    result = Engine(policy(name)).cycle(state, [share("two", 2, 50)], 0.0)
    assert [(b.node_name, b.devices) for b in result.binds] == [("n", (2, 3))]
    placed = state.placements[result.binds[0].pod.uid]
    assert placed.device_milli == 500
    assert list(state.device_milli_free[0, :4]) == [200, 200, 100, 100]


def test_too_few_devices_with_room_leave_it_pending_with_its_own_reason() -> None:
    state = busy_node({0: 800, 1: 800, 2: 800, 3: 400})  # one device has 600m
    result = Engine().cycle(state, [share("two", 2, 50)], 0.0)
    assert not result.binds
    assert NO_DEVICES in result.unschedulable[0].reason
    # One device with room is enough for a share of one.
    assert Engine().cycle(state, [share("one", 1, 50)], 0.0).binds


def test_more_devices_than_any_node_has_is_unresolvable() -> None:
    state = cluster(k8s_node("n", gpus=4))
    result = Engine().cycle(state, [share("five", 5, 10)], 0.0)
    pending = result.unschedulable[0]
    assert not pending.resolvable and "5 GPUs asked" in pending.reason


def test_preemption_frees_as_many_devices_as_the_share_needs() -> None:
    # Two low-priority whole-GPU pods hold devices 0 and 1; 2 and 3 are taken by a share each
    # at 90%: a high-priority 2 x 60% share must evict both whole pods, not one.
    state = cluster(k8s_node("n", gpus=4))
    for d in (0, 1):
        state.assign(team_pod(f"low-{d}", limits={"nvidia.com/gpu": 1}), 0, (d,))
    for d in (2, 3):
        state.assign(
            team_pod(f"busy-{d}", limits={"nvidia.com/gpucores": 90}, priority=10), 0, (d,)
        )
    want = share("want", 2, 60, priority=100)
    result = Engine().cycle(state, [want], 0.0)
    evicted = sorted(e.pod.name for e in result.evictions)
    assert evicted == ["low-0", "low-1"], (evicted, result.unschedulable)


def test_the_device_annotation_names_each_device_with_its_part() -> None:
    text = encode_gpu_devices((1, 3), 300, 4096)
    assert text == "1:300m/4096Mi,3:300m/4096Mi"
    assert [(d.index, d.milli, d.memory_mib) for d in decode_gpu_devices(text)] == [
        (1, 300, 4096),
        (3, 300, 4096),
    ]
