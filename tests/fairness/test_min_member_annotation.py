"""The ``fairgpu.io/min-member`` annotation: an integer >= 1, like a PodGroup's minMember.

Anything else is reported on the pod, naming the pod and the annotation, and the pod is not
placed (neither alone nor as a member); it is not retried in a loop (unresolvable).
"""

from __future__ import annotations

import pytest

from fairgpu.engine.engine import Engine
from fairgpu.tenancy import TenantResolver, parse_config
from tests.builders import cluster, node_info, pod_info

GROUP = {"fairgpu.io/pod-group": "job"}


def members(value: str, n: int = 2) -> list:
    return [
        pod_info(f"m{i}", "g", labels=GROUP, annotations={"fairgpu.io/min-member": value})
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("abc", "'abc' is not an integer"),
        ("2.5", "'2.5' is not an integer"),
        ("", "'' is not an integer"),
        ("0", "must be >= 1, as a PodGroup's minMember (got 0)"),
        ("-3", "must be >= 1, as a PodGroup's minMember (got -3)"),
    ],
)
def test_invalid_min_member_is_reported_on_each_pod(value: str, needle: str) -> None:
    state = cluster(node_info("n1", gpus=8))
    result = Engine().cycle(state, members(value), 0.0)
    assert result.binds == [] and not state.placements
    reasons = {u.pod.name: u for u in result.unschedulable}
    assert set(reasons) == {"m0", "m1"}
    for name, item in reasons.items():
        assert item.reason.startswith(f"Pod g/{name}: annotation fairgpu.io/min-member: ")
        assert needle in item.reason
        assert not item.resolvable


def test_invalid_annotation_does_not_fall_back_to_the_podgroup_object() -> None:
    resolver = TenantResolver(parse_config({}))
    resolver.set_pod_group("g", "job", 2)
    bad, good = members("zero")[0], members("2")[1]
    assert resolver.pod_group(bad) is None
    assert resolver.resolve(bad).error is not None
    ref = resolver.pod_group(good)
    assert ref is not None and (ref.key, ref.min_member) == ("g/job", 2)
    assert resolver.resolve(good).error is None


def test_valid_min_member_still_forms_a_gang() -> None:
    state = cluster(node_info("n1", gpus=8))
    result = Engine().cycle(state, members(" 2 "), 0.0)
    assert sorted(b.pod.name for b in result.binds) == ["m0", "m1"]


def test_annotation_on_a_pod_without_a_group_is_ignored() -> None:
    plain = pod_info("p", "g", annotations={"fairgpu.io/min-member": "abc"})
    result = Engine().cycle(cluster(node_info("n1", gpus=8)), [plain], 0.0)
    assert [b.pod.name for b in result.binds] == ["p"]
