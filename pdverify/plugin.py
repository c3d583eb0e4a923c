"""The pytest plugin's implementation (loaded lazily by ``pdverify.pytest_plugin``).

Options: ``--pdverify-target NAME|module:attr`` (default ``pdverify``, or ``$PDVERIFY_TARGET``) and
``--pdverify-device all|cpu|cuda``. Every property (a test marked ``needs``) that takes ``device`` is
parametrized over the devices (CUDA is a skip that says why when absent); a property whose target functions
are missing is skipped as *not applicable*. Registered as the ``pdverify`` pytest11 entry point, so an
installed pdverify checks a user's code with ``pytest --pyargs pdverify.properties --pdverify-target mypkg.mod:target``.
"""

from __future__ import annotations

import contextlib
import functools
import traceback
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager
from typing import Any, NoReturn

import pytest
import torch

from pdverify import profiles
from pdverify.devices import DEVICES, cuda_available
from pdverify.local_constants import pin_local_constants
from pdverify.properties.registry import (
    EXAMPLES,
    PROPERTIES,
    ExampleTimeout,
    clause_statuses,
    note_event,
    reset_examples,
    within_domain,
)
from pdverify.properties.releases import bind_release
from pdverify.targets import FUNCTIONS, ServerRefuses, Target, TargetError, load_target
from pdverify.targets.calls import close_recording, open_recording, undriven_units

NOT_APPLICABLE = "not applicable"


TARGET_KEY = pytest.StashKey[Target]()


def configure(config: pytest.Config) -> None:
    from hypothesis import settings

    config.addinivalue_line(
        "markers", "needs(*functions): target functions a property needs; missing ones make it not applicable"
    )
    pin_local_constants()
    chosen = config.getoption("hypothesis_profile", default=None)
    settings.load_profile(chosen or profiles.default_profile())
    EXAMPLES.timeout = config.getoption("pdverify_timeout")
    EXAMPLES.seed = config.getoption("pdverify_seed")
    EXAMPLES.known_findings = config.getoption("pdverify_known_findings") == "apply"
    try:
        config.stash[TARGET_KEY] = refusals_discarded(load_target(config.getoption("pdverify_target")))
    except TargetError as exc:
        raise pytest.UsageError(str(exc)) from None
    bind_release(config.stash[TARGET_KEY].release)
    from hypothesis.errors import InvalidArgument

    from pdverify.strategies.fields import load_field_modules

    try:
        load_field_modules([m for m in config.getoption("pdverify_fields").split(",") if m])
    except InvalidArgument as exc:
        raise pytest.UsageError(str(exc)) from None
    _fresh_fixture_requests_under_hypofuzz()


def _fresh_fixture_requests_under_hypofuzz() -> None:
    """Work around HypoFuzz 25.11 on pytest 9: a worker that switches between properties sets a property's
    fixtures up again on the request object of its previous turn, whose fixture values were torn down
    ("The fixture value for 'target' is not available"). pytest itself gives an item a fresh request after each
    teardown (``Function._initrequest``); this does the same before HypoFuzz enters a target's fixtures. Only
    in a HypoFuzz worker process (``pdverify fuzz``), where ``hypofuzz.hypofuzz`` is already imported."""
    import sys

    module = sys.modules.get("hypofuzz.hypofuzz")
    fuzz_target = getattr(module, "FuzzTarget", None)
    enter = getattr(fuzz_target, "_enter_fixtures", None)
    if enter is None or getattr(enter, "pdverify_fresh_request", False):
        return

    def enter_with_fresh_request(self: Any) -> None:
        self.pytest_item._initrequest()
        enter(self)

    enter_with_fresh_request.pdverify_fresh_request = True  # type: ignore[attr-defined]
    fuzz_target._enter_fixtures = enter_with_fresh_request  # type: ignore[union-attr]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "device" not in metafunc.fixturenames or metafunc.definition.get_closest_marker("needs") is None:
        return
    wanted = metafunc.config.getoption("pdverify_device")
    params = []
    for device in DEVICES:
        if wanted not in ("all", device):
            continue
        marks = []
        if device == "cuda" and not cuda_available():
            marks.append(pytest.mark.skip(reason="CUDA not available: torch.cuda.is_available() is False"))
        params.append(pytest.param(device, marks=marks, id=device))
    metafunc.parametrize("device", params)


