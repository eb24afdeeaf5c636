"""DynamicResources: kube-scheduler 1.34's structured-parameters allocation, one rule per test."""

from __future__ import annotations

import pytest

from fairgpu.engine.framework import Code
from fairgpu.model.dra import decode_dra
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
    template_doc,
)
from tests.engine.engine_builders import pod

TWO_GPUS = slice_doc("n1", gpu("g0", index=0, model="a100"), gpu("g1", index=1, model="h100"))


def test_pod_without_claims_is_not_touched() -> None:
    state = dra_cluster(["n1"], device_class())
    result = place(scheduler(), state, pod("plain", requests={"cpu": "1"}))
    assert result.ok
    assert state.dra.choices == {}


def test_exact_count_never_gives_a_device_twice() -> None:
    state = dra_cluster(["n1", "n2"], device_class(), TWO_GPUS, *(claim_doc(c) for c in "abc"))
    sched = scheduler()
    assert place(sched, state, claim_pod("p1", "a")).node_name == "n1"
    assert place(sched, state, claim_pod("p2", "b")).node_name == "n1"
    third = place(sched, state, claim_pod("p3", "c"))
    assert not third.ok
    assert third.reason() == "0/2 nodes are available: 2 cannot allocate all claims."
    assert sorted(devices_of(state, "a") + devices_of(state, "b")) == ["g0", "g1"]


def test_count_two_needs_two_free_devices() -> None:
    state = dra_cluster(["n1"], device_class(), TWO_GPUS, claim_doc("one"))
    state.dra.add(decode_dra(claim_doc("two", request(count=2))))
    sched = scheduler()
    assert place(sched, state, claim_pod("p1", "one")).ok
    assert not place(sched, state, claim_pod("p2", "two")).ok


def test_all_mode_takes_every_matching_device_and_needs_them_free() -> None:
    state = dra_cluster(["n1"], device_class(), TWO_GPUS, claim_doc("one"))
    state.dra.add(decode_dra(claim_doc("all", request(mode="All"))))
    state.dra.add(decode_dra(claim_doc("all2", request(mode="All"))))
    sched = scheduler()
    assert place(sched, state, claim_pod("p1", "all")).ok
    assert sorted(devices_of(state, "all")) == ["g0", "g1"]
    assert not place(sched, state, claim_pod("p2", "one")).ok
    assert not place(sched, state, claim_pod("p3", "all2")).ok
    none = f"device.attributes['{_drv()}'].index > 5"
    state.dra.add(decode_dra(claim_doc("nothing", request("gpu", GPU_CLASS, 1, none, mode="All"))))
    assert not place(sched, state, claim_pod("p4", "nothing")).ok  # All needs one device


def test_class_and_request_selectors_both_apply() -> None:
    only_h100 = device_class("h100", f"device.attributes['{_drv()}'].model == 'h100'")
    state = dra_cluster(["n1"], device_class(), only_h100, TWO_GPUS)
    state.dra.add(decode_dra(claim_doc("h", request(cls="h100"))))
    state.dra.add(decode_dra(claim_doc("i", request("gpu", GPU_CLASS, 1, _attr("index", "== 1")))))
    state.dra.add(decode_dra(claim_doc("h2", request(cls="h100"))))
    sched = scheduler()
    assert place(sched, state, claim_pod("p1", "h")).ok
    assert devices_of(state, "h") == ["g1"]
    # index 1 is g1, already taken: the request selector leaves nothing else.
    assert not place(sched, state, claim_pod("p2", "i")).ok
    assert not place(sched, state, claim_pod("p3", "h2")).ok


