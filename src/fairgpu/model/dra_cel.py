"""CEL device selectors of DeviceClasses and requests, through a maintained CEL library.

Compiled once per expression text (``common-expression-language``, CEL-spec conformant);
quantities are integers, with the methods of Kubernetes' quantity library that DRA selectors
use registered as functions; versions are sortable keys with the semver library's functions
(:mod:`~fairgpu.model.dra_semver`). ``cel.bind(name, value, expr)`` (the bindings extension of
Kubernetes' DRA environment) is not in the library: it is rewritten, before compiling, into
the equivalent comprehension ``[value].map(name, expr)[0]`` -- ``value`` evaluated once
outside ``name``'s scope, ``expr`` with ``name`` bound to it, as ``cel.bind`` defines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import cel

from fairgpu.api.quantity import to_int
from fairgpu.model.dra_semver import SEMVER_FUNCTIONS


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
    # Versions are sortable keys, so the comparisons above serve them too.
    **SEMVER_FUNCTIONS,
}


# `device.attributes["domain"]` / `device.capacity["domain"]` with a literal domain.
_DOMAIN = re.compile(r"""device\s*\.\s*(attributes|capacity)\s*\[\s*(['"])(.*?)\2\s*\]""")


@lru_cache(maxsize=4096)
def compile_selector(expression: str) -> Any:
    """Compile a CEL device selector (cached by text); raises ``ValueError`` if invalid."""
    return cel.compile(rewrite_bind(expression))


_BIND = re.compile(r"(?<![\w.])cel\s*\.\s*bind\s*\(")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def rewrite_bind(expression: str) -> str:
    """``expression`` with every ``cel.bind(name, value, expr)`` (nested ones too) written as
    ``[value].map(name, expr)[0]``; ``ValueError`` for a malformed ``cel.bind``."""
    out: list[str] = []
    i = 0
    while True:
        m = _next_bind(expression, i)
        if m is None:
            out.append(expression[i:])
            return "".join(out)
        args, end = _call_args(expression, m.end())
        if len(args) != 3 or not _NAME.fullmatch(args[0].strip()):
            raise ValueError(f"cel.bind needs (variable name, value, expression): {expression!r}")
        name, value, body = (
            a.strip() for a in (args[0], rewrite_bind(args[1]), rewrite_bind(args[2]))
        )
        out.append(expression[i : m.start()])
        out.append(f"[{value}].map({name}, {body})[0]")
        i = end


def _unquoted(text: str, start: int) -> Iterator[int]:
    """The indexes, from ``start``, of the characters outside string literals."""
    i, quote = start, ""
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        else:
            yield i
        i += 1


def _next_bind(text: str, start: int) -> re.Match[str] | None:
    """The next ``cel.bind(`` at or after ``start`` outside string literals."""
    for i in _unquoted(text, start):
        m = _BIND.match(text, i)
        if m is not None:
            return m
    return None


def _call_args(text: str, start: int) -> tuple[list[str], int]:
    """The top-level arguments of the call whose ``(`` ends just before ``start``, and the
    index after its ``)``."""
    args, depth, begin = [], 0, start
    for i in _unquoted(text, start):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                args.append(text[begin:i])
                return args, i + 1
            depth -= 1
        elif c == "," and depth == 0:
            args.append(text[begin:i])
            begin = i + 1
    raise ValueError(f"cel.bind without its closing parenthesis: {text!r}")


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
