"""Semantic versions in DRA CEL selectors, as Kubernetes' CEL semver library has them.

DRA device attributes of type ``version`` are semantic versions (2.0.0: ``MAJOR.MINOR.PATCH``,
an optional ``-prerelease`` and ``+build``), and selectors compare them with the semver library
of Kubernetes' CEL environment (1.33+): ``semver("1.2.3")``, ``semver("v1.2", true)``
(normalized), ``isSemver(s)``, ``<v>.isGreaterThan(<v>)``, ``isLessThan``, ``compareTo``,
``major()``, ``minor()``, ``patch()``.

The CEL library used here carries only plain values, so a version travels as a *key*: a string
that sorts, as text, in semantic-version precedence (numeric parts compared as numbers, a
release above its prereleases, prerelease identifiers numeric below alphanumeric, a shorter
identifier list first) and is equal for equal versions (build metadata ignored, as in
precedence). ``isGreaterThan``/``isLessThan``/``compareTo`` then compare keys as they compare
quantities. A key starts with a marker no attribute text carries.
"""

from __future__ import annotations

import re

__all__ = ["SEMVER_FUNCTIONS", "is_version_key", "semver_key"]

_MARK = "\x00semver\x00"
_WIDTH = 20  # digits of a uint64
_CORE = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)")
_IDENT = re.compile(r"[0-9A-Za-z-]+")


def _parse(text: str) -> tuple[tuple[int, int, int], tuple[str, ...]]:
    """Strict semantic version 2.0.0 (as github.com/blang/semver's Parse)."""
    body, _, build = text.partition("+")
    core, dash, pre = body.partition("-")
    m = _CORE.fullmatch(core)
    if m is None:
        raise ValueError(f"{text!r} is not a semantic version (MAJOR.MINOR.PATCH)")
    ids = tuple(pre.split(".")) if dash else ()
    for ident in ids:
        if not _IDENT.fullmatch(ident) or (ident.isdigit() and len(ident) > 1 and ident[0] == "0"):
            raise ValueError(f"{text!r}: invalid prerelease identifier {ident!r}")
    if build and not all(_IDENT.fullmatch(b) for b in build.split(".")):
        raise ValueError(f"{text!r}: invalid build metadata")
    major, minor, patch = (int(g) for g in m.groups())
    return (major, minor, patch), ids


def _normalize(text: str) -> str:
    """The semver library's normalization: no leading ``v``, missing minor and patch added,
    leading zeros of the numeric parts removed."""
    text = text.removeprefix("v")
    body, plus, build = text.partition("+")
    core, dash, pre = body.partition("-")
    parts = core.split(".")
    if len(parts) > 3 or not all(p.isdigit() for p in parts):
        return text
    parts = [str(int(p)) for p in parts] + ["0"] * (3 - len(parts))
    return ".".join(parts) + dash + pre + plus + build


def semver_key(text: str, normalize: bool = False) -> str:
    """The sortable key of version ``text`` (``ValueError`` if it is none)."""
    (major, minor, patch), ids = _parse(_normalize(text) if normalize else text)
    out = [_MARK, f"{major:0{_WIDTH}d}.{minor:0{_WIDTH}d}.{patch:0{_WIDTH}d}"]
    if not ids:
        out.append("\x02")  # a release ranks above all its prereleases
    else:
        out.append("\x01")
        out.append(
            "\x00".join(f"\x01{int(i):0{_WIDTH}d}" if i.isdigit() else f"\x02{i}" for i in ids)
        )
    return "".join(out)


def is_version_key(value: object) -> bool:
    """Is ``value`` a key made by :func:`semver_key`?"""
    return isinstance(value, str) and value.startswith(_MARK)


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        semver_key(text, normalize)
    except ValueError:
        return False
    return True


def _part(key: str, index: int) -> int:
    if not is_version_key(key):
        raise ValueError("major(), minor() and patch() apply to a semver")
    core = key[len(_MARK) : len(_MARK) + 3 * _WIDTH + 2]
    return int(core.split(".")[index])


#: The semver library's functions, for the CEL context (comparisons: see the module doc).
SEMVER_FUNCTIONS = {
    "semver": semver_key,
    "isSemver": _is_semver,
    "major": lambda key: _part(key, 0),
    "minor": lambda key: _part(key, 1),
    "patch": lambda key: _part(key, 2),
}
