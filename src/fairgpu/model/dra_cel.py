"""CEL device selectors of DeviceClasses and requests, through a maintained CEL library.

Compiled once per expression text (``common-expression-language``, CEL-spec conformant);
quantities are integers, with the methods of Kubernetes' quantity library that DRA selectors
use registered as functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import cel

from fairgpu.api.quantity import to_int


def _cel_quantity(text: str) -> int:
    return to_int(text)


def _compare_to(a: int, b: int) -> int:
    return (a > b) - (a < b)


_CEL_FUNCTIONS: dict[str, Any] = {
    # Quantities are plain integers here; these are the quantity library's methods DRA
    # selectors use (compareTo, isGreaterThan, isLessThan, asInteger).
    "quantity": _cel_quantity,
    "compareTo": _compare_to,
    "isGreaterThan": lambda a, b: a > b,
    "isLessThan": lambda a, b: a < b,
    "asInteger": lambda a: a,
}


# `device.attributes["domain"]` / `device.capacity["domain"]` with a literal domain.
_DOMAIN = re.compile(r"""device\s*\.\s*(attributes|capacity)\s*\[\s*(['"])(.*?)\2\s*\]""")


@lru_cache(maxsize=4096)
def compile_selector(expression: str) -> Any:
    """Compile a CEL device selector (cached by text); raises ``ValueError`` if invalid."""
    return cel.compile(expression)


def domains_of(expression: str) -> tuple[tuple[str, str], ...]:
    """The (map, domain) pairs an expression indexes with a literal domain."""
    return tuple(sorted({(m.group(1), m.group(3)) for m in _DOMAIN.finditer(expression)}))


def _with_domains(
    device: Mapping[str, Any], domains: tuple[tuple[str, str], ...]
) -> Mapping[str, Any]:
    """``device`` where every domain the expression names exists: kube-scheduler's CEL maps
    answer an unknown domain with an empty map (so ``'x' in device.attributes['d']`` is false
    and not an error); the CEL library here needs the key present."""
    missing = [(m, d) for m, d in domains if d not in device[m]]
    if not missing:
        return device
    out = {**device, "attributes": dict(device["attributes"]), "capacity": dict(device["capacity"])}
    for m, d in missing:
        out[m][d] = {}
    return out


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled CEL device selector and where it came from (for error messages)."""

    expression: str
    where: str = field(compare=False)
    program: Any = field(compare=False, hash=False, repr=False)
    domains: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.domains:
            object.__setattr__(self, "domains", domains_of(self.expression))

    def evaluate(self, device: Mapping[str, Any]) -> bool:
        """True if the device (its CEL input: driver, attributes, capacity) is selected;
        raises ``ValueError`` on a CEL runtime error (kube-scheduler aborts the attempt then:
        a missing attribute is an error in CEL)."""
        device = _with_domains(device, self.domains)
        ctx = cel.Context(variables={"device": device}, functions=_CEL_FUNCTIONS)
        try:
            result = self.program.execute(ctx)
        except Exception as error:  # the CEL library raises KeyError, ValueError, TypeError...
            raise ValueError(f"{self.where}: CEL runtime error: {error}") from None
        if not isinstance(result, bool):
            raise ValueError(f"{self.where}: CEL expression must return bool, got {result!r}")
        return result
