"""The ranked criteria of the fragmentation-aware scores as one lexicographic key.

The scheduler adds the plugins' weighted scores, so a plugin returns one float per node;
a score that ranks several criteria strictly one after another packs them into that float,
each level below one step of the level above. The levels, highest first:

================  ========================  ==========================  =================
level             values                    packed as                   packed range
================  ========================  ==========================  =================
plan tier         0, 1, 2                   ``PLAN_STEP * tier``        0, 128, 256
FGD score         integers 0..100           as is                       0..100 (step 1)
capacity change   integers, clipped         ``/ CAPACITY_DIVISOR``      within +-0.4
                  to +-``LEX_SPAN``                                     (step 4e-6)
gap balance       clipped to +-0.45         ``* GAP_STEP``              within +-4.5e-7
                  after ``/ GAP_SPAN``
================  ========================  ==========================  =================

Each level's packed range is narrower than half a step of the level above, so comparing
the packed floats compares the tuples lexicographically (tests/gpu/test_lex_key.py checks
it). The whole key stays within 0..357, below the 1000-weighted preference scores a policy
adds on top.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[Any]
# One tier of the packing plan (above FGD's 0..100 and everything ordered below it).
PLAN_STEP = 128.0
# Bound of the capacity-change level (milli-GPU of fragmentation change, far above any
# node's 8000 milli); divided so the level spans +-0.4, below one FGD point.
LEX_SPAN = 100_000
CAPACITY_DIVISOR = 2.5 * LEX_SPAN
# The gap-balance level (a change of a sum of squares of device counts) is divided by
# GAP_SPAN, clipped to +-0.45 and scaled by GAP_STEP: below one step of the capacity level.
GAP_SPAN = 100_000
GAP_STEP = 1e-6


def with_plan_tier(fgd_score: Array, tiers: Array) -> Array:
    """FGD's score below the packing plan's tier."""
    packed: Array = fgd_score + PLAN_STEP * tiers
    return packed


def capacity_level(change: Array) -> Array:
    """The (integer) capacity change, clipped and packed below one FGD point."""
    packed: Array = np.clip(change, -LEX_SPAN, LEX_SPAN) / CAPACITY_DIVISOR
    return packed


def gap_level(balance: Array) -> Array:
    """The gap balance, packed below one step of the capacity level."""
    packed: Array = np.clip(balance / GAP_SPAN, -0.45, 0.45) * GAP_STEP
    return packed
