"""Partitionable devices (MIG partitions of one GPU through shared counters) and the
fragmentation-aware device choice against kube-scheduler's first fit."""

from __future__ import annotations

from fairgpu.model.dra import decode_dra
from fairgpu.sim.workloads.nvidia_dra import (
    claim_spec,
    nvidia_device_classes,
    nvidia_slice,
)
from tests.engine.dra_builders import claim_pod, devices_of, dra_cluster, place, scheduler


def _claim(name: str, gpus: int = 0, mig: str = "") -> dict:
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": claim_spec(gpus, mig),
    }


def _state(gpus: int = 1):
    return dra_cluster(["n1"], *nvidia_device_classes(), nvidia_slice("n1", gpus=gpus))


def test_slice_shape_is_nvidia_like() -> None:
    s = decode_dra(nvidia_slice("n1", gpus=2))
    whole = next(d for d in s.devices if d.name == "gpu-1")
    assert whole.attributes["gpu.nvidia.com/productName"] == "NVIDIA A100-SXM4-80GB"
    assert whole.attributes["gpu.nvidia.com/index"] == 1
    assert whole.attributes["gpu.nvidia.com/uuid"].startswith("GPU-")
    assert whole.capacity["gpu.nvidia.com/memory"] == 80 * 2**30
    mig = [d for d in s.devices if d.attributes["gpu.nvidia.com/type"] == "mig"]
    assert len(mig) == 2 * (7 + 3 + 2 + 1 + 1)
    assert s.counters["gpu-0-counters"]["multiprocessors"] == 108


def test_whole_gpu_and_partition_exclude_each_other() -> None:
    state = _state()
    for name, gpus, mig in (("whole", 1, ""), ("part", 0, "1g.10gb")):
        state.dra.add(decode_dra(_claim(name, gpus, mig)))
    sched = scheduler()
    assert place(sched, state, claim_pod("p1", "part")).ok
    assert not place(sched, state, claim_pod("p2", "whole")).ok


def test_counters_limit_partitions_of_one_gpu() -> None:
    state = _state()
    for i in range(8):
        state.dra.add(decode_dra(_claim(f"s{i}", mig="1g.10gb")))
    sched = scheduler("first-fit")
    placed = [place(sched, state, claim_pod(f"p{i}", f"s{i}")).ok for i in range(8)]
    assert placed == [True] * 7 + [False]  # seven 1g placements on an A100


def test_first_fit_blocks_the_big_profile_fragmentation_aware_does_not() -> None:
    outcomes = {}
    for policy in ("first-fit", "fragmentation-aware"):
        state = _state()
        state.dra.add(decode_dra(_claim("small", mig="1g.10gb")))
        state.dra.add(decode_dra(_claim("big", mig="4g.40gb")))
        sched = scheduler(policy)
        assert place(sched, state, claim_pod("p1", "small")).ok
        outcomes[policy] = (
            devices_of(state, "small"),
            place(sched, state, claim_pod("p2", "big")).ok,
        )
    # kube-scheduler's order takes the first placement (memory slice 0), where 4g must start.
    assert outcomes["first-fit"] == (["gpu-0-mig-1g10gb-0"], False)
    small, big_fits = outcomes["fragmentation-aware"]
    assert big_fits and small != ["gpu-0-mig-1g10gb-0"]


def test_partitions_go_to_an_already_partitioned_gpu() -> None:
    state = _state(gpus=2)
    for name, gpus, mig in (("a", 0, "1g.10gb"), ("b", 0, "2g.20gb"), ("w", 1, "")):
        state.dra.add(decode_dra(_claim(name, gpus, mig)))
    sched = scheduler()
    assert place(sched, state, claim_pod("p1", "a")).ok
    assert place(sched, state, claim_pod("p2", "b")).ok
    parent = {devices_of(state, n)[0].split("-mig")[0] for n in ("a", "b")}
    assert len(parent) == 1  # both partitions on one GPU
    assert place(sched, state, claim_pod("p3", "w")).ok  # the other GPU stayed whole


def test_packing_score_sends_partitions_to_the_node_with_a_partitioned_gpu() -> None:
    import numpy as np

    from fairgpu.engine.plugins.dra_packing import DynamicResourcesPacking
    from fairgpu.engine.profile import Profile, ScoreRef
    from fairgpu.engine.scheduler import Scheduler

    state = dra_cluster(
        ["n1", "n2"], *nvidia_device_classes(), nvidia_slice("n1", 1), nvidia_slice("n2", 1)
    )
    for i in range(3):
        state.dra.add(decode_dra(_claim(f"s{i}", mig="2g.20gb")))
    profile = Profile(scores=[ScoreRef(name=DynamicResourcesPacking.name)], tie_break="fixed-rank")
    sched = Scheduler(profile, seed=0)
    preferred = sched.schedule(claim_pod("probe", "s2"), state).node
    assert preferred is not None
    # The first partition goes to the node the tie-break does not prefer.
    first = claim_pod("p0", "s0")
    other = np.ones(state.size, dtype=bool)
    other[preferred] = False
    result = sched.schedule(first, state, restrict=other)
    assert result.node is not None and result.node != preferred
    state.assign(first, result.node)
    state.dra.commit(first, result.node)
    # The next one follows it to the partitioned GPU instead of breaking the other node's.
    assert place(sched, state, claim_pod("p1", "s1")).node == result.node
