"""DRA selectors with semantic versions and ``cel.bind``, as Kubernetes' CEL environment for
DRA has them (semver library, bindings extension)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairgpu.api.errors import InvalidObjectError
from fairgpu.model.dra import decode_dra
from fairgpu.model.dra_cel import compile_selector, rewrite_bind
from fairgpu.model.dra_semver import semver_key
from tests.engine.dra_builders import (
    claim_doc,
    claim_pod,
    device_class,
    dra_cluster,
    place,
    request,
    scheduler,
    slice_doc,
)

# semver.org's precedence example, lowest first, then releases across digit counts.
PRECEDENCE = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "1.9.0",
    "1.10.0",
    "2.0.0",
    "10.0.0",
]


def test_keys_sort_in_semver_precedence() -> None:
    keys = [semver_key(v) for v in PRECEDENCE]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert semver_key("1.0.0+build.5") == semver_key("1.0.0")  # build metadata has no rank


@given(
    st.tuples(st.integers(0, 10**12), st.integers(0, 999), st.integers(0, 999)),
    st.tuples(st.integers(0, 10**12), st.integers(0, 999), st.integers(0, 999)),
)
def test_release_keys_compare_as_their_numbers(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    ka, kb = (semver_key(".".join(map(str, v))) for v in (a, b))
    assert (ka < kb) == (a < b) and (ka == kb) == (a == b)


@pytest.mark.parametrize("bad", ["1.0", "v1.0.0", "01.0.0", "1.0.0-01", "1.0.0-", "x"])
def test_invalid_versions_are_refused_unless_normalized(bad: str) -> None:
    with pytest.raises(ValueError):
        semver_key(bad)


def run(expression: str, device: dict[str, Any] | None = None) -> Any:
    """Evaluate ``expression`` through the selector path (functions registered)."""
    from fairgpu.model.dra_cel import Selector

    device = device or {"driver": "d", "attributes": {}, "capacity": {}}
    return Selector(expression, "test", compile_selector(expression)).evaluate(device)


@pytest.mark.parametrize(
    "expression",
    [
        'semver("1.10.0").isGreaterThan(semver("1.9.0"))',
        'semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))',
        'semver("1.2.3").compareTo(semver("1.2.3")) == 0',
        'semver("1.2.3").compareTo(semver("2.0.0")) == -1',
        'semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2',
        'semver("1.2.3").patch() == 3',
        'semver("v1.2", true) == semver("1.2.0")',
        'semver("01.01.01", true) == semver("1.1.1")',
        'isSemver("1.0.0") && !isSemver("hello") && !isSemver("v1.0")',
        'isSemver("v1.0", true)',
    ],
)
def test_the_semver_library_of_kubernetes_cel(expression: str) -> None:
    assert run(expression) is True


def test_a_version_attribute_compares_as_a_version() -> None:
    """Driver 1.10.0 is newer than 1.9.0 -- as text it would sort before it."""
    doc = slice_doc("n0", {"name": "gpu-0", "attributes": {"driverVersion": {"version": "1.10.0"}}})
    (device,) = decode_dra(doc).devices  # type: ignore[union-attr]
    newer = 'device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("1.9.0"))'
    assert run(newer, device.cel_input()) is True
    assert run(newer.replace("1.9.0", "1.10.1"), device.cel_input()) is False


def test_cel_bind_binds_a_value_for_its_expression() -> None:
    device = {
        "driver": "d",
        "attributes": {"dra.example.com": {"model": "a100", "index": 3}},
        "capacity": {},
    }
    bound = (
        'cel.bind(dra, device.attributes["dra.example.com"], dra.model == "a100" && dra.index > 2)'
    )
    assert run(bound, device) is True
    nested = "cel.bind(x, 2, cel.bind(y, x + 1, x * y == 6)) && cel.bind(x, 1, x == 1)"
    assert run(nested) is True
    shadow = "cel.bind(x, 1, cel.bind(x, x + 1, x == 2))"  # the inner value sees the outer x
    assert run(shadow) is True


def test_cel_bind_rewrite_leaves_strings_and_other_calls_alone() -> None:
    assert rewrite_bind('"cel.bind(a, b, c)" == s') == '"cel.bind(a, b, c)" == s'
    assert rewrite_bind("mycel.bind(1)") == "mycel.bind(1)"
    assert rewrite_bind('cel.bind(s, "a,b)", s.size() == 3)') == '["a,b)"].map(s, s.size() == 3)[0]'


@pytest.mark.parametrize("bad", ["cel.bind(1, 2, 3)", "cel.bind(x, 2)", "cel.bind(x, 2, x"])
def test_malformed_cel_bind_names_the_object_and_field(bad: str) -> None:
    with pytest.raises(InvalidObjectError, match=r"selectors\[0\]\.cel\.expression"):
        decode_dra(device_class("bad", bad))


def test_a_claim_selecting_by_driver_version_gets_the_newer_gpu() -> None:
    """Two GPUs on one node, drivers 1.9.0 and 1.10.0; a request for a driver newer than
    1.9.5 gets gpu-new (string comparison would pick none)."""

    def dev(name: str, version: str) -> dict[str, Any]:
        return {"name": name, "attributes": {"driverVersion": {"version": version}}}

    state = dra_cluster(
        ["n0"],
        device_class(),
        slice_doc("n0", dev("gpu-old", "1.9.0"), dev("gpu-new", "1.10.0")),
        claim_doc(
            "c",
            request(
                "gpu",
                "gpu.example.com",
                1,
                'cel.bind(d, device.attributes["gpu.nvidia.com"], '
                'd.driverVersion.isGreaterThan(semver("1.9.5")))',
            ),
        ),
    )
    assert place(scheduler(), state, claim_pod("p", "c")).ok
    (result,) = state.dra.claims["default/c"].allocation or ()
    assert result.device == "gpu-new"