def refusals_discarded(tgt: Target) -> Target:
    """``tgt`` with each unit's ``ServerRefuses`` (a configuration the release's own validation refuses to start
    with) turned into a discarded example - outside the release's domain, never a pass or a failure - and counted
    in the property's events ("refused by the server: ...")."""

    def refused(exc: ServerRefuses) -> NoReturn:
        EXAMPLES.refused, EXAMPLES.refusal = EXAMPLES.refused + 1, str(exc)
        note_event(f"refused by the server: {exc}")
        within_domain(False, f"a configuration the server refuses ({exc})", counted=False)
        raise exc  # pragma: no cover - within_domain raised

    def discarding(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except ServerRefuses as exc:
                refused(exc)

        return call

    def discarding_scope(scope: Callable[[Any], AbstractContextManager[Any]]) -> Callable[[Any], Any]:
        @contextlib.contextmanager
        def entered(batch: Any) -> Iterator[None]:
            try:
                with scope(batch):
                    yield
            except ServerRefuses as exc:
                refused(exc)

        return entered

    units = {name: discarding(getattr(tgt, name)) for name in FUNCTIONS if tgt.supplies(name)}
    # what the target builds around a unit's call (its request objects, its scheduler's setup) refuses likewise
    if tgt.request_factory is not None:
        units["request_factory"] = discarding(tgt.request_factory)
    if tgt.scheduler_scope is not None:
        units["scheduler_scope"] = discarding_scope(tgt.scheduler_scope)
    return tgt.derive(tgt.name, tgt.description, **units)


@pytest.fixture
def target(request: pytest.FixtureRequest) -> Target:
    """The target under verification (``--pdverify-target``), loaded once at configure time. Function-scoped
    (it only reads the stash), so that HypoFuzz, which sets a test's fixtures up outside a pytest session, gets
    it too."""
    return request.config.stash[TARGET_KEY]


def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("needs")
    if marker is None or "target" not in getattr(item, "fixturenames", ()):
        return
    tgt = item.config.stash[TARGET_KEY]
    missing = [fn for fn in marker.args if not tgt.supplies(fn)]
    if missing:
        pytest.skip(f"{NOT_APPLICABLE}: target {tgt.name!r} does not supply {', '.join(missing)}{_why(tgt, missing)}")
    function = getattr(item, "function", None)
    info = PROPERTIES.get(getattr(function, "pdverify_property", ""))
    if info is not None:
        out_of_range = info.not_applicable(tgt.release)
    else:
        contract = getattr(function, "pdverify_contract", None)
        out_of_range = contract.not_applicable(tgt.release) if contract is not None else None
    if out_of_range:
        pytest.skip(out_of_range)


def _why(tgt: Target, missing: list[str]) -> str:
    reasons = dict(tgt.unit_sources)
    known = [f"{fn}: {reasons[fn]}" for fn in missing if fn in reasons]
    return f" ({'; '.join(known)})" if known else ""


def bind_profile(test: Any, searching_past: bool = False) -> None:
    """Run a property under the profile loaded now (``--hypothesis-profile``), whenever its module was
    imported: ``given`` fixes a test's settings when it decorates it, which may be before this session loaded
    its profile (an in-process ``pdverify check``, HypoFuzz's collection). The ``target`` fixture is
    function-scoped but only reads the stash, so the function-scoped-fixture health check does not apply.
    ``searching_past``: the property has a finding recorded on the target's release, whose reproduced examples are
    set aside (rejected) so that the search goes on past it; where the defect shows on nearly every input (T9 on
    0.4.5.post2's S11) those rejections are the search going on, not a strategy filtering too much, and the report
    counts the examples checked besides the finding's."""
    from hypothesis import HealthCheck, settings

    if getattr(test, "pdverify_property", None) and hasattr(test, "_hypothesis_internal_use_settings"):
        base = settings.default
        assert base is not None
        suppressed = [*base.suppress_health_check, HealthCheck.function_scoped_fixture]
        if searching_past:
            suppressed.append(HealthCheck.filter_too_much)
        test._hypothesis_internal_use_settings = settings(base, suppress_health_check=suppressed)


def _searching_past(item: pytest.Item, property_id: str | None) -> bool:
    """Whether ``property_id`` has a finding recorded on the session's target whose reproduced examples the findings
    gate sets aside (``--known-findings`` on)."""
    from pdverify.findings import recorded
    from pdverify.properties.registry import EXAMPLES

    target = item.config.stash.get(TARGET_KEY, None)
    return bool(property_id and target is not None and EXAMPLES.known_findings and recorded(property_id, target))


def seed(test: Any) -> None:
    """Seed a property with ``--pdverify-seed`` (none: Hypothesis picks one). Set on the test itself, as
    ``@hypothesis.seed`` does: ``--hypothesis-seed`` would also switch the example database off, so a failure
    stored by an earlier run or a fuzzing campaign would never be replayed. (The state machine reads
    ``EXAMPLES.seed`` itself.)"""
    if getattr(test, "pdverify_property", None) and hasattr(test, "hypothesis"):
        test._hypothesis_internal_use_seed = EXAMPLES.seed


def key_by_node(item: pytest.Item) -> None:
    """Key a property's examples in the database by its node id (``test_prebuilt.py::test_p19...[cpu]``), as
    HypoFuzz does and as Hypothesis does for tests it sees as parametrized: a failure a fuzzing campaign stored
    is then replayed by ``pdverify check`` (Hypothesis does not see our device parameter, so it would use
    the bare function digest and never find it)."""
    test = getattr(item, "obj", None)
    given = getattr(test, "hypothesis", None)
    if getattr(test, "pdverify_property", None) and given is not None:
        given.inner_test._hypothesis_internal_add_digest = item.nodeid.encode()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, None]:
    test = getattr(item, "obj", None)
    bind_profile(test, searching_past=_searching_past(item, getattr(test, "pdverify_property", None)))
    seed(test)
    key_by_node(item)
    reset_examples()
    open_recording()
    from pdverify.strategies.fields import DRAWN, REGISTRY

    drawn_before = dict(DRAWN)
    try:
        yield
    finally:
        from pdverify.cli.export import counterexample_literals

        item.user_properties.append(("pdverify_undriven", undriven_units()))
        item.user_properties.append(("pdverify_calls", close_recording()))

        item.user_properties.append(
            ("pdverify_property", getattr(getattr(item, "obj", None), "pdverify_property", None))
        )
        item.user_properties.append(("pdverify_examples", EXAMPLES.examples))
        item.user_properties.append(("pdverify_outside", EXAMPLES.outside))
        item.user_properties.append(("pdverify_refused", EXAMPLES.refused))
        item.user_properties.append(("pdverify_refusal", EXAMPLES.refusal))
        item.user_properties.append(("pdverify_inputs", EXAMPLES.inputs.hexdigest()))
        item.user_properties.append(("pdverify_findings", _finding_counts(item)))
        # registered request fields and how often this property drew each (summed over the run by pdverify check)
        drawn = {name: DRAWN.get(name, 0) - drawn_before.get(name, 0) for name in REGISTRY}
        item.user_properties.append(("pdverify_fields", drawn))
        item.user_properties.append(("pdverify_first_failure", EXAMPLES.first_failure))
        # as source text: user properties travel from a pytest-xdist worker to the controller
        item.user_properties.append(("pdverify_args", counterexample_literals(EXAMPLES.last_kwargs)))


