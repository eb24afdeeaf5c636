"""A pod's requests as kube-scheduler 1.34 counts them: pod-level resources and in-place
resizes of running pods (fairgpu.model.pod_requests), decoded from v1 Pods."""

from __future__ import annotations

from typing import Any

import pytest

from fairgpu.api.errors import InvalidObjectError
from fairgpu.api.objects import Pod, decode
from fairgpu.model.pod import QOS_BURSTABLE, QOS_GUARANTEED, PodInfo, pod_from_k8s
from tests.api.test_pod_decode import ctr, sidecar

Gi = 2**30
Mi = 2**20
DEFAULT_MEMORY = 200 * Mi


def pod(spec: dict[str, Any], status: dict[str, Any] | None = None, node: str = "n1") -> PodInfo:
    spec = {**spec, **({"nodeName": node} if node else {})}
    raw = {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec, "status": status or {}}
    return pod_from_k8s(decode(raw, Pod))


def plain(info: PodInfo) -> dict[str, int]:
    return {k: v for k, v in info.requests.items() if k != "pods"}


# ---- pod-level resources --------------------------------------------------------------------


def test_pod_level_request_stands_for_the_containers_sum() -> None:
    info = pod(
        {
            "resources": {"requests": {"cpu": "3"}},
            "containers": [ctr("a", {"cpu": "1", "memory": "1Gi"}), ctr("b", {"cpu": "1"})],
            "overhead": {"cpu": "250m"},
        }
    )
    # cpu from the pod level (the containers' 2 do not add to it), memory from the
    # containers, the overhead on top of both.
    assert plain(info) == {"cpu": 3250, "memory": Gi}


def test_pod_level_limits_default_the_requests_as_the_api_server_does() -> None:
    info = pod(
        {
            "resources": {"limits": {"cpu": "4", "memory": "8Gi"}},
            "containers": [ctr("a", {"cpu": "500m"}), ctr("b")],
        }
    )
    # cpu: some container asks, so the pod-level request is their sum; memory: none does,
    # so it is the pod-level limit.
    assert plain(info) == {"cpu": 500, "memory": 8 * Gi}


def test_only_cpu_memory_and_hugepages_count_at_pod_level() -> None:
    info = pod(
        {
            "resources": {"requests": {"cpu": "2", "hugepages-2Mi": "4Mi", "example.com/x": "3"}},
            "containers": [ctr("a", {"cpu": "1"}, {"example.com/x": "1"})],
        }
    )
    assert plain(info) == {"cpu": 2000, "hugepages-2Mi": 4 * Mi, "example.com/x": 1}


def test_the_fit_score_counts_containers_the_node_load_the_pod_level() -> None:
    info = pod({"resources": {"requests": {"cpu": "2"}}, "containers": [ctr("a"), ctr("b")]})
    # kube-scheduler 1.34 scores the pod being placed on its containers (100m and 200 MiB
    # each by default), without its pod-level request ...
    assert info.scoring_cpu_memory == (200, 2 * DEFAULT_MEMORY)
    # ... but counts the pod-level request in a node's load, defaults only where nothing
    # names the resource (memory here).
    assert info.node_cpu_memory == (2000, 2 * DEFAULT_MEMORY)
    assert plain(info) == {"cpu": 2000}


def test_on_a_node_defaults_fill_only_a_resource_nobody_names() -> None:
    # Container a names cpu and the pod sets pod-level requests: on a node, container b
    # counts no default cpu; it does for the pod being placed.
    info = pod(
        {
            "resources": {"requests": {"memory": "1Gi"}},
            "containers": [ctr("a", {"cpu": "1"}), ctr("b")],
        }
    )
    assert info.scoring_cpu_memory == (1100, 2 * DEFAULT_MEMORY)
    assert info.node_cpu_memory == (1000, Gi)
    without = pod({"containers": [ctr("a", {"cpu": "1"}), ctr("b")]})
    assert without.scoring_cpu_memory == without.node_cpu_memory == (1100, 2 * DEFAULT_MEMORY)


ONE = {"cpu": "1", "memory": "1Gi"}


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({"requests": ONE, "limits": ONE}, QOS_GUARANTEED),
        ({"limits": ONE}, QOS_GUARANTEED),
        ({"limits": {"cpu": "1"}}, QOS_BURSTABLE),
        ({"requests": {"cpu": "1"}}, QOS_BURSTABLE),
    ],
)  # fmt: skip
def test_pod_level_resources_decide_the_qos_class(resources: dict[str, Any], expected: str) -> None:
    # The containers alone would make the pod BestEffort.
    assert pod({"resources": resources, "containers": [ctr("a")]}).qos == expected


# ---- in-place resize ------------------------------------------------------------------------


def status_of(
    cpu: str, allocated: str | None = None, reason: str = "", name: str = "a"
) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "resources": {"requests": {"cpu": cpu}}}
    if allocated is not None:
        entry["allocatedResources"] = {"cpu": allocated}
    out: dict[str, Any] = {"containerStatuses": [entry]}
    if reason:
        out["conditions"] = [{"type": "PodResizePending", "status": "True", "reason": reason}]
    return out


def test_a_pod_resized_down_holds_its_old_size_until_the_kubelet_applies_it() -> None:
    spec = {"containers": [ctr("a", {"cpu": "1", "memory": "1Gi"})]}
    assert plain(pod(spec, status_of("3", "3"))) == {"cpu": 3000, "memory": Gi}
    assert plain(pod(spec, status_of("1", "1"))) == {"cpu": 1000, "memory": Gi}


def test_a_deferred_resize_up_counts_the_new_size_an_infeasible_one_the_old() -> None:
    spec = {"containers": [ctr("a", {"cpu": "4"})]}
    assert plain(pod(spec, status_of("2", "2", reason="Deferred"))) == {"cpu": 4000}
    assert plain(pod(spec, status_of("2", "2", reason="Infeasible"))) == {"cpu": 2000}
    # The admitted amount counts even when the configured one lags behind it.
    assert plain(pod(spec, status_of("2", "3", reason="Infeasible"))) == {"cpu": 3000}


def test_status_counts_only_for_running_containers_and_bound_pods() -> None:
    spec = {
        "initContainers": [ctr("init", {"cpu": "1"}), sidecar("side", {"cpu": "1"})],
        "containers": [ctr("a", {"cpu": "1"})],
    }
    status = {
        "initContainerStatuses": [
            {"name": "init", "resources": {"requests": {"cpu": "5"}}},
            {"name": "side", "resources": {"requests": {"cpu": "2"}}},
        ],
        "containerStatuses": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
    }
    # The sidecar's configured 2 counts; a plain init container is never resized.
    assert plain(pod(spec, status)) == {"cpu": 3000}
    # A container without resources in its status, and a pod not bound, count the spec.
    assert plain(pod(spec, {"containerStatuses": [{"name": "a"}]})) == {"cpu": 2000}
    assert plain(pod(spec, status, node="")) == {"cpu": 2000}


def test_a_bad_quantity_in_the_status_names_the_field() -> None:
    spec = {"containers": [ctr("a", {"cpu": "1"})]}
    with pytest.raises(InvalidObjectError) as err:
        pod(spec, status_of("lots"))
    assert "status.containerStatuses[0].resources.requests.cpu" in str(err.value)
    with pytest.raises(InvalidObjectError) as err:
        pod({"resources": {"requests": {"memory": "-1"}}, "containers": [ctr("a")]})
    assert "spec.resources.requests.memory" in str(err.value)
