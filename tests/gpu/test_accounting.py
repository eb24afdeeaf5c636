"""Device accounting never over-commits, whatever the sequence of placements and releases."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgpu.model.gpu import WHOLE
from tests.builders import cluster, node_info, pod_info
from tests.gpu.placement import scheduler

ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 3), st.integers(1, 1000), st.integers(0, 20000)),
        st.tuples(st.just("del"), st.integers(0, 50), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops, st.sampled_from(["fairgpu-frag", "fgd", "gpu-packing", "random", "best-fit"]))
def test_random_assign_release_keeps_devices_within_capacity(sequence, name) -> None:  # type: ignore[no-untyped-def]
    state = cluster(node_info("a", gpus=2), node_info("b", gpus=4), node_info("c", gpus=1))
    sched = scheduler(name, [{"cpu": 1000, "milli": 500, "count": 1, "weight": 1}])
    placed: list[str] = []
    for i, (op, count, milli, memory) in enumerate(sequence):
        if op == "add":
            pod = pod_info(f"p{i}", gpus=count, milli=milli if count == 1 else WHOLE)
            if count == 1 and milli < WHOLE and memory:
                pod = pod_info(f"p{i}", milli=milli, gpu_memory_mib=memory)
            result = sched.schedule(pod, state)
            if result.node is not None:
                assert len(result.devices) == count
                state.assign(pod, result.node, result.devices)
                placed.append(pod.uid)
        elif placed:
            state.release(placed.pop(count % len(placed)))
        n = state.size
        exists = state.device_exists[:n]
        assert np.all(state.device_milli_free[:n][exists] >= 0)
        assert np.all(state.device_milli_free[:n][exists] <= WHOLE)
        assert np.all(state.device_memory_free[:n][exists] >= 0)
        # The free arrays agree with the placements they summarise.
        used = np.zeros_like(state.device_milli_free[:n])
        for pl in state.placements.values():
            for d in pl.devices:
                used[pl.node, d] += pl.device_milli
        assert np.array_equal((WHOLE - used)[exists], state.device_milli_free[:n][exists])