def _finding_counts(item: pytest.Item) -> dict[str, dict[str, int]]:
    """Per finding recorded for this property on this target: examples inside its signature, and reproduced."""
    from pdverify.findings import recorded

    pid = getattr(getattr(item, "obj", None), "pdverify_property", None)
    if pid is None or not EXAMPLES.known_findings:
        return {}
    return {
        d.id: {"matched": EXAMPLES.matched.get(d.id, 0), "reproduced": EXAMPLES.reproduced.get(d.id, 0)}
        for d in recorded(pid, item.config.stash[TARGET_KEY])
    }


def is_cuda_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "CUDA out of memory" in str(exc)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if call.when != "call" or item.get_closest_marker("needs") is None:
        return
    info = PROPERTIES.get(getattr(getattr(item, "obj", None), "pdverify_property", ""))
    release = item.config.stash[TARGET_KEY].release
    if call.excinfo is None:
        known = [k for k, n in EXAMPLES.reproduced.items() if n]
        if known:
            report.user_properties.append(("pdverify_status", "known defect"))
        if info is not None:
            status = "known defect" if known else "passed"
            report.user_properties.append(("pdverify_clauses", clause_statuses(info, release, status)))
        return
    exc = call.excinfo.value
    if info is not None and not isinstance(exc, pytest.skip.Exception):
        report.user_properties.append(("pdverify_clauses", clause_statuses(info, release, classify(exc))))
    if is_cuda_oom(exc):
        # As FlashInfer's conftest does: an OOM is a skip with its reason, and the frames holding device
        # tensors are cleared so that later properties do not inherit the memory.
        traceback.clear_frames(call.excinfo.tb)
        if torch.cuda.is_available():  # pragma: no cover - cuda-only
            torch.cuda.empty_cache()
        report.outcome = "skipped"
        report.longrepr = (str(item.path), 0, f"Skipped: CUDA out of memory: {str(exc).splitlines()[0][:200]}")
        report.user_properties.append(("pdverify_status", "skipped (CUDA OOM)"))
        return
    needs = item.get_closest_marker("needs")
    units = tuple(needs.args) if needs is not None else ()
    failures = [describe(e, units) for e in leaves(exc)]
    report.user_properties.append(("pdverify_status", classify(exc)))
    report.user_properties.append(("pdverify_failures", failures))
    if len(failures) > 1:
        report.user_properties.append(
            ("pdverify_error_in", f"{len(failures)} distinct failures; first: {failures[0]['message']}")
        )
    elif failures[0]["status"] == "error":
        report.user_properties.append(("pdverify_error_in", failures[0]["message"]))


