"""DRA rules where fairgpu once differed from kube-scheduler 1.34 (found by the differential
test in tests/integration/test_dra_vs_kube_scheduler.py), one test per rule."""

from __future__ import annotations

from typing import Any

from fairgpu.engine.framework import Code
from fairgpu.model.dra import decode_dra
from fairgpu.sim.workloads.nvidia_dra import DRIVER
from tests.engine.dra_builders import (
    GPU_CLASS,
    claim_doc,
    claim_pod,
    device_class,
    devices_of,
    dra_cluster,
    gpu,
    place,
    request,
    scheduler,
    slice_doc,
)
from tests.engine.engine_builders import node, pod

NUMA0 = f"device.attributes['{DRIVER}'].numa == 0"


def _held(name: str, device: str, pool: str = "n1", selector: Any = None) -> dict[str, Any]:
    """A claim allocated to ``device`` and reserved by a running pod."""
    if selector is None:
        match = {"key": "metadata.name", "operator": "In", "values": [pool]}
        selector = {"nodeSelectorTerms": [{"matchFields": [match]}]}
    result = {"request": "gpu", "driver": DRIVER, "pool": pool, "device": device}
    status = {
        "allocation": {"devices": {"results": [result]}, "nodeSelector": selector},
        "reservedFor": [{"resource": "pods", "name": "holder", "uid": f"holder-{name}"}],
    }
    return claim_doc(name, status=status)


