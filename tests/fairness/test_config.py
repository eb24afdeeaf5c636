"""Tenancy config validation: good configs parse, bad ones name the field at fault."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgpu.api.errors import InvalidObjectError
from fairgpu.tenancy import load_config, parse_config
from fairgpu.tenancy.config import DIM_CPU, DIM_GPU, DIM_GPU_MEMORY, DIM_MEMORY

EXAMPLE = """
mode: dynamic
userLabel: example.com/owner
history: {halfLifeSeconds: 3600, weight: 0.25}
preemption: {enabled: true, minRuntimeSeconds: 60}
gang: {timeoutSeconds: 120}
starvation: {reserveAfterSeconds: 30, minGpus: 4, minGangPods: 8}
namespaceQuotas:
  sandbox: {requests.nvidia.com/gpu: 2}
queues:
  - {name: research, weight: 2}
  - name: vision
    parent: research
    namespaces: [vision, vision-dev]
    cohort: pool
    quota: {gpu: 8, cpu: "64", memory: 256Gi, gpuMemory: 80Gi}
    borrowingLimit: {gpuCores: 400}
    lendingLimit: {gpu: 2}
    preemption: {withinQueue: Never, reclaim: false, preemptible: false}
    users: {alice: 2}
"""


def base() -> dict[str, Any]:
    return {"queues": [{"name": "a", "weight": 2, "quota": {"gpu": 4}}, {"name": "b"}]}


def test_example_parses_to_the_documented_units(tmp_path: Any) -> None:
    path = tmp_path / "tenancy.yaml"
    path.write_text(EXAMPLE)
    cfg = load_config(path)
    vision = cfg.queue("vision")
    assert vision is not None and vision.parent == "research"
    nominal = vision.quota.vector()
    assert nominal[DIM_GPU] == 8000
    assert nominal[DIM_CPU] == 64000
    assert nominal[DIM_MEMORY] == 256 * 2**30
    assert nominal[DIM_GPU_MEMORY] == 80 * 1024
    assert vision.borrowing_limit.vector()[DIM_GPU] == 4000
    assert math.isinf(vision.borrowing_limit.vector()[DIM_CPU])
    assert cfg.user_label == "example.com/owner"
    assert cfg.history.half_life_seconds == 3600
    assert not vision.preemption.preemptible


def test_no_config_is_dynamic_with_namespace_queues() -> None:
    cfg = parse_config(None)
    assert cfg.mode == "dynamic" and cfg.namespace_queues and not cfg.queues


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d.update(bogus=1), "bogus"),
        (lambda d: d["queues"][0].update(wieght=1), "queues[0].wieght"),
        (lambda d: d["queues"][1].update(weight=0), "queues[1].weight"),
        (lambda d: d["queues"][0]["quota"].update(gpu=-1), "queues[0].quota.gpu"),
        (lambda d: d["queues"][0]["quota"].update(cpu="lots"), "queues[0].quota.cpu"),
        (lambda d: d["queues"][0]["quota"].update(gpuCores=100), "queues[0].quota.gpuCores"),
        (lambda d: d.update(mode="greedy"), "mode"),
        (lambda d: d["queues"].append({"name": "a"}), "queues[2].name"),
        (lambda d: d["queues"][1].update(parent="nope"), "queues[1].parent"),
        (lambda d: d["queues"][1].update(parent="b"), "queues[1].parent"),
        (
            lambda d: d["queues"].extend(
                [{"name": "c", "parent": "b"}, {"name": "e", "parent": "c"}]
            ),
            "queues[3].parent",
        ),
        (
            lambda d: (
                d["queues"][0].update(namespaces=["x"]),
                d["queues"][1].update(namespaces=["x"]),
            ),
            "queues[1].namespaces[0]",
        ),
        (
            lambda d: (d["queues"][0].update(namespaces=["x"]), d["queues"][1].update(parent="a")),
            "queues[0].namespaces",
        ),
        # A department carries a weight and a limit only: a quota or users set on it would
        # be ignored.
        (lambda d: d["queues"][1].update(parent="a"), "queues[0].quota"),
        (
            lambda d: (
                d["queues"][0].pop("quota"),
                d["queues"][0].update(users={"x": 1}),
                d["queues"][1].update(parent="a"),
            ),
            "queues[0].users",
        ),
        (lambda d: d.update(defaultQueue="zzz"), "defaultQueue"),
        (
            lambda d: d.update(namespaceQuotas={"ns": {"limits.gpu": 1}}),
            "namespaceQuotas.ns.limits.gpu",
        ),
        (lambda d: d.update(namespaceQuotas={"ns": {"pods": "-1"}}), "namespaceQuotas.ns.pods"),
        (lambda d: d.update(history={"halfLifeSeconds": -5}), "history.halfLifeSeconds"),
        (
            lambda d: d["queues"][0].update(preemption={"withinQueue": "Always"}),
            "queues[0].preemption.withinQueue",
        ),
        (lambda d: d["queues"][0].update(users={"bob": 0}), "queues[0].users"),
    ],
)
def test_bad_config_names_the_field(mutate: Any, path: str) -> None:
    data = base()
    mutate(data)
    with pytest.raises(InvalidObjectError) as info:
        parse_config(data)
    assert info.value.field == path, str(info.value)
    assert str(info.value).startswith("tenancy config: field ")


def test_a_department_with_a_quota_is_told_where_quotas_go() -> None:
    data = {"queues": [{"name": "d", "quota": {"gpu": 4}}, {"name": "a", "parent": "d"}]}
    with pytest.raises(InvalidObjectError, match="set quotas, borrowing and preemption on its"):
        parse_config(data)
    data["queues"][0] = {"name": "d", "weight": 3, "limit": {"gpu": 8}}
    assert parse_config(data).queue("d") is not None  # a weight and a limit it may carry


def test_yaml_that_is_not_a_mapping_is_rejected() -> None:
    with pytest.raises(InvalidObjectError, match="must be a mapping"):
        load_config("- a\n- b\n")


NUMERIC_FIELDS = ["weight"]
QUOTA_FIELDS = ["gpu", "gpuCores", "cpu", "memory", "gpuMemory"]


@settings(max_examples=150, deadline=None)
@given(
    index=st.integers(0, 1),
    section=st.sampled_from(["quota", "borrowingLimit", "lendingLimit"]),
    key=st.sampled_from(QUOTA_FIELDS),
    bad=st.one_of(
        st.integers(max_value=-1),
        st.text(alphabet="xyz!@ ", min_size=1, max_size=6),
        st.lists(st.integers(), max_size=2),
        st.just(float("nan")),
    ),
)
def test_any_bad_quota_value_is_reported_at_its_path(
    index: int, section: str, key: str, bad: Any
) -> None:
    data = {"queues": [{"name": "a"}, {"name": "b"}]}
    data["queues"][index][section] = {key: bad}
    with pytest.raises(InvalidObjectError) as info:
        parse_config(data)
    assert info.value.field == f"queues[{index}].{section}.{key}"


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(
                st.sampled_from(
                    ["mode", "queues", "name", "weight", "quota", "gpu", "x", "parent"]
                ),
                inner,
                max_size=3,
            ),
        ),
        max_leaves=12,
    )
)
def test_arbitrary_input_is_accepted_or_rejected_cleanly(data: Any) -> None:
    try:
        parse_config(data)
    except InvalidObjectError as error:
        assert error.field