def test_match_attribute_keeps_devices_together() -> None:
    devices = [gpu(f"g{i}", index=i, numa=i // 2) for i in range(4)]
    state = dra_cluster(["n1"], device_class(), slice_doc("n1", *devices))
    pair = [request("a"), request("b")]
    same_numa = [{"requests": ["a", "b"], "matchAttribute": f"{_drv()}/numa"}]
    state.dra.add(decode_dra(claim_doc("first", request())))
    state.dra.add(decode_dra(claim_doc("pair", *pair, constraints=same_numa)))
    sched = scheduler("first-fit")
    assert place(sched, state, claim_pod("p1", "first")).ok  # takes g0 (numa 0)
    assert place(sched, state, claim_pod("p2", "pair")).ok
    assert sorted(devices_of(state, "pair")) == ["g2", "g3"]  # g1 alone on numa 0


def test_match_attribute_missing_attribute_fails() -> None:
    state = dra_cluster(["n1"], device_class(), TWO_GPUS)
    con = [{"matchAttribute": f"{_drv()}/numa"}]
    state.dra.add(decode_dra(claim_doc("c", request(), constraints=con)))
    assert not place(scheduler(), state, claim_pod("p", "c")).ok


def test_first_available_uses_the_first_alternative_that_fits() -> None:
    state = dra_cluster(["n1"], device_class(), TWO_GPUS, claim_doc("busy"))
    alts = {
        "name": "gpu",
        "firstAvailable": [
            {"name": "two", "deviceClassName": GPU_CLASS, "count": 2},
            {"name": "one", "deviceClassName": GPU_CLASS, "count": 1},
        ],
    }
    state.dra.add(decode_dra(claim_doc("flex", alts)))
    sched = scheduler()
    assert place(sched, state, claim_pod("p1", "busy")).ok
    assert place(sched, state, claim_pod("p2", "flex")).ok
    results = state.dra.claims["default/flex"].allocation
    assert results is not None and [r.request for r in results] == ["gpu/one"]


def test_admin_access_may_use_devices_in_use_and_takes_none() -> None:
    state = dra_cluster(["n1"], device_class(), TWO_GPUS)
    state.dra.add(decode_dra(claim_doc("all", request(mode="All"))))
    state.dra.add(decode_dra(claim_doc("admin", request(mode="All", admin=True))))
    state.dra.add(decode_dra(claim_doc("later", request())))
    state.dra.add(decode_dra(claim_doc("admin2", request(mode="All", admin=True))))
    sched = scheduler()
    assert place(sched, state, claim_pod("p1", "admin")).ok
    assert place(sched, state, claim_pod("p2", "all")).ok  # admin access took nothing
    assert place(sched, state, claim_pod("p3", "admin2")).ok  # and may use devices in use
    assert not place(sched, state, claim_pod("p4", "later")).ok
    results = state.dra.claims["default/admin2"].allocation
    assert results is not None and all(r.admin for r in results)


def test_shared_claim_pins_later_pods_to_its_node() -> None:
    slices = [slice_doc("n1", gpu("g0")), slice_doc("n2", gpu("h0"))]
    state = dra_cluster(["n1", "n2"], device_class(), *slices, claim_doc("shared"))
    sched = scheduler()
    first = place(sched, state, claim_pod("p1", "shared"))
    second = place(sched, state, claim_pod("p2", "shared"))
    assert first.ok and second.ok and first.node_name == second.node_name
    claim = state.dra.claims["default/shared"]
    assert claim.reserved_for == ("default/p1", "default/p2")
    assert claim.node == first.node_name


def test_claim_chosen_in_the_same_cycle_is_seen_before_it_is_written() -> None:
    state = dra_cluster(["n1", "n2"], device_class(), slice_doc("n1", gpu("g0")), claim_doc("a"))
    state.dra.add(decode_dra(claim_doc("b")))
    sched = scheduler()
    p1 = claim_pod("p1", "a")
    result = sched.schedule(p1, state)
    state.assign(p1, result.node or 0)  # placed, allocation not written yet (assume cache)
    assert not sched.schedule(claim_pod("p2", "b"), state).ok
    assert state.dra.decision(p1.uid, result.node or 0)[0].results[0].device == "g0"


def test_allocated_claim_on_another_node_is_not_available() -> None:
    status = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": _drv(), "pool": "n1", "device": "g0"}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                ]
            },
        }
    }
    slices = [slice_doc("n1", gpu("g0"))]
    state = dra_cluster(["n1", "n2"], device_class(), *slices, claim_doc("c", status=status))
    state.unschedulable[0] = True  # only n2 is left by the other filters
    result = place(scheduler(), state, claim_pod("p", "c"))
    assert "1 resourceclaim not available on the node" in result.reason()


def test_reserved_for_full_claim_is_in_use() -> None:
    refs = [{"resource": "pods", "name": f"x{i}", "uid": f"u{i}"} for i in range(256)]
    status = {
        "allocation": {"devices": {"results": []}},
        "reservedFor": refs,
    }
    state = dra_cluster(["n1"], device_class(), claim_doc("c", status=status))
    result = place(scheduler(), state, claim_pod("p", "c"))
    assert result.reason() == "resourceclaim in use"


