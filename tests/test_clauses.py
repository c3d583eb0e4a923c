"""Clause-level contracts: each assertion clause of a property carries its own contract, is checked wherever that
contract applies, and is reported with its own status; a property is not applicable only where none of its clauses
is."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from pdverify.properties import registry
from pdverify.properties.registry import EXAMPLES, Clause, PropertyInfo, applies, clause_statuses, prop
from pdverify.properties.releases import Contract
from pdverify.runner import load_properties, run_property
from pdverify.targets import load_target

LATE = Contract("a rule that began in 0.5.10", "0.5.10")


@pytest.fixture
def declared() -> Iterator[Callable[..., Callable[[Any], Any]]]:
    """Declare throw-away properties, removed from the registry afterwards."""
    before = dict(registry.PROPERTIES)
    yield prop
    registry.PROPERTIES.clear()
    registry.PROPERTIES.update(before)


def _two_clauses(
    declare: Callable[..., Callable[[Any], Any]], fail_early: bool = False, fail_late: bool = False
) -> PropertyInfo:
    @declare(
        "Z90",
        "an early clause and a late one",
        needs=("page_align_floor",),
        clauses=(Clause("early", title="every release"), Clause("late", LATE, "from 0.5.10")),
        n=st.integers(0, 3),
    )
    def test_z90(target: Any, device: str, n: int) -> None:
        if applies("early"):
            assert not fail_early, "the early clause fails"
        if applies("late"):
            assert not fail_late, "the late clause fails"

    return registry.PROPERTIES["Z90"]


def _release(release: str | None) -> Any:
    return load_target("pdverify").derive("pdverify", release=release, package="sglang")


def test_a_late_clause_is_not_applicable_while_the_early_one_is_checked(
    declared: Callable[..., Callable[[Any], Any]],
) -> None:
    info = _two_clauses(declared, fail_late=True)
    run = run_property(info, _release("0.5.9"), profile="mutate")
    assert run.status == "passed", run.message  # the failing late clause does not apply to 0.5.9
    statuses = {c["name"]: (c["status"], c["examples"]) for c in clause_statuses(info, "0.5.9", run.status)}
    assert statuses["early"][0] == "passed" and statuses["early"][1] > 0
    assert statuses["late"] == ("not applicable", 0)


def test_a_failure_is_its_clauses(declared: Callable[..., Callable[[Any], Any]]) -> None:
    info = _two_clauses(declared, fail_late=True)
    run = run_property(info, _release("0.5.10"), profile="mutate")
    assert run.status == "failed" and "the late clause fails" in run.message
    statuses = {c["name"]: c["status"] for c in clause_statuses(info, "0.5.10", run.status)}
    assert statuses == {"early": "passed", "late": "failed"}
    del registry.PROPERTIES["Z90"]
    info = _two_clauses(declared, fail_early=True)
    run = run_property(info, _release("0.5.10"), profile="mutate")
    statuses = {c["name"]: c["status"] for c in clause_statuses(info, "0.5.10", run.status)}
    assert statuses == {"early": "failed", "late": "not reached"}  # the example stopped before the late clause


def test_a_property_is_not_applicable_only_where_every_clause_is(declared: Callable[..., Callable[[Any], Any]]) -> None:
    @declared(
        "Z91",
        "two late clauses",
        needs=("page_align_floor",),
        clauses=(Clause("a", LATE), Clause("b", Contract("b's rule", "0.5.12"))),
    )
    def test_z91(target: Any, device: str) -> None:
        raise AssertionError("never runs where no clause applies")

    info = registry.PROPERTIES["Z91"]
    why = info.not_applicable("0.5.9")
    assert why is not None and "every clause" in why and "a (contract before" in why and "b (contract before" in why
    assert info.not_applicable("0.5.10") is None and info.not_applicable(None) is None
    assert run_property(info, _release("0.5.9")).status == "not applicable"
    assert info.contracts() == "a: a rule that began in 0.5.10; b: b's rule"


def test_a_property_without_clauses_has_one_main_clause(declared: Callable[..., Callable[[Any], Any]]) -> None:
    @declared("Z92", "one contract", needs=("page_align_floor",), contract=LATE, n=st.integers(0, 3))
    def test_z92(target: Any, device: str, n: int) -> None:
        pass

    info = registry.PROPERTIES["Z92"]
    assert [(c.name, c.contract) for c in info.clauses] == [("main", LATE)]
    assert info.not_applicable("0.5.9") == LATE.not_applicable("0.5.9") and info.contracts() == str(LATE)
    assert run_property(info, _release("0.5.10")).status == "passed"
    assert clause_statuses(info, "0.5.10", "passed")[0]["examples"] == EXAMPLES.examples > 0


def test_bad_declarations_and_unknown_clauses(declared: Callable[..., Callable[[Any], Any]]) -> None:
    with pytest.raises(TypeError, match="give its clauses their contracts"):
        declared("Z93", "t", needs=(), contract=LATE, clauses=(Clause("a"),))
    with pytest.raises(ValueError, match="clause names must be distinct"):
        declared("Z93", "t", needs=(), clauses=(Clause("a"), Clause("a", LATE)))
    with pytest.raises(ValueError, match="non-empty identifier"):
        Clause("two words")
    with pytest.raises(TypeError, match="contract must be a Contract"):
        Clause("a", "0.5.10")  # type: ignore[arg-type]

    @declared("Z94", "asks for a clause it never declared", needs=("page_align_floor",))
    def test_z94(target: Any, device: str) -> None:
        applies("nonesuch")

    run = run_property(registry.PROPERTIES["Z94"], _release(None))
    assert run.status == "failed" and "no clause 'nonesuch' declared for this property (declared: main)" in run.message


def test_the_shipped_clauses_follow_their_evidence() -> None:
    """Every clause contract of the shipped properties is one of the release boundaries with evidence."""
    from pdverify.properties import releases

    named = {id(c) for c in vars(releases).values() if isinstance(c, Contract)}
    for info in load_properties().values():
        for c in info.clauses:
            assert id(c.contract) in named, f"{info.id}.{c.name}: its contract is not a boundary of releases.py"


def test_the_report_shows_clause_status(tmp_path: Path) -> None:
    from pdverify.cli.main import main

    report = tmp_path / "report.json"
    code = main(["check", "--device", "cpu", "--profile", "dev", "-k", "test_p21_seq_lens", "--report", str(report)])
    assert code == 0
    (p21,) = json.loads(report.read_text())["properties"]
    assert [(c["name"], c["status"]) for c in p21["clauses"]] == [
        ("seq_lens", "passed"), ("seq_lens_sum", "passed"), ("seq_lens_cpu", "passed"), ("orig_seq_lens", "passed"),
    ]  # fmt: skip
    # every clause checked on every example the server took (a refused one is drawn, never checked)
    assert all(c["examples"] == p21["examples"] - p21["refused"] for c in p21["clauses"])


def test_past_a_known_defect_in_one_clause_the_others_are_still_checked(declared: Any) -> None:
    """A recorded finding explains a failure of one clause: the example runs again without that clause, so the
    property's other clauses are checked on it all the same (and a second defect there is found)."""
    from pdverify import findings

    info = _two_clauses(declared, fail_early=True)
    defect = findings.KnownDefect(
        "TZ", "Z90", "sglang", ("0.5.10",), "the early clause fails", lambda kw: True,
        lambda kw, message: message.startswith("the early clause fails"),
    )  # fmt: skip
    findings.KNOWN["TZ"] = defect
    try:
        run = run_property(info, _release("0.5.10"), profile="mutate")
        assert run.status == "passed", run.message
        statuses = {c["name"]: c["status"] for c in clause_statuses(info, "0.5.10", run.status)}
        assert statuses == {"early": "known defect", "late": "passed"}
        assert EXAMPLES.reproduced["TZ"] == EXAMPLES.examples > 0
        del registry.PROPERTIES["Z90"]
        info = _two_clauses(declared, fail_early=True, fail_late=True)  # a second defect behind the known one
        run = run_property(info, _release("0.5.10"), profile="mutate")
        assert run.status == "failed" and "the late clause fails" in run.message
        statuses = {c["name"]: c["status"] for c in clause_statuses(info, "0.5.10", run.status)}
        assert statuses == {"early": "known defect", "late": "failed"}
        # where the known defect's clause is the only one that applies, the example ends there (no rejection: a
        # defect on every input would otherwise filter the whole run away)
        findings.KNOWN["TZ"] = replace(defect, releases=("0.5.9",))
        run = run_property(info, _release("0.5.9"), profile="mutate")
        assert run.status == "passed" and EXAMPLES.examples > 0, run.message
        statuses = {c["name"]: c["status"] for c in clause_statuses(info, "0.5.9", run.status)}
        assert statuses == {"early": "known defect", "late": "not applicable"}
    finally:
        del findings.KNOWN["TZ"]


