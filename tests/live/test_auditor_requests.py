"""The auditor's own reading of a pod's requests (tests/live/auditor.py), written apart from
the scheduler's, agrees with it on what a bound pod holds: sidecars, pod-level requests and
in-place resizes under way -- but for a resize up that waits, which the scheduler counts as
taken already and the auditor (what the node's kubelet holds) does not."""

from __future__ import annotations

from typing import Any

import pytest

from fairgpu.api.objects import Pod, decode
from fairgpu.model.pod import pod_from_k8s
from tests.live.auditor import effective_requests


def ctr(name: str, cpu: str | None = None, **kw: Any) -> dict[str, Any]:
    return {"name": name, "resources": {"requests": {"cpu": cpu}} if cpu else {}, **kw}


def held(cpu: str, allocated: str) -> dict[str, Any]:
    return {"resources": {"requests": {"cpu": cpu}}, "allocatedResources": {"cpu": allocated}}


CASES = [
    pytest.param({"containers": [ctr("a", "1")]}, {}, 1.0, id="spec"),
    pytest.param(
        {"containers": [ctr("a", "1")], "initContainers": [ctr("s", "2", restartPolicy="Always")]},
        {"initContainerStatuses": [{"name": "s", **held("3", "3")}]},
        4.0,
        id="sidecar-resized-down-not-applied",
    ),
    pytest.param(
        {"containers": [ctr("a", "1")]},
        {"containerStatuses": [{"name": "a", **held("5", "4")}]},
        5.0,
        id="resize-down-not-applied",
    ),
    pytest.param(
        {"containers": [ctr("a", "6")]},
        {
            "containerStatuses": [{"name": "a", **held("2", "2")}],
            "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}],
        },
        2.0,
        id="infeasible-resize-up",
    ),
    pytest.param(
        {"containers": [ctr("a", "1"), ctr("b")], "resources": {"requests": {"cpu": "3"}}},
        {},
        3.0,
        id="pod-level",
    ),
]


def test_a_resize_up_that_waits_is_not_held_yet() -> None:
    raw = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"containers": [ctr("a", "2")], "nodeName": "n1"},
        "status": {
            "containerStatuses": [{"name": "a", **held("500m", "500m")}],
            "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Deferred"}],
        },
    }
    assert effective_requests(raw)["cpu"] == 0.5
    assert pod_from_k8s(decode(raw, Pod)).requests["cpu"] == 2000


@pytest.mark.parametrize(("spec", "status", "cpus"), CASES)
def test_the_auditor_counts_what_the_scheduler_counts(
    spec: dict[str, Any], status: dict[str, Any], cpus: float
) -> None:
    raw = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {**spec, "nodeName": "n1"},
        "status": status,
    }
    assert effective_requests(raw)["cpu"] == cpus
    assert pod_from_k8s(decode(raw, Pod)).requests["cpu"] == cpus * 1000
