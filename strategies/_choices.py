"""Primitive choices for the domain strategies, drawn at the engine's own cost.

A ``draw(st.integers(lo, hi))`` inside ``@st.composite`` builds (or looks up) a strategy object, validates it and
opens a span around one integer choice: about 35 us a choice on this suite's machines, where the choice itself
costs about 12 us. With ~20 choices an example that overhead was most of an example's time (issue 14), so the
domain strategies draw their integers, booleans and indices through ``Choices``: straight on Hypothesis's
``ConjectureData`` (the same primitive ``st.integers`` / ``st.booleans`` / ``st.sampled_from`` end in, with the
same bounds and boundary weights, so each draw is still one choice that shrinks on its own towards its lower
bound), and through the public ``draw`` where the draw function is not bound to a ``ConjectureData`` with that
primitive (another engine, a future Hypothesis). Both paths give the same values from the same choices.

User-supplied strategies (registered request fields) are always drawn through the public ``draw``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from hypothesis import strategies as st

T = TypeVar("T")

SEED_MAX = 2**32 - 1


def _weights(lo: int, hi: int) -> dict[int, float] | None:
    # what ``st.integers(lo, hi)`` asks for: bounds and near-bounds more likely on a wide range
    if hi - lo > 127:
        return {lo: 2 / 128, lo + 1: 1 / 128, hi - 1: 1 / 128, hi: 2 / 128}
    return None


def _engine_primitives(draw: Callable[..., Any]) -> tuple[Callable[..., int], Callable[..., bool]] | None:
    data = getattr(draw, "__self__", None)
    integer = getattr(data, "draw_integer", None)
    boolean = getattr(data, "draw_boolean", None)
    if type(data).__name__ != "ConjectureData" or not callable(integer) or not callable(boolean):
        return None
    return integer, boolean


class Choices:
    """The choices of one example, over the ``draw`` of an ``@st.composite`` function.

    ``integer(lo, hi)`` is one choice in ``lo..hi`` (shrinks to ``lo``), ``boolean()`` one fair coin (shrinks to
    ``False``), ``pick(seq)`` one element by index (shrinks to ``seq[0]``), ``seed()`` one 32-bit seed (shrinks to
    0), ``switches(items)`` each item on or off by its own coin (shrinks to ``[]``), ``draw(strategy)`` anything
    else through the public path.
    """

    __slots__ = ("_boolean", "_integer", "draw", "fast")

    def __init__(self, draw: Callable[..., Any], *, fast: bool = True) -> None:
        self.draw = draw
        prims = _engine_primitives(draw) if fast else None
        self.fast = prims is not None
        if prims is None:
            self._integer: Callable[..., int] = lambda lo, hi, weights=None: draw(st.integers(lo, hi))
            self._boolean: Callable[..., bool] = lambda: draw(st.booleans())
        else:
            self._integer, self._boolean = prims

    def integer(self, lo: int, hi: int) -> int:
        if lo > hi:
            raise ValueError(f"integer choice: lo={lo} must be <= hi={hi}")
        if lo == hi:
            return lo  # ``st.integers(k, k)`` makes no choice either
        return self._integer(lo, hi, weights=_weights(lo, hi))

    def boolean(self) -> bool:
        return self._boolean()

    def pick(self, seq: Sequence[T]) -> T:
        if not seq:
            raise ValueError("pick from an empty sequence")
        return seq[self.integer(0, len(seq) - 1)]

    def seed(self) -> int:
        # no boundary weights: a seed's value means nothing, and the weights cost a third of a batch's choices
        return self._integer(0, SEED_MAX)

    def switches(self, items: Sequence[T]) -> list[T]:
        """Each of ``items`` on or off by its own coin (swarm testing: every combination as likely as any other,
        each item in half the draws), in an order one seed draws (seed 0: the given order). Shrinks to ``[]``."""
        on = [item for item in items if self.boolean()]
        if len(on) > 1:
            order = self.seed()
            if order:
                random.Random(order).shuffle(on)
        return on