def test_missing_claim_class_and_template_claim_reasons() -> None:
    state = dra_cluster(["n1"], device_class(), TWO_GPUS)
    sched = scheduler()
    assert (
        place(sched, state, claim_pod("p1", "nope")).reason()
        == 'resourceclaim.resource.k8s.io "nope" not found'
    )
    state.dra.add(decode_dra(claim_doc("odd", request(cls="missing"))))
    assert (
        place(sched, state, claim_pod("p2", "odd")).reason()
        == "request gpu: device class missing does not exist"
    )
    lone = claim_pod("p3", templates=("absent",))
    assert sched.schedule(lone, state).reason() == (
        'pod "default/p3": ResourceClaim not created yet (pod claim "t0" from template "absent")'
    )


def test_template_gives_each_pod_its_own_claim() -> None:
    state = dra_cluster(["n1"], device_class(), TWO_GPUS, template_doc("one-gpu"))
    sched = scheduler()
    pods = [claim_pod(f"p{i}", templates=("one-gpu",)) for i in range(3)]
    results = [place(sched, state, p) for p in pods]
    assert [r.ok for r in results] == [True, True, False]
    assert sorted(devices_of(state, "p0-t0") + devices_of(state, "p1-t0")) == ["g0", "g1"]


def test_cel_runtime_error_fails_the_attempt_with_the_field() -> None:
    state = dra_cluster(["n1"], device_class(), TWO_GPUS)
    state.dra.add(decode_dra(claim_doc("c", request("gpu", GPU_CLASS, 1, _attr("nosuch", "> 1")))))
    result = place(scheduler(), state, claim_pod("p", "c"))
    assert result.code == Code.ERROR
    assert "CEL runtime error" in result.reason()
    assert "spec.devices.requests[0].exactly.selectors[0].cel.expression" in result.reason()


@pytest.mark.parametrize("policy", ["first-fit", "fragmentation-aware"])
def test_both_policies_schedule_the_same_pods(policy: str) -> None:
    state = dra_cluster(["n1"], device_class(), TWO_GPUS, *(claim_doc(c) for c in "ab"))
    assert place(scheduler(policy), state, claim_pod("p1", "a")).ok
    assert place(scheduler(policy), state, claim_pod("p2", "b")).ok


def _drv() -> str:
    from fairgpu.sim.workloads.nvidia_dra import DRIVER

    return DRIVER


def _attr(name: str, test: str) -> str:
    return f"device.attributes['{_drv()}'].{name} {test}"


def test_capacity_selector_with_quantities() -> None:
    small = gpu("small", index=0)
    small["capacity"]["memory"]["value"] = "24Gi"
    state = dra_cluster(["n1"], device_class(), slice_doc("n1", small, gpu("big", index=1)))
    cap = f"device.capacity['{_drv()}'].memory.compareTo(quantity('40Gi')) >= 0"
    state.dra.add(decode_dra(claim_doc("c", request("gpu", GPU_CLASS, 1, cap))))
    assert place(scheduler(), state, claim_pod("p", "c")).ok
    assert devices_of(state, "c") == ["big"]


def test_decision_renders_status_allocation_as_kube_scheduler_writes_it() -> None:
    from fairgpu.api.dra import ResourceClaim
    from fairgpu.api.objects import decode
    from fairgpu.model.dra import claim_from_k8s

    state = dra_cluster(["n1"], device_class(), TWO_GPUS, claim_doc("c", request(count=2)))
    sched = scheduler("first-fit")
    p = claim_pod("p", "c")
    result = sched.schedule(p, state)
    assert result.node is not None
    (alloc,) = state.dra.decision(p.uid, result.node)
    status = alloc.status()
    assert status == {
        "devices": {
            "results": [
                {"request": "gpu", "driver": _drv(), "pool": "n1", "device": "g0"},
                {"request": "gpu", "driver": _drv(), "pool": "n1", "device": "g1"},
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
            ]
        },
    }
    # Read back as a claim, it is the same allocation, pinned to the same node.
    doc = claim_doc("c", request(count=2), status={"allocation": status})
    back = claim_from_k8s(decode(doc, ResourceClaim))
    assert back.allocation == alloc.results and back.node == "n1"


def test_slice_selecting_nodes_by_label_follows_label_changes() -> None:
    from tests.engine.engine_builders import node

    by_label = slice_doc("pool", gpu("g0"), name="shared")
    del by_label["spec"]["nodeName"]
    by_label["spec"]["nodeSelector"] = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
        ]
    }
    state = dra_cluster(["n1"], device_class(), by_label, claim_doc("c"))
    sched = scheduler()
    assert not sched.schedule(claim_pod("p", "c"), state).ok
    state.update_node(node("n1", labels={"rack": "r1"}))
    result = place(sched, state, claim_pod("p2", "c"))
    assert result.ok and devices_of(state, "c") == ["g0"]
    assert state.dra.claims["default/c"].node == ""  # not pinned: the slice is not per node