def _rack_slice(*devices: dict[str, Any]) -> dict[str, Any]:
    doc = slice_doc("net", *devices, name="net")
    del doc["spec"]["nodeName"]
    rack = {"key": "rack", "operator": "In", "values": ["r1"]}
    doc["spec"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": [rack]}]}
    return doc


def test_unknown_attribute_domain_is_an_empty_map_not_an_error() -> None:
    absent = "!('x' in device.attributes['other.example.com'])"
    state = dra_cluster(["n1"], device_class(), slice_doc("n1", gpu("g0")))
    state.dra.add(decode_dra(claim_doc("c", request("gpu", GPU_CLASS, 1, absent))))
    assert place(scheduler(), state, claim_pod("p", "c")).ok


def test_cel_error_on_a_device_in_use_does_not_count() -> None:
    devices = slice_doc("n1", gpu("g0"), gpu("g1", numa=0))  # g0 has no numa attribute
    state = dra_cluster(["n1"], device_class(), devices, _held("busy", "g0"))
    state.dra.add(decode_dra(claim_doc("c", request("gpu", GPU_CLASS, 1, NUMA0))))
    result = place(scheduler(), state, claim_pod("p", "c"))
    assert result.ok and devices_of(state, "c") == ["g1"]


def test_cel_error_counts_only_where_kube_schedulers_search_reaches_it() -> None:
    # kube-scheduler evaluates selectors in device order and stops at the first solution:
    # a device without the attribute after the one it takes is never looked at ...
    after = slice_doc("n1", gpu("g0", numa=0), gpu("g1"))
    state = dra_cluster(["n1"], device_class(), after)
    state.dra.add(decode_dra(claim_doc("c", request("gpu", GPU_CLASS, 1, NUMA0))))
    assert place(scheduler(), state, claim_pod("p", "c")).ok
    # ... but one before it fails the attempt, whatever order our policy prefers.
    before = slice_doc("n1", gpu("g0"), gpu("g1", numa=0))
    state = dra_cluster(["n1"], device_class(), before)
    state.dra.add(decode_dra(claim_doc("c", request("gpu", GPU_CLASS, 1, NUMA0))))
    result = place(scheduler(), state, claim_pod("p", "c"))
    assert result.code == Code.ERROR and "CEL runtime error" in result.reason()


def test_cel_error_on_a_node_the_other_filters_exclude_does_not_count() -> None:
    slices = [slice_doc("n1", gpu("g0", numa=0)), slice_doc("n2", gpu("h0"))]
    state = dra_cluster(["n1", "n2"], device_class(), *slices)
    state.dra.add(decode_dra(claim_doc("c", request("gpu", GPU_CLASS, 1, NUMA0))))
    state.update_node(node("n1", labels={"pick": "yes"}))
    refs = [{"name": "c0", "resourceClaimName": "c"}]
    p = pod("p", requests={"cpu": "100m"}, nodeSelector={"pick": "yes"}, resourceClaims=refs)
    assert place(scheduler(), state, p).node_name == "n1"


def test_admin_access_counts_devices_in_use_as_candidates() -> None:
    devices = slice_doc("n1", gpu("g0"), gpu("g1"))
    state = dra_cluster(["n1"], device_class(), devices, _held("a", "g0"), _held("b", "g1"))
    state.dra.add(decode_dra(claim_doc("mon", request(count=2, admin=True))))
    result = place(scheduler("fragmentation-aware"), state, claim_pod("p", "mon"))
    assert result.ok and sorted(devices_of(state, "mon")) == ["g0", "g1"]


def test_a_device_admin_access_takes_is_not_given_to_another_claim_of_the_pod() -> None:
    state = dra_cluster(["n1"], device_class(), slice_doc("n1", gpu("g0")))
    state.dra.add(decode_dra(claim_doc("mon", request(admin=True))))
    state.dra.add(decode_dra(claim_doc("use", request())))
    both = claim_pod("p", "mon", "use")
    assert not place(scheduler(), state, both).ok  # kube-scheduler: one device, in flight
    assert place(scheduler(), state, claim_pod("p2", "use")).ok


def test_all_request_whose_constraint_cannot_hold_fails_the_attempt() -> None:
    devices = slice_doc("n1", gpu("g0", numa=0), gpu("g1", numa=1))
    state = dra_cluster(["n1", "n2"], device_class(), devices, slice_doc("n2", gpu("h0", numa=0)))
    same = [{"matchAttribute": f"{DRIVER}/numa"}]
    state.dra.add(decode_dra(claim_doc("c", request(mode="All"), constraints=same)))
    result = place(scheduler(), state, claim_pod("p", "c"))
    # n2 alone would do, but kube-scheduler's error on n1 ends the attempt.
    assert result.code == Code.ERROR and "constraint" in result.reason()


def test_all_request_is_checked_before_the_search() -> None:
    state = dra_cluster(["n1"], device_class(), slice_doc("n1", gpu("g0"), gpu("g1")))
    bad = request("all", GPU_CLASS, 0, NUMA0, mode="All")
    state.dra.add(decode_dra(claim_doc("c", request(count=3), bad)))
    result = place(scheduler(), state, claim_pod("p", "c"))
    assert result.code == Code.ERROR  # though the first request alone cannot fit


def test_pool_is_complete_only_with_all_its_slices_on_the_node() -> None:
    # One pool, a slice per node, resourceSliceCount 2: kube-scheduler sees one slice of
    # two from each node, so an All request there fails.
    slices = []
    for n in ("n1", "n2"):
        doc = slice_doc(n, gpu(f"{n}-g0"), name=f"{n}-slice")
        doc["spec"]["pool"] = {"name": "shared", "generation": 1, "resourceSliceCount": 2}
        slices.append(doc)
    state = dra_cluster(["n1", "n2"], device_class(), *slices)
    state.dra.add(decode_dra(claim_doc("all", request(mode="All"))))
    state.dra.add(decode_dra(claim_doc("one", request())))
    result = place(scheduler(), state, claim_pod("p", "all"))
    assert result.code == Code.ERROR and "being updated" in result.reason()
    assert place(scheduler(), state, claim_pod("p2", "one")).ok


def test_allocation_with_a_label_selector_admits_only_matching_nodes() -> None:
    rack = {"key": "rack", "operator": "In", "values": ["r1"]}
    selector = {"nodeSelectorTerms": [{"matchExpressions": [rack]}]}
    held = _held("shared", "g0", pool="net", selector=selector)
    state = dra_cluster(["n1", "n2"], device_class(), _rack_slice(gpu("g0")), held)
    state.update_node(node("n2", labels={"rack": "r1"}))
    result = place(scheduler(), state, claim_pod("p", "shared"))
    assert result.node_name == "n2"
    state.update_node(node("n2", labels={"rack": "r2"}))
    assert (
        "resourceclaim not available on the node"
        in place(scheduler(), state, claim_pod("p2", "shared")).reason()
    )


def test_allocation_from_a_label_selecting_slice_carries_its_selector() -> None:
    state = dra_cluster(["n1", "n2"], device_class(), _rack_slice(gpu("g0")), claim_doc("c"))
    state.update_node(node("n1", labels={"rack": "r1"}))
    state.update_node(node("n2", labels={"rack": "r1"}))
    sched = scheduler()
    first = place(sched, state, claim_pod("p1", "c"))
    assert first.ok
    claim = state.dra.claims["default/c"]
    assert claim.pin is not None
    rack = {"key": "rack", "operator": "In", "values": ["r1"]}
    status = state.dra.effective(claim, state)
    assert status is not None
    assert status.status()["nodeSelector"] == {"nodeSelectorTerms": [{"matchExpressions": [rack]}]}
    # A pod sharing the claim may go to either rack-r1 node, never to one outside the rack.
    state.update_node(node("n1", labels={"rack": "r2"}))
    assert place(sched, state, claim_pod("p2", "c")).node_name == "n2"
