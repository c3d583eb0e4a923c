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
from hypothesis.errors import UnsatisfiedAssumption

from pdverify.properties.releases import ALL_RELEASES, FROM_31173, FROM_35070, Contract

F = TypeVar("F", bound=Callable[..., Any])


class ExampleTimeout(BaseException):
    """One example ran past the per-example time limit (a hanging target). A ``BaseException`` so that
    Hypothesis stops at once instead of shrinking a hang."""


class _Counter(threading.local):
    examples: int = 0
    outside: int = 0
    """Examples outside the target release's input domain (``within_domain``: a later release's feature, a
    configuration the release cannot take): discarded, not verdicts; counted within ``examples``."""
    refused: int = 0
    """Examples whose configuration the target's server refuses (``targets.ServerRefuses``): discarded, not
    verdicts; counted within ``examples``."""
    refusal: str = ""
    """The server's reason for the last refused example."""
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
    clauses: dict[str, Clause]
    """The running property's clauses, by name (set for each example)."""
    release: str | None = None
    """The running example's target release (None: not a release; every clause applies)."""
    current_clause: str = ""
    """The clause whose assertions the body is checking now: the last one ``applies`` let in."""
    clause_checked: dict[str, int]
    """Per clause: examples that checked it."""
    clause_known: dict[str, int]
    """Per clause: examples whose failure there a recorded finding explained."""
    failed_clause: str | None = None
    """The clause of the last failing example (the counterexample's)."""
    clause_seen: set[str]
    """The clauses the running example has checked so far (each counts once an example)."""
    suppressed: set[str]
    """The clauses of the running example where a recorded finding's failure was set aside: the example is run
    again without them, so that its other clauses are still checked past a known defect."""


EXAMPLES = _Counter()
"""Examples executed since the last ``reset_examples()`` (on this thread)."""
EXAMPLES.matched, EXAMPLES.reproduced = {}, {}
EXAMPLES.clauses, EXAMPLES.clause_checked, EXAMPLES.clause_known, EXAMPLES.clause_seen = {}, {}, {}, set()
EXAMPLES.suppressed = set()


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
    EXAMPLES.examples = EXAMPLES.outside = EXAMPLES.refused = 0
    EXAMPLES.refusal = ""
    EXAMPLES.first_failure = None
    EXAMPLES.last_kwargs = None
    EXAMPLES.inputs = hashlib.blake2b(digest_size=8)
    EXAMPLES.matched, EXAMPLES.reproduced = {}, {}
    EXAMPLES.clause_checked, EXAMPLES.clause_known, EXAMPLES.failed_clause = {}, {}, None


@dataclass(frozen=True)
class Clause:
    """One assertion clause of a property, with the contract it encodes: a property bundles clauses whose contracts
    may have begun in different releases, and each is checked wherever its own contract applies."""

    name: str
    contract: Contract = ALL_RELEASES
    title: str = ""

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ValueError(f"clause name must be a non-empty identifier, got {self.name!r}")
        if not isinstance(self.contract, Contract):
            raise TypeError(f"clause {self.name}: contract must be a Contract, got {self.contract!r}")


MAIN = "main"
"""The clause of a property declared without clauses: all of its assertions, under its ``contract``."""


def applies_to(clause: Clause, release: str | None) -> bool:
    """Whether ``clause`` is checked on ``release`` in the running example: its contract applies and no recorded
    finding's failure in it was set aside on this input already."""
    return clause.contract.not_applicable(release) is None and clause.name not in EXAMPLES.suppressed


def applies(name: str) -> bool:
    """Whether clause ``name`` of the running property applies to the example's target release; a property body
    guards each clause's assertions with it (``if applies("seq_lens_cpu"): ...``). A clause that applies becomes the
    current one: a failure that follows is that clause's (the report shows each clause's status)."""
    clause = EXAMPLES.clauses.get(name)
    if clause is None:
        raise KeyError(f"no clause {name!r} declared for this property (declared: {', '.join(EXAMPLES.clauses)})")
    if not applies_to(clause, EXAMPLES.release):
        return False
    EXAMPLES.current_clause = name
    if name not in EXAMPLES.clause_seen:
        EXAMPLES.clause_seen.add(name)
        EXAMPLES.clause_checked[name] = EXAMPLES.clause_checked.get(name, 0) + 1
    return True