def test_the_queue_budget_clauses_split_at_the_re_read() -> None:
    """Q2's and Q3's budget clauses: read once to 0.5.10.post1, re-read from 0.5.11 (#19746); a target without a
    release is held to the current one only. The two rules differ where the running batch's single-request need
    outweighs the headroom: the read-once pass charges every admission its headroom on top, the re-read keeps back
    the larger of the two."""
    from pdverify.model.queue import DecodeQueueCase, QueuedRequest
    from pdverify.oracle.decode_queue import expected_pass
    from pdverify.properties.releases import BUDGET_READ_ONCE, FROM_BUDGET_REREAD

    q2 = load_properties()["Q2"]
    assert {c.name: c.contract for c in q2.clauses} == {
        "budget_reread": FROM_BUDGET_REREAD,
        "budget_read_once": BUDGET_READ_ONCE,
    }
    for release, checked in (
        ("0.5.10.post1", "budget_read_once"),
        ("0.5.11", "budget_reread"),
        (None, "budget_reread"),
    ):
        applying = [c.name for c in q2.clauses if c.contract.not_applicable(release) is None]
        assert applying == [checked], (release, applying)
    assert "Q4" in load_properties() and any(c.name == "padding_row" for c in load_properties()["Q4"].clauses)
    # one running request (8 new tokens, 10 retractable): its need, 8, outweighs the headroom 2 x (1 + k) until k = 4
    one = QueuedRequest(length=4, output_len=0, max_new_tokens=1)
    case = DecodeQueueCase(page_size=4, requests=(one,) * 4, free_pages=tuple(range(1, 20)), metadata_buffers=4,
                           request_rows=4, token_budget=20, reserved_decode_tokens=2,
                           running=((10, None),))  # fmt: skip
    # each needs 4 + 2 = 6. Re-read: the reserve stays 8, each admission takes its page: 20, 16, 12, 8 - all four
    assert expected_pass(case).admitted == [0, 1, 2, 3]
    # read once: each admission takes 4 + 2: 20, 14, 8, 2 - the fourth does not fit
    assert expected_pass(case, budget_reread=False).admitted == [0, 1, 2]
    assert expected_pass(replace(case, token_budget=17)).admitted == [0, 1, 2]  # 17, 13, 9, 5
    assert expected_pass(replace(case, token_budget=17), budget_reread=False).admitted == [0, 1]  # 17, 11, 5


