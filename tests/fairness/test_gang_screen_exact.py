"""The gang screen only skips attempts that would fail: a cycle with it makes the same binds
and evictions as the same cycle trying every gang -- also now that it leaves out the pods of
queues the reclaim rule refuses for the gang's end state (every member it still needs)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairgpu.engine.actions import allocate
from fairgpu.engine.engine import CycleResult, Engine
from fairgpu.engine.policies import policy
from fairgpu.model.pod import PodInfo
from fairgpu.tenancy import parse_config
from tests.builders import cluster, node_info, pod_info

NODES = 6
GPUS = 4


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """Nodes filled by queues a and b (a two-node group of 4-GPU members, or pods of one or
    two GPUs), and gangs of g and b pending."""
    placed: list[tuple[PodInfo, str, float]] = []
    node = 0
    while node < NODES:
        queue = draw(st.sampled_from(["a", "b"]))
        started = float(draw(st.integers(0, 250)))
        if node + 1 < NODES and draw(st.booleans()):
            group = f"{queue}-run{node}"
            for k in range(2):
                member = pod_info(f"{group}-{k}", queue, gpus=GPUS, group=group, min_member=2)
                placed.append((member, f"n{node + k}", started))
            node += 2
            continue
        used = 0
        while used < GPUS and draw(st.booleans()):
            gpus = draw(st.integers(1, min(2, GPUS - used)))
            placed.append(
                (pod_info(f"{queue}-p{node}-{used}", queue, gpus=gpus), f"n{node}", started)
            )
            used += gpus
        node += 1
    pending: list[PodInfo] = []
    for j in range(draw(st.integers(1, 3))):
        queue = draw(st.sampled_from(["g", "g", "b"]))
        size = draw(st.integers(2, 3))
        gpus = draw(st.sampled_from([2, 4]))
        for k in range(size):
            pending.append(
                pod_info(
                    f"{queue}-gang{j}-{k}", queue, gpus=gpus, group=f"gang{j}", min_member=size
                )
            )
    weights = {q: draw(st.integers(1, 3)) for q in ("a", "b", "g")}
    band = draw(st.sampled_from([0.0, 0.05]))
    return {"placed": placed, "pending": pending, "weights": weights, "band": band}


def _cycle(case: dict[str, Any]) -> CycleResult:
    config = {
        "queues": [{"name": q, "weight": w} for q, w in case["weights"].items()],
        "preemption": {
            "reclaimMinRuntimeSeconds": 0,
            "minRuntimeSeconds": 0,
            "reclaimToleranceBand": case["band"],
        },
    }
    state = cluster(*(node_info(f"n{i}", gpus=GPUS) for i in range(NODES)), placed=case["placed"])
    # A placement policy without learned shapes: a failed attempt leaves nothing behind.
    engine = Engine(policy("best-fit"), tenancy=parse_config(config))
    return engine.cycle(state, list(case["pending"]), 300.0)


def _decisions(res: CycleResult) -> tuple[list[tuple[str, str]], list[str]]:
    binds = sorted((b.pod.uid, b.node_name) for b in res.binds)
    return binds, sorted(e.pod.uid for e in res.evictions)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=scenarios())
def test_the_screen_changes_no_decision(case: dict[str, Any]) -> None:
    screened = _decisions(_cycle(case))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(allocate, "_screen", lambda *args: None)  # every gang is tried
        tried = _decisions(_cycle(case))
    assert screened == tried