def clause_statuses(info: PropertyInfo, release: str | None, outcome: str) -> list[dict[str, Any]]:
    """Each clause of ``info`` after a run on ``release`` whose property status was ``outcome``: ``not applicable``
    (its contract excludes the release; the reason in ``why``), ``failed`` (the counterexample's clause), ``known
    defect`` (a recorded finding's failures, set aside), ``passed`` (checked by at least one example) or ``not
    reached`` (it applies, but no example got to it)."""
    out = []
    for c in info.clauses:
        why = c.contract.not_applicable(release)
        checked = EXAMPLES.clause_checked.get(c.name, 0)
        if why:
            status = "not applicable"
        elif outcome in ("failed", "error", "timeout", "flaky") and EXAMPLES.failed_clause == c.name:
            status = outcome
        elif EXAMPLES.clause_known.get(c.name):
            status = "known defect"
        elif checked:
            status = "passed"
        else:
            status = "not reached" if outcome != "not applicable" else "not applicable"
        out.append({"name": c.name, "title": c.title, "contract": str(c.contract), "status": status,
                    "examples": checked, "why": why or ""})  # fmt: skip
    return out


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


def all_discarded(examples: int, outside: int, refused: int) -> bool:
    """Every one of ``examples`` (at least one) was discarded - ``outside`` the release's domain or ``refused`` by its
    server: the property has no verdict (Hypothesis gives up, or stops with no example run)."""
    return 0 < examples == outside + refused


def discarded_message(examples: int, outside: int, refused: int, refusal: str) -> str:
    """Why a property that ran ``examples`` has no verdict: every one was discarded (``outside`` the target release's
    domain, ``refused`` by its server for ``refusal``)."""
    parts = [f"{outside} outside the release's input domain"] if outside else []
    parts += [f"{refused} a configuration the server refuses to start with: {refusal}"] if refused else []
    return f"every one of {examples} examples was discarded ({'; '.join(parts)})"


def within_domain(condition: bool, what: str, *, counted: bool = True) -> None:
    """``hypothesis.assume(condition)`` inside a Hypothesis run, the discarded example counted ``outside`` (unless
    the caller counts it itself: ``counted=False``); when a property body is replayed on its own (an exported
    regression) an input outside the release's domain is a skip naming ``what`` - never a warning."""
    if currently_in_test_context():
        if not condition and counted:
            EXAMPLES.outside += 1
        assume(condition)
    elif not condition:
        pytest.skip(f"{what} is outside the target release's input domain")


def within_release(*cases: Any) -> None:
    """``within_domain`` for the input features of ``cases`` (``input_features()``) that the target's release does not
    have: an explicit example or a drawn input that uses a later release's feature is outside an earlier release's
    domain, never a failure there."""
    from pdverify.properties.releases import DOMAIN, features_lacking

    for case in cases:
        missing = features_lacking([case], DOMAIN.features)
        within_domain(not missing, ", ".join(missing))


def note_event(label: str) -> None:
    """``hypothesis.event`` inside a Hypothesis run; nothing when a property body is replayed on its own
    (an exported regression test)."""
    if currently_in_test_context():
        event(label)


__all__ = [
    "ALL_RELEASES",
    "FROM_31173",
    "FROM_35070",
    "PROPERTIES",
    "Clause",
    "Contract",
    "PropertyInfo",
    "applies",
    "prop",
]