def test_a_known_defect_that_stops_the_example_before_any_clause_ends_it(
    declared: Callable[..., Callable[[Any], Any]],
) -> None:
    """A recorded finding that fails the example before any clause is reached (the unit under test crashes, as T25
    and T26 do in ``prepare_for_prebuilt``) fails it again on the rerun without the first clause: the example ends
    there, counted once, instead of being rerun for ever."""
    from pdverify import findings

    @declared("Z91", "a crash before the clauses", needs=("page_align_floor",),
              clauses=(Clause("first", title="every release"), Clause("second", title="every release")),
              n=st.integers(0, 3))  # fmt: skip
    def test_z91(target: Any, device: str, n: int) -> None:
        raise AssertionError("the unit crashed")

    info = registry.PROPERTIES["Z91"]
    findings.KNOWN["TZ"] = findings.KnownDefect(
        "TZ", "Z91", "sglang", ("0.5.10",), "the unit crashes", lambda kw: True,
        lambda kw, message: message == "the unit crashed",
    )  # fmt: skip
    try:
        run = run_property(info, _release("0.5.10"), profile="mutate")
        assert run.status == "passed" and EXAMPLES.examples > 0, run.message
        assert EXAMPLES.reproduced["TZ"] == EXAMPLES.examples  # once per example, not once per rerun
    finally:
        del findings.KNOWN["TZ"]


