"""Fair-share arithmetic, usage history, and pod -> queue/user/pod-group resolution."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgpu.tenancy import TenantResolver, parse_config, weighted_max_min
from fairgpu.tenancy.fairshare import fair_shares, jain_index
from fairgpu.tenancy.history import UsageHistory
from tests.builders import pod_info


def test_max_min_caps_by_demand_and_redistributes() -> None:
    shares = weighted_max_min(8, {"a": 100, "b": 1, "c": 100}, {"a": 3})
    assert shares["b"] == 1
    assert shares["a"] == pytest.approx(3 * shares["c"])
    assert sum(shares.values()) == pytest.approx(8)


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.floats(0, 1000),
    demand=st.dictionaries(st.sampled_from("abcdef"), st.floats(0, 500), min_size=1),
    weight=st.dictionaries(st.sampled_from("abcdef"), st.floats(0.1, 10)),
)
def test_max_min_properties(
    capacity: float, demand: dict[str, float], weight: dict[str, float]
) -> None:
    shares = weighted_max_min(capacity, demand, weight)
    total = sum(shares.values())
    assert total <= capacity + 1e-6
    assert all(shares[k] <= demand[k] + 1e-6 for k in demand)
    if sum(demand.values()) >= capacity:
        assert total == pytest.approx(capacity, abs=1e-6)
    # Max-min: a queue left short has at least the weighted level of every other queue.
    for k in demand:
        if shares[k] < demand[k] - 1e-6:
            level = shares[k] / weight.get(k, 1.0)
            for j in demand:
                assert shares[j] / weight.get(j, 1.0) <= level + 1e-6


def test_two_level_shares_split_departments_first() -> None:
    cfg = parse_config(
        {
            "queues": [
                {"name": "x", "weight": 1},
                {"name": "y", "weight": 1},
                {"name": "x1", "parent": "x"},
                {"name": "x2", "parent": "x", "weight": 3},
                {"name": "y1", "parent": "y"},
            ]
        }
    )
    shares = fair_shares(cfg, 16, {"x1": 100, "x2": 100, "y1": 100})
    assert shares["y1"] == pytest.approx(8)
    assert shares["x1"] == pytest.approx(2) and shares["x2"] == pytest.approx(6)


def test_static_mode_fair_share_is_the_nominal_quota() -> None:
    cfg = parse_config({"mode": "static", "queues": [{"name": "a"}, {"name": "b"}]})
    assert fair_shares(cfg, 16, {"a": 10, "b": 1}, {"a": 4, "b": 12}) == {"a": 4, "b": 1}


def test_jain_index() -> None:
    assert jain_index([1, 1, 1, 1]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)


def test_history_halves_after_one_half_life() -> None:
    h = UsageHistory(half_life=100)
    h.advance(0, {"a": 1.0})
    h.advance(100, {"a": 0.0})
    assert h.value("a") == pytest.approx(0.5)
    h.advance(200, {"a": 0.0})
    assert h.value("a") == pytest.approx(0.25)
    assert h.value("never-seen") == 0.0
    off = UsageHistory(half_life=0)
    off.advance(0, {"a": 1.0})
    off.advance(100, {"a": 1.0})
    assert not off.enabled and off.value("a") == 0.0


def resolver(data: dict | None = None) -> TenantResolver:
    return TenantResolver(parse_config(data))


def test_default_every_namespace_is_a_queue_and_user_falls_back_to_namespace() -> None:
    r = resolver()
    t = r.resolve(pod_info("p", "team-a"))
    assert (t.queue, t.user, t.error) == ("team-a", "team-a", None)
    t = r.resolve(
        pod_info("q", "team-a", labels={"fairgpu.io/user": "ann", "fairgpu.io/queue": "z"})
    )
    assert (t.queue, t.user) == ("z", "ann")


def test_namespace_mapping_label_override_and_unknown_queue() -> None:
    r = resolver(
        {
            "userLabel": "corp/owner",
            "namespaceQueues": False,
            "queues": [
                {"name": "dept"},
                {"name": "vision", "parent": "dept", "namespaces": ["cv"]},
                {"name": "nlp", "parent": "dept"},
            ],
        }
    )
    t = r.resolve(pod_info("a", "cv", labels={"corp/owner": "bo"}))
    assert (t.queue, t.parent, t.user) == ("vision", "dept", "bo")
    assert r.resolve(pod_info("b", "cv", labels={"fairgpu.io/queue": "nlp"})).queue == "nlp"
    bad = r.resolve(pod_info("c", "cv", labels={"fairgpu.io/queue": "nope"}))
    assert bad.error and "'nope'" in bad.error and "does not exist" in bad.error
    parent = r.resolve(pod_info("d", "cv", labels={"fairgpu.io/queue": "dept"}))
    assert parent.error and "parent queue" in parent.error
    unmapped = r.resolve(pod_info("e", "elsewhere"))
    assert unmapped.error and "not mapped" in unmapped.error


def test_a_queue_that_lists_namespaces_admits_no_pod_labelled_in_from_elsewhere() -> None:
    """``vision`` belongs to namespace cv: a pod of ml that names it by label would spend
    vision's share, and is refused with the reason; ``open`` lists no namespaces and takes
    pods from anywhere."""
    r = resolver(
        {
            "queues": [
                {"name": "vision", "namespaces": ["cv"]},
                {"name": "nlp", "namespaces": ["ml"]},
                {"name": "open"},
            ]
        }
    )
    assert r.resolve(pod_info("a", "cv", labels={"fairgpu.io/queue": "vision"})).error is None
    stolen = r.resolve(pod_info("b", "ml", labels={"fairgpu.io/queue": "vision"}))
    assert stolen.error == (
        "queue 'vision' (label fairgpu.io/queue) admits pods of namespaces cv only, not 'ml'"
    )
    anywhere = r.resolve(pod_info("c", "ml", labels={"fairgpu.io/queue": "open"}))
    assert (anywhere.queue, anywhere.error) == ("open", None)


@pytest.mark.parametrize(
    ("labels", "annotations", "registered", "expected"),
    [
        ({"fairgpu.io/pod-group": "g"}, {"fairgpu.io/min-member": "4"}, None, ("ns/g", 4)),
        ({"scheduling.x-k8s.io/pod-group": "g"}, {}, 3, ("ns/g", 3)),
        ({}, {"scheduling.k8s.io/group-name": "g"}, 5, ("ns/g", 5)),
        ({"scheduling.k8s.io/group-name": "g"}, {}, None, ("ns/g", None)),
        ({}, {}, None, None),
    ],
)
def test_pod_group_conventions(
    labels: dict[str, str],
    annotations: dict[str, str],
    registered: int | None,
    expected: tuple[str, int | None] | None,
) -> None:
    r = resolver()
    if registered is not None:
        r.set_pod_group("ns", "g", registered)
    ref = r.pod_group(pod_info("m", "ns", labels=labels, annotations=annotations))
    assert (None if ref is None else (ref.key, ref.min_member)) == expected


def test_fair_share_series_follows_demand() -> None:
    from fairgpu.tenancy import fair_share_series

    cfg = parse_config({"queues": [{"name": "a", "weight": 3}]})
    series = fair_share_series(cfg, 8, {"a": [0, 10, 10], "b": [4, 0, 10]})
    assert series["a"] == pytest.approx([0, 8, 6])
    assert series["b"] == pytest.approx([4, 0, 2])
