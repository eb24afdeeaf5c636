"""Quantity parsing against the values Kubernetes' ``resource.Quantity`` gives."""

from __future__ import annotations

from fractions import Fraction

import pytest

from fairgpu.api.quantity import QuantityError, parse_quantity, to_int, to_milli
from fairgpu.model.pod import parse_resource

# (text, Value() rounded up, MilliValue() rounded up) as Kubernetes computes them.
VALID = [
    ("100m", 1, 100),
    ("1.5", 2, 1500),
    ("2", 2, 2000),
    ("0", 0, 0),
    ("2Gi", 2147483648, 2147483648000),
    ("1Ki", 1024, 1024000),
    ("1.5Gi", 1610612736, 1610612736000),
    ("500M", 500000000, 500000000000),
    ("1k", 1000, 1000000),
    ("1e3", 1000, 1000000),
    ("1E3", 1000, 1000000),
    ("1e-3", 1, 1),
    ("1E", 10**18, 10**21),
    ("0.1m", 1, 1),
    ("1u", 1, 1),
    ("1n", 1, 1),
    ("+5", 5, 5000),
    ("1.", 1, 1000),
    (".5", 1, 500),
    ("007", 7, 7000),
    ("1Mi", 1048576, 1048576000),
    ("12e2", 1200, 1200000),
]


@pytest.mark.parametrize(("text", "value", "milli"), VALID, ids=[v[0] for v in VALID])
def test_valid_quantities_match_kubernetes(text: str, value: int, milli: int) -> None:
    assert to_int(text) == value
    assert to_milli(text) == milli


def test_quantities_are_exact_fractions() -> None:
    assert parse_quantity("0.1m") == Fraction(1, 10000)
    assert parse_quantity("1.5Gi") == Fraction(3 * 2**29)
    assert parse_quantity("-1.5") == Fraction(-3, 2)


NUMBERS = [(2, 2, 2000), (1.5, 2, 1500), (0.25, 1, 250), (1000000, 1000000, 1000000000)]


@pytest.mark.parametrize(("value", "whole", "milli"), NUMBERS, ids=[repr(n[0]) for n in NUMBERS])
def test_json_numbers_are_quantities(value: float, whole: int, milli: int) -> None:
    # YAML/JSON manifests often carry bare numbers (``cpu: 2``, ``nvidia.com/gpu: 1``).
    assert to_int(value) == whole
    assert to_milli(value) == milli


INVALID = [
    "1.2.3",
    "10X",
    "",
    " 1",
    "1 ",
    "1\n",
    "\n",
    "2Gi\n",
    "1e3\n",
    "--1",
    "NaN",
    "nan",
    "inf",
    "1K",
    "1ki",
    "1e",
    "1e3.5",
    "1Gi3",
    "0x10",
    "1,5",
]


# apimachinery's ParseQuantity reads a missing number as 0 (checked against
# k8s.io/apimachinery v0.34.10): these are valid zero quantities, not errors.
ZERO = ["-", "+", ".", "-.", "0.", "-0", "m", "k", "Ki", "-Ki", "Mi", "e3", "+e5", "n", "E"]


@pytest.mark.parametrize("text", ZERO, ids=[repr(t) for t in ZERO])
def test_a_missing_number_reads_as_zero(text: str) -> None:
    assert to_milli(text) == 0 and to_int(text) == 0


@pytest.mark.parametrize(
    ("text", "milli", "whole"),
    [("-.5", -500, -1), ("-1.5m", -2, -1), ("1.5m", 2, 1), ("0.0001m", 1, 1), ("1e-10", 1, 1)],
)
def test_rounding_is_away_from_zero(text: str, milli: int, whole: int) -> None:
    assert to_milli(text) == milli and to_int(text) == whole


@pytest.mark.parametrize("text", INVALID, ids=[repr(t) for t in INVALID])
def test_invalid_quantities_are_refused(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), -float("inf"), True, None, [1], {"a": 1}],
    ids=["nan", "inf", "-inf", "bool", "None", "list", "dict"],
)
def test_non_quantity_types_are_refused(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)


RESOURCES = [
    ("cpu", "100m", 100),
    ("cpu", "0.1m", 1),
    ("cpu", 2, 2000),
    ("memory", "2Gi", 2147483648),
    ("memory", "1m", 1),
    ("nvidia.com/gpu", 2, 2),
    ("ephemeral-storage", "10G", 10**10),
]


@pytest.mark.parametrize(
    ("name", "value", "amount"), RESOURCES, ids=[f"{r[0]}={r[1]}" for r in RESOURCES]
)
def test_resources_in_scheduler_units(name: str, value: object, amount: int) -> None:
    assert parse_resource(name, value) == amount


@pytest.mark.parametrize(
    ("name", "value"),
    [("cpu", "-1"), ("memory", "-1m"), ("memory", "-0.5"), ("nvidia.com/gpu", -1)],
    ids=["cpu", "memory-rounds-to-zero", "memory-fraction", "gpu"],
)
def test_negative_resources_are_refused_even_when_they_round_to_zero(
    name: str, value: object
) -> None:
    with pytest.raises(QuantityError, match="negative"):
        parse_resource(name, value)


def test_amounts_beyond_int64_are_refused() -> None:
    with pytest.raises(QuantityError, match="too large"):
        parse_resource("cpu", "9e18")  # 9e21 milli-CPU does not fit the node arrays
    with pytest.raises(QuantityError, match="too large"):
        parse_resource("memory", 10**30)
    assert parse_resource("memory", "7Ei") == 7 * 2**60


@pytest.mark.parametrize("text", ["1e99", "99999999999999999999", "-1e40"])
def test_magnitudes_no_int64_can_hold_are_refused(text: str) -> None:
    # Kubernetes keeps such values as big decimals but Value() saturates; refusing them with a
    # clear message beats silently clamping a request.
    with pytest.raises(QuantityError):
        parse_quantity(text)
