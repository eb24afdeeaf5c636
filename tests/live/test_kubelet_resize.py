"""The fake kubelet's resize decisions (fairgpu.devcluster.kubelet_resize), without an API
server: applied when the node has room, deferred while the other pods' admitted amounts leave
none, infeasible beyond the node."""

from __future__ import annotations

from typing import Any

from fairgpu.devcluster import kubelet_resize as kr

NODE = {"cpu": "8", "memory": "16Gi"}


def running(uid: str, spec_cpu: str, held_cpu: str, phase: str = "Running") -> dict[str, Any]:
    container = {"name": "c", "resources": {"requests": {"cpu": spec_cpu, "memory": "1Gi"}}}
    status = {
        "name": "c",
        "resources": {"requests": {"cpu": held_cpu, "memory": "1Gi"}},
        "allocatedResources": {"cpu": held_cpu, "memory": "1Gi"},
    }
    return {
        "metadata": {"uid": uid},
        "spec": {"containers": [container]},
        "status": {"phase": phase, "containerStatuses": [status]},
    }


def test_a_resize_is_applied_deferred_or_refused_as_a_kubelet_decides() -> None:
    grow = running("a", "6", "2")  # asks 6 CPUs, runs with 2
    assert kr.resize_pending(grow)
    assert kr.decide(grow, NODE, [grow, running("b", "2", "2")]) == "actuate"
    # Another pod admitted with 4: 6 + 4 > 8 -- until it is gone (or finished).
    assert kr.decide(grow, NODE, [grow, running("b", "4", "4")]) == "Deferred"
    assert kr.decide(grow, NODE, [grow, running("b", "4", "4", "Succeeded")]) == "actuate"
    assert kr.decide(running("a", "9", "2"), NODE, []) == "Infeasible"


def test_the_status_after_a_resize_shows_the_spec_and_drops_the_pending_condition() -> None:
    pod = running("a", "1", "3")
    patch = kr.status_patch(pod, "actuate")
    shown = patch["containerStatuses"][0]
    assert shown["resources"]["requests"]["cpu"] == "1"
    assert shown["allocatedResources"]["cpu"] == "1"
    assert patch["conditions"] == [{"type": kr.PENDING, "$patch": "delete"}]
    pod["status"]["containerStatuses"] = patch["containerStatuses"]
    assert not kr.resize_pending(pod)
    deferred = kr.status_patch(pod, "Deferred")
    assert deferred == {
        "conditions": [{"type": kr.PENDING, "status": "True", "reason": "Deferred"}]
    }
