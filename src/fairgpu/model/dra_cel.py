"""CEL device selectors of DeviceClasses and requests, through a maintained CEL library.

Compiled once per expression text (``common-expression-language``, CEL-spec conformant);
quantities are integers, with the methods of Kubernetes' quantity library that DRA selectors
use registered as functions.
"""

from __future__ import annotations

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


@lru_cache(maxsize=4096)
def compile_selector(expression: str) -> Any:
    """Compile a CEL device selector (cached by text); raises ``ValueError`` if invalid."""
    return cel.compile(expression)


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled CEL device selector and where it came from (for error messages)."""

    expression: str
    where: str = field(compare=False)
    program: Any = field(compare=False, hash=False, repr=False)

    def evaluate(self, device: Mapping[str, Any]) -> bool:
        """True if the device (its CEL input: driver, attributes, capacity) is selected;
        raises ``ValueError`` on a CEL runtime error (kube-scheduler aborts the attempt then:
        a missing attribute is an error in CEL)."""
        ctx = cel.Context(variables={"device": device}, functions=_CEL_FUNCTIONS)
        try:
            result = self.program.execute(ctx)
        except Exception as error:  # the CEL library raises KeyError, ValueError, TypeError...
            raise ValueError(f"{self.where}: CEL runtime error: {error}") from None
        if not isinstance(result, bool):
            raise ValueError(f"{self.where}: CEL expression must return bool, got {result!r}")
        return result
