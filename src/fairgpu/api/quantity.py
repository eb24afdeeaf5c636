"""Exact parsing of Kubernetes resource quantities (``100m``, ``1.5``, ``2Gi``, ``1e3``).

The grammar follows ``k8s.io/apimachinery/pkg/api/resource``: a signed decimal number followed by
a binary-SI suffix (Ki..Ei), a decimal-SI suffix (n, u, m, k, M, G, T, P, E) or a decimal
exponent (``e3``/``E-2``). Values are kept exact as :class:`fractions.Fraction` and rounded away
from zero when converted to integers, exactly as ``Quantity.Value()``/``MilliValue()`` do. As
there, a missing number reads as 0: ``-``, ``.``, ``m`` and ``Ki`` are all zero.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache

__all__ = ["QuantityError", "parse_quantity", "to_int", "to_milli"]

# apimachinery's parseQuantityString: an optional sign, digits, an optional fraction, then a
# suffix; every part may be empty, and a missing number reads as 0 ("-", ".", "Ki" are 0).
# fullmatch, not match with "$": "$" also matches before a trailing newline ("1\n").
_NUMBER = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)")
# Kubernetes refuses quantities whose magnitude needs more than this many bits.
_MAX_ABS = Fraction(2**63 - 1)


class QuantityError(ValueError):
    """The text is not a valid Kubernetes quantity."""


@lru_cache(maxsize=4096)
def _parse_text(text: str) -> Fraction:
    match = _NUMBER.fullmatch(text)
    if not text or not match:
        raise QuantityError(f"{text!r} is not a quantity (expected e.g. 500m, 2, 1.5Gi, 1e3)")
    sign, whole, fraction, suffix = match.groups()
    value = Fraction(f"{whole or 0}.{fraction or 0}")
    if suffix in _BINARY:
        value *= _BINARY[suffix]
    elif suffix in _DECIMAL:
        value *= _DECIMAL[suffix]
    else:
        exp = _EXPONENT.fullmatch(suffix)
        if not exp:
            raise QuantityError(f"{text!r} has an unknown suffix {suffix!r}")
        power = int(exp.group(1))
        if abs(power) > 30:
            raise QuantityError(f"{text!r}: exponent out of range")
        value *= Fraction(10) ** power
    if sign == "-":
        value = -value
    if abs(value) > _MAX_ABS:
        raise QuantityError(f"{text!r} is too large")
    return value


def parse_quantity(value: object) -> Fraction:
    """Parse a quantity given as text, int or float into an exact fraction.

    Raises :class:`QuantityError` for anything Kubernetes would refuse (bools, NaN, unknown
    suffixes, empty strings).
    """
    if isinstance(value, bool) or value is None:
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a finite quantity")
        return Fraction(str(value))
    if isinstance(value, str):
        return _parse_text(value)
    raise QuantityError(f"{value!r} is not a quantity (type {type(value).__name__})")


def _away_from_zero(value: Fraction) -> int:
    return math.ceil(value) if value >= 0 else -math.ceil(-value)


def to_int(value: object) -> int:
    """Quantity as a whole number, rounded away from zero (``Quantity.Value()``)."""
    return _away_from_zero(parse_quantity(value))


def to_milli(value: object) -> int:
    """Quantity in thousandths, rounded away from zero (``Quantity.MilliValue()``)."""
    return _away_from_zero(parse_quantity(value) * 1000)
