"""Large orderings drawn from one seed, not element by element.

A permutation of a few hundred pages drawn value by value costs one Hypothesis choice per element: most of an
example's time went there, while the code under test only ever sees *some* fragmented order of distinct pages.
Drawing one 32-bit seed keeps every ordering reachable, makes each example cheap, and shrinks to seed 0: the
given order (ascending pages), the simplest layout to read in a counterexample.
"""

from __future__ import annotations

import random

import numpy as np

from pdverify.strategies._choices import Choices

SMALL = 32
"""Up to this many values, Python's sampler is the cheaper one."""


def distinct_sample(c: Choices, low: int, high: int, count: int, *, lean: bool = True) -> list[int]:
    """``count`` distinct integers of ``low..high`` in a seeded order (seed 0: ``low, low + 1, ...``; under a
    lean, with ``lean``, the simplest order is the lean's seeded one: fragmented)."""
    seed = c.seed(lean=lean)
    if not seed:
        return list(range(low, low + count))
    if count <= SMALL:
        return random.Random(seed).sample(range(low, high + 1), count)
    # numpy draws a long sample without a Python step per element (a row of a thousand pages)
    picked = np.random.Generator(np.random.PCG64(seed)).choice(high - low + 1, size=count, replace=False)
    return [v + low for v in picked.tolist()]
