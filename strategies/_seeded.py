"""Large orderings drawn from one seed, not element by element.

A permutation of a few hundred pages drawn value by value costs one Hypothesis choice per element: most of an
example's time went there, while the code under test only ever sees *some* fragmented order of distinct pages.
Drawing one 32-bit seed keeps every ordering reachable, makes each example cheap, and shrinks to seed 0: the
given order (ascending pages), the simplest layout to read in a counterexample.
"""

from __future__ import annotations

import random

from hypothesis import strategies as st

SEEDS = st.integers(0, 2**32 - 1)


def distinct_sample(draw: st.DrawFn, low: int, high: int, count: int) -> list[int]:
    """``count`` distinct integers of ``low..high`` in a seeded order (seed 0: ``low, low + 1, ...``)."""
    seed = draw(SEEDS)
    if not seed:
        return list(range(low, low + count))
    return random.Random(seed).sample(range(low, high + 1), count)