@dataclass(frozen=True)
class PropertyInfo:
    id: str
    title: str
    needs: tuple[str, ...]
    test: Callable[..., Any]
    module: str
    contract: Contract = ALL_RELEASES
    """A property without clauses: its one contract. With clauses: every release (each clause has its own)."""
    clauses: tuple[Clause, ...] = ()
    """The property's assertion clauses, each with its contract (one ``main`` clause when none was declared)."""

    @property
    def name(self) -> str:
        return self.test.__name__

    def not_applicable(self, release: str | None) -> str | None:
        """Why the property does not apply to ``release``: only when none of its clauses does (None: it applies)."""
        reasons = [c.contract.not_applicable(release) for c in self.clauses]
        if any(r is None for r in reasons):
            return None
        if len(reasons) == 1:
            return reasons[0]
        return (
            "not applicable (every clause: "
            + "; ".join(
                f"{c.name} {str(r).removeprefix('not applicable ')}" for c, r in zip(self.clauses, reasons, strict=True)
            )
            + ")"
        )

    def contracts(self) -> str:
        """The contracts it encodes, as ``pdverify list`` shows them."""
        if len(self.clauses) == 1:
            return str(self.clauses[0].contract)
        return "; ".join(f"{c.name}: {c.contract}" for c in self.clauses)


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
    clauses: tuple[Clause, ...] = (),
    **strategies: st.SearchStrategy[Any],
) -> Callable[[F], F]:
    """Declare a property. The test takes ``target`` and ``device`` (pytest fixtures) plus the drawn data.

    The per-example time limit (``--timeout``) applies to each call of the body, which is one example for a
    property with strategies. A property that runs many examples inside one call (a state machine) passes
    ``timed=False`` and puts the limit around each of its own examples (``ExampleClock``). ``contract`` names
    the releases whose contract the property encodes (``pdverify list``); on a release outside it the property
    is not applicable. A property whose assertions encode contracts that began in different releases declares
    ``clauses`` instead, each with its own contract, and guards each clause's assertions with ``applies(name)``:
    it is not applicable only where none of its clauses is, and the report shows each clause's status.
    """

    if not isinstance(contract, Contract):
        raise TypeError(f"property {id}: contract must be a pdverify.properties.releases.Contract, got {contract!r}")
    if clauses and contract is not ALL_RELEASES:
        raise TypeError(f"property {id}: give its clauses their contracts, not the property a contract of its own")
    declared = clauses or (Clause(MAIN, contract),)
    if len({c.name for c in declared}) != len(declared):
        raise ValueError(f"property {id}: clause names must be distinct, got {[c.name for c in declared]}")
    by_name = {c.name: c for c in declared}

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def counted(*args: Any, **kwargs: Any) -> Any:
            count_example()
            known = _known_defects(id, kwargs)
            EXAMPLES.release = getattr(kwargs.get("target"), "release", None)
            EXAMPLES.suppressed, EXAMPLES.clause_seen = set(), set()
            explained: set[str] = set()  # the recorded findings this example reproduced (each counts once)
            if not clauses:
                EXAMPLES.clause_checked[MAIN] = EXAMPLES.clause_checked.get(MAIN, 0) + 1
            while True:
                EXAMPLES.clauses, EXAMPLES.current_clause = by_name, declared[0].name
                try:
                    with time_limit(EXAMPLES.timeout if timed else 0):
                        return fn(*args, **kwargs)
                except UnsatisfiedAssumption:
                    raise  # a rejected input (outside the release's domain), not a failure
                except BaseException as exc:
                    if isinstance(exc, AssertionError):
                        defect = next((d for d in known if d.explanation(id)(kwargs, str(exc))), None)
                        if defect is not None:
                            clause = EXAMPLES.current_clause
                            # failing again in a clause already set aside: the defect stops the example before any
                            # clause is reached (a crash of the unit itself), so nothing else can be checked on it
                            rerun = clause in EXAMPLES.suppressed
                            if not rerun and defect.id not in explained:
                                explained.add(defect.id)
                                EXAMPLES.reproduced[defect.id] = EXAMPLES.reproduced.get(defect.id, 0) + 1
                            if not rerun:
                                EXAMPLES.clause_known[clause] = EXAMPLES.clause_known.get(clause, 0) + 1
                                EXAMPLES.suppressed.add(clause)
                            if not rerun and any(applies_to(c, EXAMPLES.release) for c in declared):
                                continue  # the other clauses are checked on this input all the same
                            if clauses:
                                return None  # the other clauses are set aside or not applicable: none left here
                            reject()  # a recorded finding, reproduced: set aside, and the search goes on
                    # Hypothesis replays the shrunk failing example last, so the last failing call's arguments
                    # are the counterexample (a hang's are the hanging example's).
                    EXAMPLES.last_kwargs = dict(kwargs)
                    EXAMPLES.failed_clause = EXAMPLES.current_clause
                    if EXAMPLES.first_failure is None:
                        EXAMPLES.first_failure = EXAMPLES.examples
                    raise

        test: Any = given(**strategies)(counted) if strategies else counted
        test = pytest.mark.needs(*needs)(test)
        test.pdverify_property = id
        if id in PROPERTIES:
            raise ValueError(f"property id {id!r} declared twice ({PROPERTIES[id].name} and {fn.__name__})")
        PROPERTIES[id] = PropertyInfo(id, title, needs, test, fn.__module__, contract, declared)
        return cast(F, test)

    return decorate
