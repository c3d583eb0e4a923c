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

**Leans.** A strategy may spend its example's first choice on ``lean()``: 0, the plain example, or one of a few
*boundary leans*. A lean changes no value's probability in a random example, nor what any choice's value means;
it changes which value of each leaning choice is the *simplest* one (the value Hypothesis's zero-extension and its
shrinker move towards): under a lean, a feature switch's simplest value is "on" and a length's is its page
boundary. Why: in its first examples Hypothesis alternates a random example with the "simplest extension" of a
novel prefix - one random first choice, everything after it at its simplest
(``ConjectureRunner.generate_new_examples``). With the plain simplest (every option off, a one-token prompt at page
size 1) those examples expose almost nothing; with the lean as the first choice, most of them are a boundary-rich
example instead. Since the values mean the same under every lean, the shrinker can set the lean back to 0 without
changing the example, and does (0 is the smaller choice): a counterexample shrinks to the plain minimum, as
without leans.
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


LEANS = 3
"""Boundary leans a ``lean()`` choice draws from besides the plain 0: page-aligned, one short of a page, one past one
(a length leaning to a page boundary takes ``(0, -1, +1)[lean - 1]``), each with every feature switch on."""


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
    else through the public path. Under a lean (``lean()``, see the module), a choice given ``lean=`` shrinks to
    that value instead: ``integer(lo, hi, lean=v)`` to ``v`` (clamped), ``boolean(lean=True)`` and
    ``switches(items, lean=True)`` to on (``boolean(lean=(1, 3))``: under leans 1 and 3 only), ``pick(seq,
    lean=i)`` to ``seq[i]``, ``seed(lean=True)`` to the lean (a shuffled order). Without a lean, ``lean=`` changes
    nothing.
    """

    __slots__ = ("_boolean", "_integer", "draw", "fast", "leaning")

    def __init__(self, draw: Callable[..., Any], *, fast: bool = True) -> None:
        self.draw = draw
        self.leaning = 0
        prims = _engine_primitives(draw) if fast else None
        self.fast = prims is not None
        if prims is None:
            # the public path has no ``shrink_towards``: a lean changes what shrinks, never which value a choice is
            self._integer: Callable[..., int] = lambda lo, hi, weights=None, shrink_towards=0: draw(st.integers(lo, hi))
            self._boolean: Callable[..., bool] = lambda: draw(st.booleans())
        else:
            self._integer, self._boolean = prims

    def lean(self, ways: int = LEANS) -> int:
        """Draw this example's lean: 0 (plain) or ``1..ways``; the later choices given ``lean=`` shrink to it.
        Meant as an example's first choice (module docstring)."""
        self.leaning = self.integer(0, ways)
        return self.leaning

    def integer(self, lo: int, hi: int, *, lean: int | None = None) -> int:
        if lo > hi:
            raise ValueError(f"integer choice: lo={lo} must be <= hi={hi}")
        if lo == hi:
            return lo  # ``st.integers(k, k)`` makes no choice either
        towards = min(max(lean, lo), hi) if lean is not None and self.leaning else 0
        return self._integer(lo, hi, weights=_weights(lo, hi), shrink_towards=towards)

    def boolean(self, *, lean: bool | tuple[int, ...] = False) -> bool:
        if lean is False:
            return self._boolean()
        # a coin that can lean (``lean=True``: under any lean; a tuple: under those) is a 0/1 choice whose value means
        # the same under every lean - 1 is "on" - so that the shrinker can drop a lean without changing the example
        on = self.leaning in lean if isinstance(lean, tuple) else self.leaning > 0
        return self._integer(0, 1, shrink_towards=int(on)) == 1

    def pick(self, seq: Sequence[T], *, lean: int | None = None) -> T:
        if not seq:
            raise ValueError("pick from an empty sequence")
        return seq[self.integer(0, len(seq) - 1, lean=lean)]

    def seed(self, *, lean: bool = False) -> int:
        # no boundary weights: a seed's value means nothing, and the weights cost a third of a batch's choices
        return self._integer(0, SEED_MAX, shrink_towards=self.leaning if lean else 0)

    def switches(self, items: Sequence[T], *, lean: bool = False) -> list[T]:
        """Each of ``items`` on or off by its own coin (swarm testing: every combination as likely as any other,
        each item in half the draws), in an order one seed draws (seed 0: the given order). Shrinks to ``[]``
        (with ``lean`` under a lean: to all of them)."""
        on = [item for item in items if self.boolean(lean=lean)]
        if len(on) > 1:
            order = self.seed()
            if order:
                random.Random(order).shuffle(on)
        return on
