"""The fragmentation-aware score's packed key orders as the tuple of its criteria."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from fairgpu.engine.plugins.lex_key import (
    GAP_SPAN,
    LEX_SPAN,
    capacity_level,
    gap_level,
    with_plan_tier,
)

KEYS = st.tuples(
    st.integers(0, 2),  # plan tier
    st.integers(0, 100),  # FGD's truncated score
    st.integers(-2 * LEX_SPAN, 2 * LEX_SPAN),  # capacity change (clipped to +-LEX_SPAN)
    st.integers(-GAP_SPAN, GAP_SPAN),  # gap balance (clipped to +-0.45 GAP_SPAN)
)


def _pack(key: tuple[int, int, int, int]) -> float:
    """As the score packs a sharing pod's per-device key (same operations, same order)."""
    tier, fgd, capacity, gap = (np.array([float(v)]) for v in key)
    top = with_plan_tier(fgd, tier) + capacity_level(capacity)
    return float((top + gap_level(gap))[0])


def _clipped(key: tuple[int, int, int, int]) -> tuple[int, int, int, float]:
    tier, fgd, capacity, gap = key
    return (
        tier,
        fgd,
        max(-LEX_SPAN, min(LEX_SPAN, capacity)),
        max(-0.45 * GAP_SPAN, min(0.45 * GAP_SPAN, gap)),
    )


@given(KEYS, KEYS)
def test_packed_keys_compare_as_tuples(
    a: tuple[int, int, int, int], b: tuple[int, int, int, int]
) -> None:
    ka, kb = _clipped(a), _clipped(b)
    pa, pb = _pack(a), _pack(b)
    assert (pa > pb) == (ka > kb)
    assert (pa == pb) == (ka == kb)


def test_each_level_changes_the_order_only_below_the_level_above() -> None:
    # The largest lower levels never reach one step of the level above.
    assert _pack((0, 100, LEX_SPAN, GAP_SPAN)) < _pack((1, 0, -LEX_SPAN, -GAP_SPAN))
    assert _pack((0, 0, LEX_SPAN, GAP_SPAN)) < _pack((0, 1, -LEX_SPAN, -GAP_SPAN))
    assert _pack((0, 0, 0, GAP_SPAN)) < _pack((0, 0, 1, -GAP_SPAN))
