"""Which written allocations a new one would double-book (:meth:`DraStore.conflicting`), and
the pre-bind plan of a preemptor whose devices its victim's claim still holds: its allocation
is written only after that claim is deallocated (``ClaimWrite.after``)."""

from __future__ import annotations

from typing import Any

from fairgpu.engine.engine import Engine
from fairgpu.kube.dra_binding import plan_for
from fairgpu.model.dra import DeviceResult, decode_dra
from fairgpu.sim.workloads.nvidia_dra import DRIVER, nvidia_device_classes, nvidia_slice
from tests.engine.dra_builders import (
    claim_doc,
    claim_pod,
    device_class,
    dra_cluster,
    gpu,
    place,
    scheduler,
    slice_doc,
)
from tests.engine.engine_builders import pod


def _allocated(name: str, *devices: str, admin: bool = False) -> dict[str, Any]:
    results = [
        {"request": "gpu", "driver": DRIVER, "pool": "n0", "device": d, "adminAccess": admin}
        for d in devices
    ]
    return claim_doc(name, status={"allocation": {"devices": {"results": results}}})


def _results(*devices: str) -> tuple[DeviceResult, ...]:
    return tuple(DeviceResult("gpu", DRIVER, "n0", d) for d in devices)


def _store(*claims: dict[str, Any]) -> Any:
    docs = [*nvidia_device_classes(), nvidia_slice("n0", gpus=2, mig=True), *claims]
    return dra_cluster(["n0"], *docs).dra


def _names(found: list[Any]) -> list[str]:
    return sorted(c.key for c in found)


def test_a_device_in_common_conflicts_and_a_claim_is_not_its_own_conflict() -> None:
    store = _store(_allocated("a", "gpu-0"), _allocated("b", "gpu-1"))
    assert _names(store.conflicting("default/new", _results("gpu-0"))) == ["default/a"]
    assert store.conflicting("default/a", _results("gpu-0")) == []


def test_a_whole_gpu_and_a_mig_partition_of_it_conflict_through_the_counters() -> None:
    store = _store(_allocated("part", "gpu-0-mig-1g10gb-3"), _allocated("other", "gpu-1"))
    assert _names(store.conflicting("default/new", _results("gpu-0"))) == ["default/part"]
    # Another partition on other memory slices of the same GPU shares it legitimately.
    assert store.conflicting("default/new", _results("gpu-0-mig-1g10gb-4")) == []
    # One that overlaps its memory slices does not.
    assert _names(store.conflicting("default/new", _results("gpu-0-mig-2g20gb-2"))) == [
        "default/part"
    ]


def test_admin_access_takes_nothing() -> None:
    store = _store(_allocated("watcher", "gpu-0", admin=True))
    assert store.conflicting("default/new", _results("gpu-0")) == []


def test_a_preemptors_plan_waits_for_its_victims_claim() -> None:
    """One GPU; a low-priority pod holds it through a claim; a high-priority pod evicts it and
    is placed on it in the same cycle. The victim's claim is still allocated in the store (its
    pod is still going): the preemptor's write names it in ``after``."""
    state = dra_cluster(["n1"], device_class(), slice_doc("n1", gpu("g0")))
    state.dra.add(decode_dra(claim_doc("low")))
    state.dra.add(decode_dra(claim_doc("high")))
    assert place(scheduler(), state, claim_pod("victim", "low")).ok
    refs = [{"name": "c0", "resourceClaimName": "high"}]
    high = pod("preemptor", requests={"cpu": "100m"}, priority=1000, resourceClaims=refs)
    result = Engine().cycle(state, [high], now=0.0)
    assert [e.pod.name for e in result.evictions] == ["victim"]
    assert [b.pod.name for b in result.binds] == ["preemptor"]
    plan = plan_for(state, high, "n1")
    assert plan is not None
    (write,) = plan.claims
    assert write.name == "high" and write.allocation is not None
    assert write.after == (("default/low", "uid-low"),)
    # A pod placed on a free GPU waits for nothing.
    state = dra_cluster(["n1"], device_class(), slice_doc("n1", gpu("g0")))
    state.dra.add(decode_dra(claim_doc("high")))
    assert Engine().cycle(state, [high], now=0.0).binds
    plan = plan_for(state, high, "n1")
    assert plan is not None and plan.claims[0].after == ()