def leaves(exc: BaseException) -> list[BaseException]:
    """The distinct failures behind ``exc``: the members of an exception group (Hypothesis reports each distinct
    bug it found as one), depth first, or ``exc`` itself."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for member in exc.exceptions for leaf in leaves(member)]
    return [exc]


def describe(exc: BaseException, units: tuple[str, ...]) -> dict[str, str]:
    """One failure as the report shows it: its status, a one-line message (for an error, where it was raised)
    and the counterexample Hypothesis attached to it."""
    status = classify(exc)
    if status == "error":
        message = raised_in(exc, units)
    else:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        message = text.splitlines()[0][:500] if text else type(exc).__name__
    notes = [str(n) for n in getattr(exc, "__notes__", ())]
    example = next((i for i, n in enumerate(notes) if n.startswith(("Falsifying", "Failing"))), None)
    counterexample = "\n".join(notes[example:]) if example is not None else ""
    return {"status": status, "message": message, "counterexample": counterexample}


_SUITE = ("/pdverify/properties/", "/pdverify/oracle/", "/pdverify/model/", "/strategies/")
"""The suite's own code: an exception raised there, on a path that never entered the target, is the suite's."""
_FRAMEWORK = ("/hypothesis/", "/_pytest/", "/pluggy/")


def _frames(exc: BaseException) -> tuple[list[tuple[Any, str]], list[tuple[Any, str]], list[tuple[Any, str]]]:
    """The traceback's frames (with normalised paths): all of them, the release's (SGLang), and the code's (neither
    the test framework's nor Hypothesis's)."""
    located = [(f, f.filename.replace("\\", "/")) for f in traceback.extract_tb(exc.__traceback__)]
    sglang = [(f, path) for f, path in located if "/sglang/" in path and "/pdverify/" not in path]
    code = [(f, path) for f, path in located if not any(m in path for m in _FRAMEWORK)]
    return located, sglang, code


def raised_by_target(exc: BaseException) -> bool:
    """Whether ``exc`` was raised inside the code under test: its innermost frame outside the test framework lies
    outside the suite's own code (property bodies, oracles, models, strategies)."""
    code = _frames(exc)[2]
    return bool(code) and not any(m in code[-1][1] for m in _SUITE)


def raised_in(exc: BaseException, units: tuple[str, ...]) -> str:
    """Where an error came from: the units the property calls, and the innermost frame of the code under test
    (SGLang's own function when the target is a release; else the innermost frame outside the suite and the test
    framework), so a report names the SGLang function that raised, not only the exception. An exception whose
    frames never left the suite's own code (the property body, an oracle, a model's validation) is reported as an
    error of the property, not of the target."""
    located, sglang, code = _frames(exc)
    own = [(f, path) for f, path in code if any(m in path for m in _SUITE)]
    if code and not sglang and len(own) == len(code):
        frame = own[-1][0]
        return (
            f"error in the property, not the target (units {', '.join(units) or '?'} were not the cause); raised in "
            f"{frame.name} ({frame.filename}:{frame.lineno}): {type(exc).__name__}: {str(exc)[:300]}"
        )
    chosen = sglang or [fp for fp in code if fp not in own] or code or located
    where = ""
    if chosen:
        frame, module = chosen[-1]
        if sglang:
            module = "sglang/" + module.rsplit("/sglang/", 1)[1]
        where = f"; raised in {frame.name} ({module}:{frame.lineno})"
    return f"target error in unit {', '.join(units) or '?'}{where}: {type(exc).__name__}: {str(exc)[:300]}"


def classify(exc: BaseException) -> str:
    """``failed`` for a broken property (an assertion of the property itself), ``flaky`` when Hypothesis could not
    reproduce the failure, ``timeout`` for a hang, ``error`` for any other exception - an ``AssertionError``
    raised inside the target's own code (an ``assert`` of the function under test) included."""
    from hypothesis.errors import Flaky

    if isinstance(exc, ExampleTimeout):
        return "timeout"
    if isinstance(exc, Flaky):
        return "flaky"
    if isinstance(exc, BaseExceptionGroup):
        kinds = {classify(e) for e in exc.exceptions}
        return "failed" if "failed" in kinds else sorted(kinds)[0]
    return "failed" if isinstance(exc, AssertionError) and not raised_by_target(exc) else "error"
