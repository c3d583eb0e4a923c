"""How properties are declared: ``@prop(id, title, needs=..., **strategies)``.

``prop`` wraps the body in ``hypothesis.given`` (with an example counter underneath, so every run knows how
many examples executed), marks the test with the target functions it needs, and registers it in
``PROPERTIES`` so that ``pdverify check`` / ``pdverify mutate`` can list and call it directly.
"""

from __future__ import annotations

import functools
import hashlib
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import pytest
from hypothesis import assume, currently_in_test_context, event, example, given, reject
from hypothesis import strategies as st
from hypothesis.control import current_build_context

from pdverify.properties.releases import ALL_RELEASES, FROM_31173, FROM_35070, Contract

F = TypeVar("F", bound=Callable[..., Any])


class ExampleTimeout(BaseException):
    """One example ran past the per-example time limit (a hanging target). A ``BaseException`` so that
    Hypothesis stops at once instead of shrinking a hang."""


class _Counter(threading.local):
    examples: int = 0
    first_failure: int | None = None
    last_kwargs: dict[str, Any] | None = None
    """The arguments of the last failing example."""
    timeout: float = 0.0
    seed: int | None = None
    """``--pdverify-seed``: the seed of every property's generation (None: Hypothesis chooses)."""
    inputs: Any = hashlib.blake2b(digest_size=8)
    """A digest of the choice sequence of every example run: two runs with the same digest drew the same inputs."""
    known_findings: bool = True
    """Set recorded findings' failures aside (``pdverify.findings``); False: every failure is a plain failure."""
    matched: dict[str, int]
    """Per recorded finding: examples inside its signature."""
    reproduced: dict[str, int]
    """Per recorded finding: examples whose failure it explains (set aside, the run goes on)."""
    progress: Callable[[int], None] | None = None
    """Told the running count after every example (``pdverify check``'s progress line on a terminal)."""


EXAMPLES = _Counter()
"""Examples executed since the last ``reset_examples()`` (on this thread)."""
EXAMPLES.matched, EXAMPLES.reproduced = {}, {}


def count_example() -> None:
    EXAMPLES.examples += 1
    if currently_in_test_context():
        EXAMPLES.inputs.update(repr(current_build_context().data.choices).encode())
    if EXAMPLES.progress is not None:
        EXAMPLES.progress(EXAMPLES.examples)


def _known_defects(property_id: str, kwargs: dict[str, Any]) -> list[Any]:
    """The recorded findings of this property on this example's target whose signature the example matches."""
    if not EXAMPLES.known_findings or "target" not in kwargs:
        return []
    from pdverify.findings import recorded

    known = [d for d in recorded(property_id, kwargs["target"]) if d.shows(kwargs)]
    for d in known:
        EXAMPLES.matched[d.id] = EXAMPLES.matched.get(d.id, 0) + 1
    return known


def reset_examples() -> None:
    EXAMPLES.examples = 0
    EXAMPLES.first_failure = None
    EXAMPLES.last_kwargs = None
    EXAMPLES.inputs = hashlib.blake2b(digest_size=8)
    EXAMPLES.matched, EXAMPLES.reproduced = {}, {}


class Timer:
    """The per-example alarm: ``arm(seconds)`` delivers SIGALRM after ``seconds`` of wall time, ``arm(0)`` cancels.
    A test replaces ``TIMER`` with one it fires itself, so that no verdict depends on the machine's speed."""

    def arm(self, seconds: float) -> None:
        signal.setitimer(signal.ITIMER_REAL, seconds)


TIMER = Timer()


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise ``ExampleTimeout`` in the main thread when the block runs past ``seconds`` (0: no limit)."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise ExampleTimeout(f"an example ran past the {seconds:g} s per-example limit (the target hangs?)")

    previous = signal.signal(signal.SIGALRM, expire)
    TIMER.arm(seconds)
    try:
        yield
    finally:
        TIMER.arm(0)
        signal.signal(signal.SIGALRM, previous)


