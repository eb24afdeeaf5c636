"""Decayed usage history: a tenant that used much recently yields to one that did not.

An exponential moving average of each key's share over time with a configurable half-life,
advanced by the engine at every cycle with the cycle's ``now`` (no clock reads, no external
store). The share in effect between two cycles is the one measured at the earlier cycle.
"""

from __future__ import annotations

from collections.abc import Mapping


class UsageHistory:
    """Per-key time-decayed average share. ``half_life`` <= 0 disables it (always 0)."""

    def __init__(self, half_life: float) -> None:
        self.half_life = half_life
        self.average: dict[str, float] = {}
        self._last: float | None = None
        self._current: dict[str, float] = {}

    @property
    def enabled(self) -> bool:
        """True when a positive half-life is configured."""
        return self.half_life > 0

    def advance(self, now: float, shares: Mapping[str, float]) -> None:
        """Account the shares held since the previous call up to ``now``, then record
        ``shares`` as the ones in effect from ``now`` on."""
        if not self.enabled:
            return
        if self._last is not None and now > self._last:
            keep = 0.5 ** ((now - self._last) / self.half_life)
            for key in set(self.average) | set(self._current):
                held = self._current.get(key, 0.0)
                self.average[key] = self.average.get(key, 0.0) * keep + held * (1.0 - keep)
        if self._last is None or now >= self._last:
            self._last = now
        self._current = dict(shares)

    def value(self, key: str) -> float:
        """The decayed average share of ``key`` (0 for keys never seen)."""
        return self.average.get(key, 0.0)

    def set_current(self, shares: Mapping[str, float]) -> None:
        """Replace the shares in effect from the last :meth:`advance` on (e.g. after the
        cycle's own decisions), without accounting any time."""
        if self.enabled:
            self._current = dict(shares)