def test_the_swa_budget_reread_caps_its_headroom_by_the_windows_growth() -> None:
    """From 0.5.19 (#27770) decode's pass re-reads its SWA budget after each admission, and what it keeps back is the
    active requests' headroom only as far as their windows can still grow (#24857's cap); to 0.5.18 the budget was
    read once and each admission charged its tail's pages and its headroom. The queue's explicit example tells them
    apart, the properties pick the form by release, and the port (0.5.23) follows the re-read."""
    from dataclasses import replace

    from pdverify.model.queue import DecodeQueueCase, QueuedRequest
    from pdverify.oracle.decode_queue import expected_pass
    from pdverify.production.decode_queue import PreallocPass
    from pdverify.properties.releases import FROM_SWA_BUDGET_REREAD

    assert FROM_SWA_BUDGET_REREAD.not_applicable("0.5.18") is not None
    assert FROM_SWA_BUDGET_REREAD.not_applicable("0.5.19") is None
    request = QueuedRequest(1, output_len=0, max_new_tokens=1)
    case = DecodeQueueCase(page_size=2, requests=(request,) * 3, free_pages=tuple(range(1, 24)), metadata_buffers=3,
                           request_rows=3, token_budget=46, reserved_decode_tokens=1, radix=True,
                           swa_free_pages=(1, 2, 3, 4, 5, 6), window=1, swa_token_budget=8)  # fmt: skip
    assert case.swa_tokens_in_use == 2  # the padding page
    # each needs max(its page + 1 of headroom, 1 + 1) = 3. Read once: 8, 5, 2 - the third does not fit
    assert expected_pass(case, swa_budget_reread=False).admitted == [0, 1]
    # re-read: the windows (1 token each) cannot grow past the 2 tokens in use, so nothing is kept back: 8, 6, 4
    assert expected_pass(case).admitted == [0, 1, 2]
    assert list(PreallocPass(case, "cpu").run().admitted) == [0, 1, 2]
    # a 4-token window: after two admissions their windows can still grow 2 x 4 - 6 in use = 2 tokens, so both
    # headrooms are kept back: 8, 8 - 2 = 6, 8 - 4 - 2 = 2 - the third does not fit, as read once (8, 5, 2)
    wide = replace(case, window=4)
    assert expected_pass(wide).admitted == expected_pass(wide, swa_budget_reread=False).admitted == [0, 1]
    assert list(PreallocPass(wide, "cpu").run().admitted) == [0, 1]
    # a buffer with every page in use but the free ones far up: no growth potential, no headroom kept back
    far = replace(wide, swa_free_pages=(40, 41, 42, 43, 44, 45))
    assert far.swa_tokens_in_use == 2 * 40
    assert expected_pass(far).admitted == [0, 1, 2]


def test_the_budget_counts_the_radix_cache_s_evictable_pages_and_a_lock_takes_them_out() -> None:
    """With the decode radix cache on, decode's budget counts the tree's evictable pages, and a request locks its
    matched prefix before its budget check, which re-reads the budget after the lock ("Matching may lock
    previously-evictable radix pages, so refresh the admission budget against the post-lock pool state", 0.5.11
    on): the oracle and the port (0.5.23) check a request against the budget less the pages its lock newly protects,
    and count a page two locks hold once. The three ways of getting it wrong are caught by the queue's explicit
    examples (XQ40-XQ42)."""
    from pdverify.model.queue import DecodeQueueCase, QueuedRequest
    from pdverify.mutants.queue import budget_before_lock, locked_pages_per_lock, locks_stay_evictable
    from pdverify.oracle.decode_queue import expected_pass
    from pdverify.production.decode_queue import PreallocPass

    def queue(*requests: QueuedRequest, budget: int) -> DecodeQueueCase:
        return DecodeQueueCase(page_size=4, requests=requests, free_pages=tuple(range(1, 41)),
                               metadata_buffers=len(requests), request_rows=len(requests), token_budget=budget,
                               radix=True)  # fmt: skip

    one = QueuedRequest(9, prefix_pages=(90, 91))  # 2 prefix pages (8 tokens), 1 fresh page; needs 9 - 8 + 8 = 9
    for budget, admitted in ((16, []), (17, [0])):  # 16 - 8 locked = 8 < 9; 17 - 8 = 9
        case = queue(one, budget=budget)
        assert expected_pass(case).admitted == admitted
        assert list(PreallocPass(case, "cpu").run().admitted) == admitted
    # checked against the budget from before its lock, or with locks taking nothing, the request goes at 16
    assert list(budget_before_lock(queue(one, budget=16), "cpu").admitted) == [0]
    assert list(locks_stay_evictable(queue(one, budget=16), "cpu").admitted) == [0]
    # shared pages: 29 - 8 - 4 (21 - 4 = 17 left), - 4 (13), then 1 page newly locked: 9 left for a need of 9
    shared = queue(one, one, QueuedRequest(13, prefix_pages=(90, 91, 92)), budget=29)
    assert expected_pass(shared).admitted == [0, 1, 2]
    assert list(PreallocPass(shared, "cpu").run().admitted) == [0, 1, 2]
    assert list(locked_pages_per_lock(shared, "cpu").admitted) == [0, 1]  # 8 + 8 + 12 locked: the third waits
    # a rebootstrapped request matches nothing: its cached prefix stays evictable, and the budget is as it was
    reboot = queue(QueuedRequest(9, rebootstrap=True, prefix_pages=(90, 91)), budget=18)
    assert expected_pass(reboot).admitted == [0]  # needs max(3 pages' 12 tokens, 9 + 1 output + 8 of room) = 18
    assert list(PreallocPass(reboot, "cpu").run().admitted) == [0]