class ExampleClock:
    """The per-example limit started and stopped by hand, for examples that are not one function call (a
    state machine's run starts in its ``__init__`` and ends in its ``teardown``)."""

    def __init__(self) -> None:
        self._limit: Any = None

    def start(self) -> None:
        self.stop()
        self._limit = time_limit(EXAMPLES.timeout)
        self._limit.__enter__()

    def stop(self) -> None:
        if self._limit is not None:
            limit, self._limit = self._limit, None
            limit.__exit__(None, None, None)


def within_domain(condition: bool, what: str) -> None:
    """``hypothesis.assume(condition)`` inside a Hypothesis run; when a property body is replayed on its own (an
    exported regression) an input outside the release's domain is a skip naming ``what`` - never a warning."""
    if currently_in_test_context():
        assume(condition)
    elif not condition:
        pytest.skip(f"{what} is outside the target release's input domain")


def note_event(label: str) -> None:
    """``hypothesis.event`` inside a Hypothesis run; nothing when a property body is replayed on its own
    (an exported regression test)."""
    if currently_in_test_context():
        event(label)


__all__ = ["ALL_RELEASES", "FROM_31173", "FROM_35070", "PROPERTIES", "Contract", "PropertyInfo", "prop"]


@dataclass(frozen=True)
class PropertyInfo:
    id: str
    title: str
    needs: tuple[str, ...]
    test: Callable[..., Any]
    module: str
    contract: Contract = ALL_RELEASES

    @property
    def name(self) -> str:
        return self.test.__name__


PROPERTIES: dict[str, PropertyInfo] = {}


def examples(name: str, values: Iterable[Any]) -> Callable[[F], F]:
    """Pin each of ``values`` as an explicit ``@example(name=value)`` (boundaries, upstream regressions)."""

    def decorate(fn: F) -> F:
        for value in values:
            fn = example(**{name: value})(fn)
        return fn

    return decorate


def prop(
    id: str,
    title: str,
    *,
    needs: tuple[str, ...],
    timed: bool = True,
    contract: Contract = ALL_RELEASES,
    **strategies: st.SearchStrategy[Any],
) -> Callable[[F], F]:
    """Declare a property. The test takes ``target`` and ``device`` (pytest fixtures) plus the drawn data.

    The per-example time limit (``--timeout``) applies to each call of the body, which is one example for a
    property with strategies. A property that runs many examples inside one call (a state machine) passes
    ``timed=False`` and puts the limit around each of its own examples (``ExampleClock``). ``contract`` names
    the releases whose contract the property encodes (``pdverify list``); on a release outside it the property
    is not applicable.
    """

    if not isinstance(contract, Contract):
        raise TypeError(f"property {id}: contract must be a pdverify.properties.releases.Contract, got {contract!r}")

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def counted(*args: Any, **kwargs: Any) -> Any:
            count_example()
            known = _known_defects(id, kwargs)
            try:
                with time_limit(EXAMPLES.timeout if timed else 0):
                    return fn(*args, **kwargs)
            except BaseException as exc:
                if isinstance(exc, AssertionError):
                    defect = next((d for d in known if d.explains(kwargs, str(exc))), None)
                    if defect is not None:
                        EXAMPLES.reproduced[defect.id] = EXAMPLES.reproduced.get(defect.id, 0) + 1
                        reject()  # a recorded finding, reproduced: set aside, and the search goes on
                # Hypothesis replays the shrunk failing example last, so the last failing call's arguments
                # are the counterexample (a hang's are the hanging example's).
                EXAMPLES.last_kwargs = dict(kwargs)
                if EXAMPLES.first_failure is None:
                    EXAMPLES.first_failure = EXAMPLES.examples
                raise

        test: Any = given(**strategies)(counted) if strategies else counted
        test = pytest.mark.needs(*needs)(test)
        test.pdverify_property = id
        if id in PROPERTIES:
            raise ValueError(f"property id {id!r} declared twice ({PROPERTIES[id].name} and {fn.__name__})")
        PROPERTIES[id] = PropertyInfo(id, title, needs, test, fn.__module__, contract)
        return cast(F, test)

    return decorate
