"""Orders that depend only on the objects themselves, so the simulator and the live scheduler
agree on them.

A simulation of a live snapshot decides what the live scheduler decides only if everything
that orders pods or nodes is a function of the objects, never of the order they happened to be
loaded in (YAML file order, API list order, watch event order):

- pods that arrive together are ordered by creation time, then ``namespace/name`` in natural
  order (``job-9`` before ``job-40``). The UID is not used: the API assigns it at random, and a
  replayed YAML file often has none.
- nodes get a tie-break rank from their name alone (see
  :mod:`fairgpu.engine.tie_break`), using :func:`name_hash`.
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Protocol

__all__ = ["name_hash", "natural_key", "pod_identity"]

_DIGITS = re.compile(r"\d+")


def _number(match: re.Match[str]) -> str:
    digits = match.group().lstrip("0") or "0"
    # Its length first (three digits: names are at most 253 characters), so that numbers
    # compare by value as plain text: 9 -> "0019", 40 -> "00240".
    return f"{len(digits):03d}{digits}"


# Cached: the same names are ordered again at every cycle while their pods wait.
@functools.lru_cache(maxsize=1 << 16)
def natural_key(text: str) -> str:
    """Sort key of ``text`` with runs of digits compared as numbers (``a-9`` < ``a-40``).

    A string, so that sorting thousands of pending pods compares plain text: every run of
    digits becomes its length and value; the text itself, after a NUL, settles names whose
    numbers are equal (``a-01`` and ``a-1``), so the order is total.
    """
    return _DIGITS.sub(_number, text) + "\0" + text


class _Pod(Protocol):
    created: float
    namespace: str
    name: str


def pod_identity(pod: _Pod) -> tuple[float, str, str]:
    """Creation time, then namespace and name in natural order: the order of pods that are
    otherwise equal (same priority), identical in the simulator and the live scheduler."""
    return pod.created, natural_key(pod.namespace), natural_key(pod.name)


def name_hash(name: str, seed: int) -> int:
    """A stable 63-bit hash of ``name`` under ``seed`` (the same in every process and run,
    unlike Python's ``hash``), for seeded orders that depend on names only."""
    digest = hashlib.blake2b(name.encode(), digest_size=8, key=str(seed).encode()).digest()
    return int.from_bytes(digest, "big") >> 1
