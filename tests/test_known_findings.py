"""A recorded finding does not blind its property: examples its signature explains are counted and set aside, the
search goes on, and a second defect in the same property is a new failure - end to end through the gate."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from pdverify.cli import exitcodes
from pdverify.findings import KNOWN, QUEUE_EARLY, QUEUE_NO_RETRACT, QUEUE_READ_ONCE
from pdverify.model.exchange import PrefillCase
from pdverify.runner import load_properties
from tests.test_cli import check

ROOT = Path(__file__).resolve().parent.parent


def _gate(tmp_path: Path, report: dict[str, object]) -> tuple[int, str]:
    (tmp_path / "gated.json").write_text(json.dumps(report))
    cmd = [sys.executable, str(ROOT / "ci" / "findings_gate.py"), str(tmp_path / "gated.json"),
           str(ROOT / "findings" / "sglang-0.5.23.json")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout


def test_a_reproduced_finding_is_set_aside_and_the_search_goes_on(tmp_path: Path) -> None:
    code, report = check(tmp_path, "--target", "tests.user_targets:f2_as_released", "-k", "s16")
    s16 = report["properties"][0]
    assert code == exitcodes.FAILED and s16["status"] == "known defect", s16  # a defect is never green
    counts = s16["findings"]["F2"]
    assert counts["reproduced"] >= 1 and counts["reproduced"] == counts["matched"], counts
    # the profile's whole budget ran outside the signature (rejected examples do not count against it)
    assert s16["examples"] - counts["matched"] >= 100, s16
    assert "--known-findings ignore" in s16["reproduce"]
    # the gate of the released 0.5.23 reads F2 reproduced; F1's property did not run in this report
    gate_code, out = _gate(tmp_path, report)
    assert f"F2   reproduced on {counts['reproduced']} examples" in out and "F1   NOT REPRODUCED" in out, out
    assert gate_code == 1 and "0 new failures" in out


def test_a_second_defect_behind_a_recorded_finding_is_new(tmp_path: Path) -> None:
    code, report = check(tmp_path, "--target", "tests.user_targets:f2_and_a_second_defect", "-k", "s16")
    s16 = report["properties"][0]
    assert code == exitcodes.FAILED and s16["status"] == "failed", s16
    assert s16["findings"]["F2"]["reproduced"] == 0
    assert "expected one over the pages sent" in s16["message"]
    gate_code, out = _gate(tmp_path, report)
    assert gate_code == 1 and "NEW S16[cpu] failed" in out, out


def test_ignoring_the_findings_reports_the_plain_failure(tmp_path: Path) -> None:
    code, report = check(
        tmp_path, "--target", "tests.user_targets:f2_as_released", "-k", "s16", "--known-findings", "ignore"
    )
    s16 = report["properties"][0]
    assert code == exitcodes.FAILED and s16["status"] == "failed" and s16["findings"] == {}, s16
    assert report["known_findings"] == "ignore"


def test_every_recorded_finding_has_a_signature_and_every_signature_a_record() -> None:
    recorded = set()
    for path in (ROOT / "findings").glob("sglang-*.json"):
        data = json.loads(path.read_text())
        recorded |= {(f["id"], f["property"], data["release"]) for f in data["findings"]}
    triage = json.loads((ROOT / "findings" / "triage.json").read_text())["triage"]
    defects = {(t["id"], t["property"], r) for t in triage if t["kind"] == "upstream defect" for r in t["releases"]}
    signatures = {(k, prop, r) for k, d in KNOWN.items() for prop in d.properties() for r in d.releases_for(prop)}
    assert recorded <= defects, "a finding of a conformance record is missing from the triage"
    # a property that runs its own search inside one call (a state machine: no drawn arguments) cannot set a
    # reproduced example aside and go on; its triage row says so and carries no signature
    props = load_properties()
    unsigned = {(t["id"], t["property"], r) for t in triage if t.get("unsigned") for r in t["releases"]}
    for t in triage:
        if t.get("unsigned"):
            test = props[t["property"]].test
            assert not getattr(test, "is_hypothesis_test", False), f"{t['id']} on {t['property']}: give it a signature"
    assert defects - unsigned == signatures, (
        "every triaged upstream defect carries a signature (pdverify.findings) and back"
    )


def test_signatures_and_explanations_are_precise() -> None:
    """Each recorded finding explains only its own failure: the same property failing elsewhere is not it."""
    from types import SimpleNamespace

    t1, f1 = KNOWN["T1"], KNOWN["F1"]
    batch = SimpleNamespace(
        reqs=[SimpleNamespace(req_pool_idx=0, prefix_len=2, extend_len=3)], req_to_token=[[7, 8, 9, 10, 11]]
    )
    assert t1.shows({"batch": batch}) and not t1.shows({"batch": SimpleNamespace(reqs=[])})
    assert t1.explains({"batch": batch}, "out_cache_loc: [7, 8, 9] != expected [9, 10, 11]")
    assert not t1.explains({"batch": batch}, "out_cache_loc: [9, 10] != expected [9, 10, 11]")
    case = SimpleNamespace(state_types=("QSA_COMPRESSED",), decode_prefix=8, l1_prefix=4, page_size=4)
    assert f1.shows({"case": case}) and not f1.shows({"case": SimpleNamespace(state_types=("DSA",))})
    pending = "QSA_COMPRESSED list [40, 0, 38] from position 0: logical page, sent, held = [(1, 0, None)] (held ...)"
    held_elsewhere = (
        "QSA_COMPRESSED list [40, 0, 38] from position 0: logical page, sent, held = [(2, 0, 38)] (held ...)"
    )
    assert f1.explains({"case": case}, pending) and not f1.explains({"case": case}, held_elsewhere)
    assert not f1.explains({"case": case}, "main KV list [1] from position 0: logical page, sent, held = []")
    assert not f1.recorded_for(SimpleNamespace(package="sglang", release="0.5.18"))  # no driver reaches it there
    assert f1.recorded_for(SimpleNamespace(package="sglang", release="0.5.19"))


def test_the_release_matrix_findings_explain_only_their_own_failures() -> None:
    """T3-T6, found by the matrix once its drivers and clauses reached the releases: each signature and explanation
    is narrow - the same property failing another way is a new failure."""
    from types import SimpleNamespace as NS

    t3, t4, t5, t6 = (KNOWN[k] for k in ("T3", "T4", "T5", "T6"))
    first_time = [NS(fill_len=1, rebootstrap=False), NS(fill_len=17, rebootstrap=False)]
    queue = NS(page_size=16, radix=False, requests=first_time)
    assert t3.shows({"case": queue}) and not t3.shows({"case": NS(page_size=16, radix=True, requests=queue.requests)})
    # a rebootstrapped request never matches decode's tree: with the radix cache on it is charged on the same path
    rebootstrapped = [NS(fill_len=1, rebootstrap=True)]
    assert t3.shows({"case": NS(page_size=16, radix=True, requests=rebootstrapped)})
    assert not t3.shows({"case": NS(page_size=1, radix=False, requests=queue.requests)})
    assert t3.explains({"case": queue}, "16 tokens allocated, the budget was 15\nassert 16 <= 15")
    assert not t3.explains({"case": queue}, "32 tokens allocated, the budget was 15")  # a page too many: not T3
    assert t4.explains({"batch": NS()}, "prepare_for_prebuilt left batch.multimodal_inputs unset")
    assert not t4.explains({"batch": NS()}, "prepare_for_prebuilt left batch.seq_lens unset")
    row = tuple(p * 4 + o for p in (5, 6, 2) for o in range(4))
    case = NS(state_types=("DSA",), decode_prefix=4, page_size=4, length=12, row=row)
    assert t5.shows({"case": case}) and not t5.shows({"case": NS(state_types=("SWA",), decode_prefix=4)})
    assert t5.explains({"case": case}, "DSA state list [5, 6, 2], expected [6, 2] (D=4)")
    assert not t5.explains({"case": case}, "DSA state list [6], expected [6, 2] (D=4)")  # a lost page: not T5
    assert t5.explains({"case": case}, "DSA list [40, 0, 38] from position 4: logical page, sent, held = []")
    assert not t5.explains({"case": case}, "DSA list [40, 0] from position 4: logical page, sent, held = []")
    assert t5.explains({"pair": (case, case)}, "DSA[0]: prefill page 1 is not its logical page 1")
    assert not t5.explains({"pair": (case, case)}, "SWA[0]: prefill page 1 is not its logical page 1")
    checked = NS(kv_checksum=True, health_check=False, decode_prefix=4, page_size=4, row=row, translation=None)
    assert t6.shows({"case": checked}) and not t6.shows({"case": NS(**{**vars(checked), "decode_prefix": 0})})
    assert t6.explains({"case": checked}, "digests [(5, 6, 2)], expected one over the pages sent for [D, L)")
    assert not t6.explains({"case": checked}, "digests [(6, 2)], expected one over the pages sent for [D, L)")
    t7, t8 = KNOWN["T7"], KNOWN["T8"]
    held = {"hold": {"early_send_blocked": "load_back"}}
    assert t7.shows(held) and not t7.shows({"hold": {"early_send_blocked": "bootstrapping"}})
    assert t7.explains(held, "with the early send held back ({'early_send_blocked': 'load_back'}, early prefix 12) ...")
    assert not t7.explains(held, "with the early send held back ({'early_send_blocked': 'bootstrapping'}, ...) ...")
    shard = {"split": ("kv_shard", 2)}
    assert t8.shows(shard) and not t8.shows({"split": ("cp_all", 2)})
    assert t8.explains(shard, "position 0: sent 6, expected 3: rank 0 of 2 (kv_shard): [6] -> dst[0:1]")
    assert not t8.explains(shard, "position 0: sent 7, expected 2: rank 0 of 2 (kv_shard): [7] -> dst[0:1]")
    assert not t8.explains(shard, "position 0: sent 6, expected 6: rank 0 of 2 (cp_all): [6] -> dst[0:1]")
    # T10 (0.5.21): under overlap an early send of a device prefix past D records the forward's event; no transfer
    # waiting on it is T10, a wait on the wrong transfer or one without overlap is not
    t10 = KNOWN["T10"]
    row = tuple(range(40, 63))
    early = {"case": PrefillCase(4, 23, 4, row, (23,), early_prefix=12, overlap=True)}
    assert t10.shows(early)
    assert not t10.shows({"case": replace(early["case"], overlap=False)})
    assert not t10.shows({"case": replace(early["case"], early_prefix=4)}), "an early send of D ships nothing early"
    nowait = "transfers waiting on the forward [False, False], expected only the first to wait (overlap=True, ..."
    assert t10.explains(early, nowait)
    assert not t10.explains(early, nowait.replace("[False, False]", "[False, True]")), "a late wait is another defect"
    assert not t10.explains(early, "transfers waiting on the forward [True], expected only the first to not wait ")


def test_t9_and_t3_explanations_are_the_defects_own_failures() -> None:
    """T9's explanation is the message the property's own check gives 0.4.5.post2's exchange (token-offset placement,
    no partial page deferred); T3's for Q2 and Q3 is an over-admission of a request whose raw length fits the budget
    left while its whole pages do not - an under-admission or another over-admission is a new failure."""
    from pdverify.model.layout import PagedRow
    from pdverify.model.queue import DecodeQueueCase, QueuedRequest
    from pdverify.strategies import PDPair

    t9, t3 = KNOWN["T9"], KNOWN["T3"]
    pair = PDPair(PagedRow((5, 2), 8, 4, 0), PagedRow((7, 1), 8, 4, 0), [7, 8])
    assert t9.shows({"pair": pair}) and not t9.shows({"pair": PDPair(pair.prefill, pair.decode, [8])})
    assert t9.explains({"pair": pair}, "start_send_idx not page-aligned before the last chunk: [0, 7, 8]\nassert False")
    assert not t9.explains({"pair": pair}, "start_send_idx not page-aligned before the last chunk: [0, 4, 8]")
    assert t9.explains({"pair": pair}, "chunk 1 lands at 7, expected 2")
    assert t9.releases_for("P11") == ("0.4.5.post2",)
    paged = QUEUE_NO_RETRACT[QUEUE_NO_RETRACT.index("0.4.5.post2") :]  # page size 1 only before #5561
    assert t3.releases_for("Q2") == (
        *paged,
        *QUEUE_READ_ONCE,
        *QUEUE_EARLY,
        "0.5.17",
        "0.5.18",
        "0.5.19",
        "0.5.20",
        "0.5.21",
    )

    def request(length: int) -> QueuedRequest:
        return QueuedRequest(length=length, output_len=0, max_new_tokens=1)

    case = DecodeQueueCase(page_size=2, requests=(request(1),), free_pages=tuple(range(1, 9)), metadata_buffers=1,
                           request_rows=1, token_budget=1, running=((1, None),))  # fmt: skip
    over_q2 = "admitted #0, expected none (buffers 1, rows 1, budget 1 tokens)"
    assert t3.explanation("Q2")({"case": case}, over_q2)
    assert t3.explanation("Q3")({"case": case}, "queue after the pass none, expected #0\nassert [] == [0]")
    assert not t3.explanation("Q2")({"case": case}, "admitted none, expected #0 (buffers 1, rows 1, budget 1 tokens)")
    roomy = DecodeQueueCase(page_size=2, requests=(request(2),), free_pages=tuple(range(1, 9)), metadata_buffers=1,
                            request_rows=1, token_budget=1, running=((1, None),))  # fmt: skip
    assert not t3.explanation("Q2")({"case": roomy}, over_q2), "an aligned request is charged what it takes"
    # with the radix cache on, a rebootstrapped request takes the same path (0.5.20 decode.py:1233-1236); one that
    # may match the tree is charged whole pages, so its over-admission is not T3
    reboot = QueuedRequest(length=1, output_len=0, max_new_tokens=1, rebootstrap=True)
    radix = replace(case, radix=True, requests=(reboot,))
    assert t3.shows({"case": radix}) and t3.explanation("Q2")({"case": radix}, over_q2)
    assert not t3.explanation("Q2")({"case": replace(case, radix=True)}, over_q2)
    # Q1 (0.5.21): with the radix cache on a hybrid SWA pool (the SWA budget counting the tree's evictable pages), the
    # rebootstrapped request admitted so then finds no SWA page and is failed; a failure of another request is not T3
    swa = replace(radix, swa_free_pages=(), window=1)
    assert t3.explanation("Q1")({"case": swa}, "failed #0, expected none\nassert [0] == []")
    assert not t3.explanation("Q1")({"case": radix}, "failed #0, expected none"), "without an SWA pool nothing fails"
    aligned = replace(swa, requests=(replace(reboot, length=2),))
    assert not t3.explanation("Q1")({"case": aligned}, "failed #0, expected none")
    assert "0.5.21" in t3.releases_for("Q4")  # Q4 met it on 0.5.21 again (fc17a0f)
    # Q1 is recorded on 0.5.19-0.5.21, pinned by an explicit example (2d2ad48 had narrowed it away when the draws
    # stopped meeting it: a true record dropped for want of an input, not for want of the defect)
    assert t3.releases_for("Q1") == ("0.5.19", "0.5.20", "0.5.21")


def test_t11_is_a_pass_without_the_lora_gate() -> None:
    """T11 (0.5.17-0.5.19) shows only where the LoRA slot limit changes the pass, and explains a Q1/Q2/Q3/Q5 message
    only when what the pass did is exactly the ungated pass: a pass that admits too few, or another request, is new."""
    from pdverify.model.queue import DecodeQueueCase, QueuedRequest

    t11 = KNOWN["T11"]

    def request(lora: str | None, *, prefix: tuple[int, ...] = ()) -> QueuedRequest:
        return QueuedRequest(length=5, lora=lora, prefix_pages=prefix)

    free = tuple(range(1, 17))
    case = DecodeQueueCase(page_size=4, requests=(request("b"), request("c"), request("a")), free_pages=free,
                           metadata_buffers=3, request_rows=3, token_budget=64, running=((10, "a"),),
                           max_loras=2)  # fmt: skip
    assert t11.shows({"case": case})
    assert not t11.shows({"case": replace(case, max_loras=3)}), "room for every adapter: the gate changes nothing"
    assert not t11.shows({"case": replace(case, max_loras=None)})
    args = {"case": case}
    assert t11.explanation("Q2")(args, "admitted #0, #1, #2, expected #0, #2 (buffers 3, rows 3, budget 64 tokens)")
    assert not t11.explanation("Q2")(args, "admitted #0, #1, expected #0, #2 (buffers 3, rows 3, budget 64 tokens)")
    assert not t11.explanation("Q2")(args, "admitted #0, expected #0, #2 (buffers 3, rows 3, budget 64 tokens)")
    assert t11.explanation("Q3")(args, "queue after the pass none, expected #1\nassert [] == [1]")
    assert not t11.explanation("Q3")(args, "queue after the pass #2, expected #1")
    radix = replace(case, radix=True, requests=(request("b"), request("c", prefix=(90,)), request("a")))
    assert t11.explanation("Q5")({"case": radix}, "radix locks held by #1, expected none")
    assert not t11.explanation("Q5")({"case": radix}, "radix locks held by #0, expected none")
    assert not t11.explanation("Q4")(args, "12 tokens allocated, the budget was 8"), "not a pass-level message"
    assert t11.releases_for("Q3")[-3:] == ("0.5.17", "0.5.18", "0.5.19") and "0.5.13" in t11.releases_for("Q3")
    assert t11.releases_for("Q5") == t11.releases_for("Q3")[t11.releases_for("Q3").index("0.5.11") :], (
        "Q5 meets it with the decode radix cache, from 0.5.11"
    )
    # Q1 on 0.5.19 (generated by the ci draws of a PP pass): the request the slot limit passes over - the stage's
    # other microbatch holds adapter 'a', one slot - is admitted and finds no SWA page for its tail: it fails
    assert t11.releases_for("Q1") == ("0.5.19",), "0.5.19's SWA-tail reclaim fails such a request"
    pp = DecodeQueueCase(page_size=2, requests=(QueuedRequest(length=1, output_len=0, max_new_tokens=1,
                                                              consensus="good"),),
                         free_pages=tuple(range(1, 22)), metadata_buffers=1, request_rows=1, token_budget=42,
                         max_loras=1, pp_consensus=True, microbatch_loras=("a",), radix=True, swa_free_pages=(),
                         window=1)  # fmt: skip
    assert t11.shows({"case": pp})
    assert t11.explanation("Q1")({"case": pp}, "failed #0, expected none")
    assert not t11.shows({"case": replace(pp, microbatch_loras=())}), "the other microbatch's adapter binds"
    # generated on 0.5.11-0.5.15: the pass admits 'a' past the one slot and runs out of rows before the last base
    # request, whose prefix the contract admits and locks
    base = QueuedRequest(length=1, output_len=0, max_new_tokens=1)
    four = (base, base, replace(base, lora="a"), replace(base, prefix_pages=(99,)))
    rows = DecodeQueueCase(page_size=1, requests=four,
                           free_pages=tuple(range(1, 45)), metadata_buffers=4, request_rows=3, token_budget=44,
                           priority_order="low_first", max_loras=1, radix=True)  # fmt: skip
    assert t11.shows({"case": rows})
    assert t11.explanation("Q5")({"case": rows}, "radix locks held by none, expected #3")
    assert not t11.explanation("Q5")({"case": rows}, "radix locks held by #3, expected none")
    # both defects of 0.5.18 and 0.5.19 in one pass: no LoRA gate, and fill lengths of one token charged for pages of
    # two (T3) - four admissions where the gate allows two and whole pages three (each takes 2 + 6 of the budget)
    one = QueuedRequest(length=1, output_len=0, max_new_tokens=1)
    both = DecodeQueueCase(page_size=2, requests=(one, replace(one, lora="a"), one, replace(one, lora="a")),
                           free_pages=tuple(range(1, 25)), metadata_buffers=4, request_rows=4, token_budget=31,
                           reserved_decode_tokens=6, max_loras=1)  # fmt: skip
    assert t11.explanation("Q3")({"case": both}, "queue after the pass none, expected #1, #3")
    assert t11.explanation("Q2")({"case": both}, "admitted #0, #1, #2, #3, expected #0, #2 (buffers 4, rows 4, budget")
    assert t11.explanation("Q3")({"case": both}, "queue after the pass #3, expected #1, #3"), "the gate alone"
    assert not t11.explanation("Q3")({"case": both}, "queue after the pass #2, expected #1, #3")
    tighter = {"case": replace(both, token_budget=30)}
    assert not t11.explanation("Q3")(tighter, "queue after the pass none, expected #1, #3")


def test_t12_is_a_send_off_the_staging_grid() -> None:
    """T12 (0.5.17) shows only with the staging grid, and explains S12's grid clauses only as a send that ignores the
    grid gives them: a page-aligned end off the grid, or a send longer than the grid (not the DCP limit)."""
    t12 = KNOWN["T12"]
    row = tuple(range(40, 63))
    staged = {"case": PrefillCase(4, 23, 4, row, (18, 23), chunked_prefill_size=8)}
    assert t12.shows(staged) and not t12.shows({"case": replace(staged["case"], chunked_prefill_size=None)})
    off = "a non-final send ends at token 16, not on an allowed boundary: [6, 2, 9] -> dst[0:3]; ..."
    assert t12.explains(staged, off)
    assert not t12.explains(staged, off.replace("token 16", "token 17")), "an unaligned end is another defect"
    assert t12.explains(staged, "a send of 12 tokens > 8")
    assert not t12.explains(staged, "a send of 12 tokens > 4"), "a limit that is not the grid is not T12"
    assert not t12.explains(staged, "start_send_idx starts at 0, expected D=4")


def test_t13_is_a_placed_request_handled_as_unplaced() -> None:
    """T13 (0.5.15) shows only for a request the router placed, and explains S19 only as a sender not told of the
    placement fails it: its own rank registered in query mode; a failure following the room, only where its rank is
    not room % DP."""
    t13 = KNOWN["T13"]
    case = PrefillCase(4, 10, 4, tuple(range(40, 50)), (10,))
    placed = {"case": case, "settings": {"attention_dp": (2, 1, "query", True)}}
    assert t13.shows(placed)
    assert not t13.shows({"case": case, "settings": {"attention_dp": (2, 1, "query", False)}})
    assert not t13.shows({"case": case, "settings": {}}), "the default attention DP is unplaced"
    assert t13.explains(placed, "registered [(4242, 1)], expected [] (attention DP (2, 1, 'query', True), room 4242)")
    assert not t13.explains(placed, "registered [(4242, 0)], expected [] (...)"), "another rank is another defect"
    assert not t13.explains(placed, "statuses ['Bootstrapping', 'Failed']: the request must not fail (...)")
    follow = {"case": case, "settings": {"attention_dp": (4, 1, "follow_room", True), "bootstrap_room": 6}}
    assert t13.explains(follow, "statuses ['Bootstrapping', 'Failed']: the request must not fail (attention DP ...)")
    aligned = {"case": case, "settings": {"attention_dp": (4, 2, "follow_room", True), "bootstrap_room": 6}}
    assert not t13.explains(aligned, "statuses ['Bootstrapping', 'Failed']: the request must not fail (...)"), (
        "rank == room % DP: the release does not fail it, so a failure there is another defect"
    )


def test_t20_is_an_all_cp_split_by_page_id() -> None:
    """T20 (0.5.10-0.5.13.post1) shows only where all CP ranks share the transfer of scattered pages, and explains
    S17's partition messages only there: on one ascending run of page ids a split by id is a split by position."""
    t20 = KNOWN["T20"]
    row = tuple(p * 4 + o for p in (5, 6, 2, 9, 3, 8) for o in range(4))[:23]
    scattered = {"case": PrefillCase(4, 23, 4, row, (23,)), "split": ("cp_all", 2)}
    assert t20.shows(scattered)
    message = "rank 0's share is not contiguous: rank 0 of 2 (cp_all): [8] -> dst[0:1]; [11] -> dst[2:3] last aux=0"
    assert t20.explains(scattered, message)
    assert t20.explains(scattered, "positions sent [0, 1, 2, 3], expected every one of [0, 5) (pages [6, 2, 9, 3, 8])")
    assert not t20.explains(scattered, "last flags at transfers [], expected only the final: rank 0 of 2 (cp_all)")
    run = {"case": PrefillCase(4, 23, 4, tuple(range(40, 63)), (23,)), "split": ("cp_all", 2)}
    assert not t20.shows(run) and not t20.explains(run, message), "ascending contiguous pages: another defect"
    assert not t20.explains({**scattered, "split": ("cp_rank0", 2)}, message), "a dummy CP rank is another split"
    assert not t20.explains({**scattered, "split": ("kv_shard", 2)}, "page 9 belongs to rank 1: rank 0 of 2")


def test_t21_is_a_follow_room_request_on_another_rank_let_through() -> None:
    """T21 (0.5.10) explains S19's 'must fail' only for an unplaced request following the room on a rank other than
    room % DP; a placed one is T13's, an aligned one another defect."""
    t21 = KNOWN["T21"]
    case = PrefillCase(4, 10, 4, tuple(range(40, 50)), (10,))
    off = {"case": case, "settings": {"attention_dp": (3, 0, "follow_room", False), "bootstrap_room": 2464085545}}
    message = "statuses ['Bootstrapping']: the request must fail (attention DP (3, 0, 'follow_room', False), ...)"
    assert t21.shows(off) and t21.explains(off, message)
    aligned = {"case": case, "settings": {"attention_dp": (3, 1, "follow_room", False), "bootstrap_room": 2464085545}}
    assert not t21.explains(aligned, message)
    placed = {"case": case, "settings": {"attention_dp": (3, 0, "follow_room", True), "bootstrap_room": 2464085545}}
    assert not t21.explains(placed, message)
    assert not t21.explains(off, "registered [(2464085545, 0)], expected [] (...)")


def test_t9_on_the_prefill_exchange_is_its_token_slices() -> None:
    """T9 (0.4.5.post2) on the prefill exchange explains S10-S12 only where the message shows exactly the transfers
    0.4.5.post2's send_kv_chunk makes (token slices, the mid-page page sent again), and X1's landing past decode's
    list only where a send's token slice is not its page slice."""
    t9 = KNOWN["T9"]
    case = PrefillCase(2, 2, 0, (2, 3), (1, 2), aux_index=0)
    shown = "[1] -> dst[0:1]; [1] -> dst[1:2] last aux=0"
    explain = t9.explanation("S10")
    assert explain({"case": case}, f"sent [1, 1], expected [1]: {shown}")
    assert t9.explanation("S12")(
        {"case": case}, f"a non-final send ends at token 1, not on an allowed boundary: {shown}"
    )
    assert not explain({"case": case}, "sent [1, 1], expected [1]: [1] -> dst[0:1]; [1] -> dst[0:1] last aux=0")
    assert not t9.shows({"case": PrefillCase(1, 2, 0, (2, 3), (1, 2))}), "page size 1: token and page slices agree"
    x1 = t9.explanation("X1")
    assert x1({"pair": (case, None)}, "prefill's sends land on [0, 1] of 1 destinations")
    assert not x1({"pair": (PrefillCase(1, 2, 0, (2, 3), (1, 2)), None)}, "prefill's sends land on [0, 1] of 1 ...")


def test_t14_is_a_raw_swa_tail_charge() -> None:
    """T14 (0.5.17) shows only on a paged hybrid SWA pool with a tail that ends inside a page, and explains a queue
    property's failure only as the pass with raw SWA charges makes it: its 'KV cache is full' where that pass runs out
    of SWA pages, or its admissions where the pages suffice - an under-admission or another request is new."""
    from pdverify.model.queue import DecodeQueueCase, QueuedRequest

    t14 = KNOWN["T14"]
    # production shape: pages of 64, gpt-oss's window of 128, three 1000-token prompts (SWA tails of 168 tokens in 3
    # pages each), 8 free SWA pages and an SWA budget of 512: charged 504, all three are admitted, the third finds 2
    # pages for 3 and _pre_alloc asserts (0.5.18 admits two)
    prompts = tuple(QueuedRequest(1000, output_len=1, max_new_tokens=32) for _ in range(3))
    shaped = DecodeQueueCase(page_size=64, requests=prompts, free_pages=tuple(range(1, 60)), metadata_buffers=3,
                             request_rows=3, token_budget=59 * 64, running=((4096, None),),
                             swa_free_pages=tuple(range(1, 9)), window=128, swa_token_budget=512)  # fmt: skip
    full = "KV cache is full! Bug in memory estimation. available=128, evictable=0, protected=0, required_alloc=1024"
    assert t14.shows({"case": shaped}) and t14.explanation("Q1")({"case": shaped}, full)
    assert t14.explanation("Q3")({"case": shaped}, full + "\nassert False"), "the crash, whichever property met it"
    roomy = replace(shaped, swa_free_pages=tuple(range(1, 10)), swa_token_budget=576)  # aligned charges fit
    assert not t14.explanation("Q1")({"case": roomy}, full), "a pass that never runs out of SWA pages"
    # the pages suffice (9 free, the budget still 512): the raw charges admit the third request past the budget
    over = replace(shaped, swa_free_pages=tuple(range(1, 10)))
    assert t14.explanation("Q2")({"case": over}, "admitted #0, #1, #2, expected #0, #1 (buffers 3, rows 3, budget")
    assert t14.explanation("Q3")({"case": over}, "queue after the pass none, expected #2")
    assert not t14.explanation("Q2")({"case": over}, "admitted #0, expected #0, #1 (buffers 3, rows 3, budget")
    assert not t14.explanation("Q4")({"case": over}, "192 tokens allocated, the budget was 128"), "not T14's message"
    aligned = replace(shaped, requests=tuple(replace(r, length=1024) for r in prompts))  # tails of whole pages
    assert not t14.shows({"case": aligned}) and not t14.shows({"case": replace(shaped, swa_free_pages=None,
                                                                                swa_token_budget=None)})  # fmt: skip
    # every property that runs the pass meets the crash (a generation campaign's Q1 on 0.5.16 ended on it while T14
    # was recorded for Q2 and Q3 only); there the crash alone is T14's, not another property's own message
    assert t14.releases_for("Q2")[-1] == "0.5.17" and t14.properties() == ("Q2", "Q1", "Q3", "Q4", "Q5", "Q6")
    for q in ("Q4", "Q5", "Q6"):
        assert t14.explanation(q)({"case": shaped}, full), f"{q} meets the crash"
        assert not t14.explanation(q)({"case": roomy}, full), f"{q}: a pass that never runs out of SWA pages"
    assert not t14.explanation("Q6")({"case": over}, "handshake [('metadata', 0)], expected [('metadata', 0), ...]")


def test_t15_is_the_staging_room_registered_after_the_metadata() -> None:
    """T15 (0.5.11-0.5.16) shows only with staging on and a device-bound request, and explains Q6's message only as
    the handshake with each staging registration moved behind its request's metadata (and recompute request): a
    registration missing, or moved elsewhere, is new."""
    from pdverify.model.queue import DecodeQueueCase, QueuedRequest

    t15 = KNOWN["T15"]
    case = DecodeQueueCase(page_size=4, requests=(QueuedRequest(5, rebootstrap=True), QueuedRequest(6)),
                           free_pages=tuple(range(1, 17)), metadata_buffers=2, request_rows=2, token_budget=64,
                           staging=True)  # fmt: skip
    assert t15.shows({"case": case}) and not t15.shows({"case": replace(case, staging=False)})
    want = "[('staging', 0), ('metadata', 0), ('recompute', 0), ('staging', 1), ('metadata', 1)]"
    late = "[('metadata', 0), ('recompute', 0), ('staging', 0), ('metadata', 1), ('staging', 1)]"
    assert t15.explains({"case": case}, f"handshake {late}, expected {want}\nassert [...] == [...]")
    between = "[('metadata', 0), ('staging', 0), ('recompute', 0), ('metadata', 1), ('staging', 1)]"
    assert not t15.explains({"case": case}, f"handshake {between}, expected {want}"), "not after the recompute"
    lost = "[('metadata', 0), ('recompute', 0), ('metadata', 1), ('staging', 1)]"
    assert not t15.explains({"case": case}, f"handshake {lost}, expected {want}"), "a registration lost is new"
    assert not t15.explains({"case": case}, f"handshake {want}, expected {want}")
    assert not t15.explains({"case": case}, "#0 registered pages [1, 2] (int32), holds [1]")
    assert t15.releases[0] == "0.5.10" and t15.releases[-1] == "0.5.16" and not t15.recorded_for(_release("0.5.17"))


def test_t16_is_an_aborted_receiver_left_uncleared() -> None:
    """T16 (0.5.11-0.5.13.post1) shows only with a request aborted while queued, and explains Q1's receiver clause
    only as the expected releases less every aborted request: a live request's receiver missing as well is new."""
    from pdverify.model.queue import DecodeQueueCase, QueuedRequest

    t16 = KNOWN["T16"]
    reqs = (QueuedRequest(9, aborted=True), QueuedRequest(6), QueuedRequest(5), QueuedRequest(7))
    case = DecodeQueueCase(page_size=4, requests=reqs, free_pages=tuple(range(1, 17)), metadata_buffers=4,
                           request_rows=4, token_budget=64)  # fmt: skip
    assert t16.shows({"case": case}) and not t16.shows({"case": replace(case, requests=reqs[1:])})
    assert not t16.shows({"case": replace(case, requests=(replace(reqs[0], checked=False),), restrict=True)})
    assert t16.explains({"case": case}, "receivers released for none, expected #0\nassert [] == [0]")
    assert not t16.explains({"case": case}, "receivers released for #0, expected #0")
    assert not t16.explains({"case": case}, "receivers released for #1, expected #0"), "another request's: new"
    assert not t16.explains({"case": case}, "failed none, expected #0")
    swa = "receivers released for #2, expected #0, #2"  # a request failed for its SWA tail keeps its clear
    assert t16.explains({"case": case}, swa)
    assert t16.releases == ("0.4.6.post5", "0.4.7", *QUEUE_READ_ONCE, "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13",
                            "0.5.13.post1")  # fmt: skip


def _release(version: str) -> object:
    from types import SimpleNamespace

    return SimpleNamespace(package="sglang", release=version)


def test_t17_is_a_pass_in_arrival_order() -> None:
    """T17 (0.5.11) shows only under priority scheduling where the priority order is not the arrival order, and
    explains a queue property's message only as the pass in arrival order gives it: another order is new."""
    from pdverify.model.queue import DecodeQueueCase, QueuedRequest

    t17 = KNOWN["T17"]
    reqs = (QueuedRequest(5, priority=1), QueuedRequest(6, priority=3), QueuedRequest(7, priority=1))
    case = DecodeQueueCase(page_size=4, requests=reqs, free_pages=tuple(range(1, 17)), metadata_buffers=2,
                           request_rows=3, token_budget=64, priority_order="high_first")  # fmt: skip
    assert t17.shows({"case": case})
    assert not t17.shows({"case": replace(case, priority_order=None)})
    assert not t17.shows({"case": replace(case, priority_order="low_first", requests=reqs[:1])}), "one request"
    in_order = replace(case, requests=(reqs[1], reqs[0], reqs[2]))  # the highest first already: the sort is a no-op
    assert not t17.shows({"case": in_order})
    q2 = t17.explanation("Q2")
    assert q2({"case": case}, "admitted #0, #1, expected #1, #0 (buffers 2, rows 3, budget 64 tokens)")
    assert not q2({"case": case}, "admitted #1, #2, expected #1, #0 (buffers 2, rows 3, budget 64 tokens)")
    one = {"case": replace(case, metadata_buffers=1)}  # arrival admits #0, the priority order #1
    assert t17.explanation("Q3")(one, "queue after the pass #1, #2, expected #0, #2")
    assert not t17.explanation("Q3")(one, "queue after the pass #2, #1, expected #0, #2"), "another order"
    assert not q2({"case": case}, "2 tokens allocated, the budget was 1"), "not a pass-level message"
    assert t17.properties() == ("Q2", "Q1", "Q3", "Q5") and t17.releases[0] == "0.5.3" and t17.releases[-1] == "0.5.11"
    assert t17.releases_for("Q5") == ("0.5.11",), "Q5 is about radix locks: no decode radix cache before 0.5.11"


def test_t3_where_the_budget_is_read_once() -> None:
    """To 0.5.10.post1 the pass reads its budget once and takes each admission's raw prompt length and headroom from
    it: T3's overshoot adds up over the admissions, and Q2 sees every admission the whole pages would have refused."""
    from pdverify.model.queue import DecodeQueueCase, QueuedRequest
    from pdverify.properties.releases import bind_release

    t3 = KNOWN["T3"]
    assert {"0.4.7.post1", "0.5.10.post1", "0.5.11"} <= set(t3.releases_for("Q4"))
    one = QueuedRequest(length=1, output_len=0, max_new_tokens=1)
    case = DecodeQueueCase(page_size=4, requests=(one, one, one), free_pages=tuple(range(1, 9)), metadata_buffers=3,
                           request_rows=3, token_budget=3)  # fmt: skip
    args = {"case": case}
    assert t3.shows(args)
    assert not t3.explanation("Q4")(args, "8 tokens allocated, the budget was 3"), "0.5.11 on: less than a page over"
    bind_release("0.5.10.post1")  # the explanations replay the form of the release under check
    try:
        _read_once_explanations(t3, args)
    finally:
        bind_release(None)


def _read_once_explanations(t3: Any, args: dict[str, Any]) -> None:
    # each needs max(1 raw token, 1 + 1 new token) = 2 and is charged its 1 raw token: 3, 2, 1 - two admitted, whose
    # pages take 4 each: 8 allocated (the re-read form stops after the first, 4)
    assert t3.explanation("Q4")(args, "8 tokens allocated, the budget was 3")
    assert not t3.explanation("Q4")(args, "12 tokens allocated, the budget was 3"), "neither form allocates 12"
    # the contract admits none (4 > 3, in both forms); the read-once pass with raw lengths the first two
    assert t3.explanation("Q2")(args, "admitted #0, #1, expected none (buffers 3, rows 3, budget 3 tokens)")
    assert t3.explanation("Q3")(args, "queue after the pass #2, expected #0, #1, #2")
    assert not t3.explanation("Q2")(args, "admitted #0, #1, expected #0 (buffers 3, rows 3, budget 3 tokens)")
    assert not t3.explanation("Q3")(args, "queue after the pass #1, #2, #0, expected #0, #1, #2")


def _bound(release: str, check: Any) -> None:
    """``check()`` with the input domain (and so the queue explanations' form) of ``release``."""
    from pdverify.properties.releases import bind_release

    bind_release(release)
    try:
        check()
    finally:
        bind_release(None)


def test_t18_is_an_aborted_request_admitted() -> None:
    """T18 (0.4.4.post2-0.4.6.post4): no abort scan - an aborted request is admitted like a live one; only the pass
    with that defect explains, not another admission."""
    from pdverify.model.queue import DecodeQueueCase, QueuedRequest

    t18 = KNOWN["T18"]
    assert t18.releases[0] == "0.4.4.post2" and t18.releases[-1] == "0.4.6.post4"
    r = QueuedRequest
    case = DecodeQueueCase(page_size=4, requests=(r(9, aborted=True), r(6), r(5, bootstrapped=False), r(7)),
                           free_pages=tuple(range(1, 17)), metadata_buffers=4, request_rows=4,
                           token_budget=64)  # fmt: skip
    args = {"case": case}
    assert t18.shows(args) and not t18.shows({"case": replace(case, requests=case.requests[1:])})

    def check() -> None:
        assert t18.explanation("Q1")(args, "failed none, expected #0")
        assert not t18.explanation("Q1")(args, "failed none, expected #0, #1"), "not what the oracle expects"
        assert t18.explanation("Q2")(args, "admitted #0, #1, #3, expected #1, #3 (buffers 4, rows 4, budget 64 tokens)")
        assert not t18.explanation("Q2")(args, "admitted #1, #3, #0, expected #1, #3 (buffers 4, rows 4, budget 64")
        assert t18.explanation("Q3")(args, "queue after the pass #2, expected #2") is False, "no difference, no failure"

    _bound("0.4.6.post4", check)


def test_t19_is_admission_without_the_room_to_finish() -> None:
    """T19 (0.4.4.post2-0.4.7): admission does not check that a request can finish with the running requests
    retracted; it shows only where that need exceeds the request's pages and headroom."""
    from pdverify.model.queue import DecodeQueueCase, QueuedRequest

    t19 = KNOWN["T19"]
    assert t19.releases[0] == "0.4.4.post2" and t19.releases[-1] == "0.4.7"
    long = QueuedRequest(length=2, output_len=0, max_new_tokens=20)
    case = DecodeQueueCase(page_size=1, requests=(long, long), free_pages=tuple(range(1, 30)), metadata_buffers=2,
                           request_rows=2, token_budget=10, running=((1, None),))  # fmt: skip
    args = {"case": case}
    assert t19.shows(args)  # 2 + 20 - 1 = 21 > 2: the check refuses both
    assert not t19.shows({"case": replace(case, requests=(replace(long, max_new_tokens=1),) * 2)})

    def check() -> None:
        assert t19.explanation("Q2")(args, "admitted #0, #1, expected none (buffers 2, rows 2, budget 10 tokens)")
        assert not t19.explanation("Q2")(args, "admitted #0, expected none (buffers 2, rows 2, budget 10 tokens)")
        assert t19.explanation("Q3")(args, "queue after the pass none, expected #0, #1")
        assert not t19.explanation("Q3")(args, "queue after the pass #1, expected #0, #1")

    _bound("0.4.7", check)


def test_t23_t24_are_failed_receivers_not_polled() -> None:
    """T23 (0.4.9.post5-0.5.12.post1) and T24 (0.4.6.post5-0.5.19): the receivers are not polled while every queued
    one is ready, so a failed one's request is admitted (or left queued); T24's signature leaves out, from 0.5.13, a
    queue with an aborted receiver (#25561 polls then), and only the pass without the polling explains."""
    from pdverify.model.queue import DecodeQueueCase, QueuedRequest

    t23, t24 = KNOWN["T23"], KNOWN["T24"]
    assert (t23.releases[0], t23.releases[-1]) == ("0.4.9.post5", "0.5.12.post1")
    assert (t24.releases[0], t24.releases[-1]) == ("0.4.6.post5", "0.5.19")
    r = QueuedRequest
    peer = DecodeQueueCase(page_size=4, requests=(r(6, receiver_failed="peer"), r(5)), free_pages=tuple(range(1, 17)),
                           metadata_buffers=2, request_rows=2, token_budget=64)  # fmt: skip
    both = replace(peer, requests=(r(6, receiver_failed="peer"), r(5, receiver_failed="abort")))
    waiting = replace(peer, requests=(r(6, receiver_failed="peer"), r(5, bootstrapped=False)))
    assert t24.shows({"case": peer}) and not t23.shows({"case": peer}) and not t24.shows({"case": waiting})

    def old() -> None:
        assert t23.shows({"case": both}) and t24.shows({"case": both})
        assert t24.explanation("Q1")({"case": peer}, "failed none, expected #0")
        tail = "(buffers 2, rows 2, budget 64 tokens)"
        assert t24.explanation("Q2")({"case": peer}, f"admitted #0, #1, expected #1 {tail}")
        assert not t24.explanation("Q2")({"case": peer}, f"admitted #0, expected #1 {tail}")
        # polled anyway (a receiver still bootstrapping): the pass without the polling fails #0 too
        assert not t24.explanation("Q1")({"case": waiting}, "failed none, expected #0")

    def late() -> None:
        assert t23.shows({"case": both}) and not t24.shows({"case": both}), "the aborted receiver makes 0.5.13 poll"
        assert t24.explanation("Q1")({"case": peer}, "failed none, expected #0")

    _bound("0.5.12", old)
    _bound("0.5.13", late)


def _checksum(**kw: Any) -> Any:
    from pdverify.model.checksum import ChecksumCase

    base: dict[str, Any] = {"page_size": 128, "prompt": 300, "prefill_pages": (5, 2, 7), "decode_pages": (3, 6, 1),
                            "chunk_ends": (300,), "kv_cache_dtype": "mxfp8"}  # fmt: skip
    return ChecksumCase(**{**base, **kw})


def test_f4_f5_and_f3_on_swa_are_their_own_failures() -> None:
    """F4 is the MXFP8 pool's assert, F5 a block-scale digest at the SWA window's pages, F3 (on a hybrid SWA pool)
    decode's window over the prompt alone; each explains nothing else."""
    f3, f4, f5 = KNOWN["F3"], KNOWN["F4"], KNOWN["F5"]
    mx = {"case": _checksum()}
    raised = "the handoff raised: prefill: AssertionError at checksum.py:120 `assert state_indices_gpu is not None`"
    assert f4.shows(mx) and f4.explains(mx, raised + "\nassert not '...'")  # pytest's rewriting appends a line
    assert not f4.explains(mx, raised.replace("prefill", "decode"))
    assert not f4.explains(mx, "the handoff raised: prefill: AssertionError at checksum.py:120 `assert x`")
    swa = {"case": _checksum(sliding_window=200, prefill_swa_pages=(4, 6, 2), decode_swa_pages=(2, 8, 5))}
    assert not f4.shows(swa) and f5.shows(swa) and not f5.shows(mx)
    # the window [100, 300) page-aligned down: logical pages 0-2, prefill's SWA pages [4, 6, 2]
    assert f5.explains(swa, "prefill's digest read block_scale items [4, 6, 2], expected those its block_scale ...")
    assert not f5.explains(swa, "prefill's digest read block_scale items [5, 2, 7], expected ...")
    assert not f5.explains(swa, "decode's digest read swa items [2, 8, 5], expected ...")
    # a rebootstrap whose one kept output moves decode's window (pages [1, 2]) but not its pages: F3 on SWA
    moved = {"case": _checksum(kv_cache_dtype="auto", page_size=2, prompt=5, outputs=1, rebootstrap=True,
                               prefill_pages=(5, 2, 7), decode_pages=(3, 6, 1), chunk_ends=(6,), sliding_window=2,
                               prefill_swa_pages=(4, 6, 2), decode_swa_pages=(2, 8, 5))}  # fmt: skip
    assert f3.shows(moved)
    assert f3.explains(moved, "decode's digest read swa items [8, 5], expected those its swa payload carries ...")
    assert not f3.explains(moved, "decode's digest read swa items [5], expected ...")
    assert not f3.explains({"case": _checksum(kv_cache_dtype="auto", page_size=2, prompt=5, outputs=1,
                                               rebootstrap=True, prefill_pages=(5, 2, 7), decode_pages=(3, 6, 1),
                                               chunk_ends=(6,))},
                           "decode's digest read swa items [8, 5], expected ...")  # fmt: skip
    still = {"case": _checksum(kv_cache_dtype="auto", page_size=4, prompt=5, outputs=1, rebootstrap=True,
                               prefill_pages=(5, 2), decode_pages=(3, 6), chunk_ends=(6,), sliding_window=8,
                               prefill_swa_pages=(4, 6), decode_swa_pages=(2, 8))}  # fmt: skip
    assert not f3.shows(still)  # the window [0, 5) and [0, 6) cover the same pages


def test_f6_is_a_digest_at_the_mamba_slot() -> None:
    """F6: a hybrid linear DSA pool digests its index keys (and tail) at the side's Mamba slot, or - the tail past its
    rows - reads out of bounds; it explains neither a digest at the right pages nor another pool's failure."""
    f6 = KNOWN["F6"]
    flash = {"case": _checksum(kv_cache_dtype="auto", page_size=256, prompt=1000, prefill_pages=(6, 2, 9, 4),
                               decode_pages=(3, 7, 1, 8), chunk_ends=(512, 1000), kv_pool="mamba_dsa",
                               dsa_index_kpool=4, prefill_mamba_slot=5, decode_mamba_slot=3)}  # fmt: skip
    assert f6.shows(flash) and not f6.shows({"case": _checksum()})
    assert f6.explains(flash, "prefill's digest read dsa items [5], expected those its dsa payload carries ...")
    assert f6.explains(flash, "decode's digest read dsa_tail items [3], expected those its dsa_tail payload ...: []")
    assert not f6.explains(flash, "decode's digest read dsa items [5], expected ...")  # prefill's slot, not decode's
    assert not f6.explains(flash, "prefill's digest read dsa items [6, 2, 9, 4], expected ...")
    oob = ("the handoff raised: decode: the digest read 1024 bytes at address 9400, on no registered buffer's item "
           "grid (on a GPU: an out-of-bounds device read)")  # fmt: skip
    assert f6.explains(flash, oob + "\nassert not '...'")
    plain = {
        "case": _checksum(
            kv_cache_dtype="auto",
            page_size=64,
            prompt=1,
            prefill_pages=(1,),
            decode_pages=(6,),
            chunk_ends=(1,),
            kv_pool="mamba_dsa",
            prefill_mamba_slot=1,
            decode_mamba_slot=3,
        )
    }
    assert f6.explains(plain, "decode's digest read dsa items [3], expected those its dsa payload carries ...: [6]")
    assert not f6.explains(plain, oob)  # no compressed tail: nothing of it to read past
    qsa = {"case": _checksum(kv_cache_dtype="auto", page_size=64, prompt=80, prefill_pages=(3, 5), decode_pages=(2, 4),
                             chunk_ends=(80,), kv_pool="mamba_qsa", prefill_mamba_slot=2, decode_mamba_slot=3,
                             prefill_row=4, decode_row=6)}  # fmt: skip
    assert f6.shows(qsa)
    assert f6.explains(qsa, "prefill's digest read qsa_pending items [2], expected those its qsa_pending payload ...")
    assert f6.explains(qsa, "decode's digest read qsa_compressed items [3], expected ...: [2, 4]")
    assert not f6.explains(qsa, "prefill's digest read qsa_pending items [4], expected ...")  # its row, not its slot
    assert f6.explains(qsa, oob.replace("decode", "prefill"))  # the ring read past the request rows


def test_t25_t26_are_crashes_of_the_sampling_info() -> None:
    """T25 (to 0.5.16): ``min_new_tokens`` with a tokenizer that has no end-of-sequence token; T26 (0.5.3-0.5.20):
    deterministic inference with a seed its tensor cannot hold. Each explains only its own crash of
    ``from_schedule_batch`` (the adapter's ``SamplingInfoRaised``), on every prebuilt property that runs a drawn
    batch."""
    from pdverify.model.batch import PrebuiltBatch, Request, SamplingSettings

    t25, t26 = KNOWN["T25"], KNOWN["T26"]
    assert (t25.releases[0], t25.releases[-1]) == ("0.4.4.post2", "0.5.16")
    assert (t26.releases[0], t26.releases[-1]) == ("0.5.3", "0.5.20")
    assert {"P19", "P27", "P30"} <= set(t25.properties()) and set(t26.properties()) - set(t25.properties()) == {
        "P22", "P22b", "P28", "B3"}  # fmt: skip
    assert t26.releases_for("B3") == ("0.5.18", "0.5.19", "0.5.20") and t25.releases_for("P24")[0] == "0.5.6"

    def batch(eos: int | None = None, deterministic: bool = False, **sampling: Any) -> dict[str, Any]:
        req = Request(0, 0, 1, [0], [], sampling=SamplingSettings(**sampling))
        return {"batch": PrebuiltBatch([req], [[1]], eos_token_id=eos, enable_deterministic_inference=deterministic)}

    assert t25.shows(batch(min_new_tokens=2)) and not t25.shows(batch(eos=3, min_new_tokens=2))
    assert not t25.shows(batch())
    assert t26.shows(batch(deterministic=True, sampling_seed=2**31)) and not t26.shows(batch(sampling_seed=2**31))
    assert not t26.shows(batch(deterministic=True, sampling_seed=2**31 - 1))
    assert t26.shows(batch(deterministic=True, sampling_seed="42")) and not t26.shows(batch(sampling_seed="42"))
    none_eos = "building the sampling info raised TypeError at min_new_tokens.py:34: 'NoneType' object cannot be "
    int32 = "building the sampling info raised RuntimeError at sampling_batch_info.py:91: value cannot be converted "
    int64 = "building the sampling info raised ValueError at sampling_batch_info.py:98: Overflow when unpacking long"
    none_eos += "interpreted as an integer"
    assert t25.explanation("P27")({}, none_eos)
    assert not t25.explanation("P27")({}, int64) and not t26.explanation("P19")({}, none_eos)
    assert t26.explanation("P19")({}, int32 + "to type int32 without overflow") and t26.explanation("P30")({}, int64)
    assert not t26.explanation("P19")({}, "seq_lens [1] != expected [2]")
    string = "building the sampling info raised TypeError at sampling_batch_info.py:120: 'str' object cannot be "
    assert t26.explanation("P19")({}, string + "interpreted as an integer") and not t25.explanation("P19")({}, string)


def test_t27_is_the_penalizer_without_a_tokenizer() -> None:
    """T27 (to 0.5.13.post1): ``min_new_tokens`` on a server started with ``--skip-tokenizer-init`` - no tokenizer at
    all, where T25's has one without an eos. Each signature leaves the other's batches out, and T27 explains only
    the penalizer's ``AttributeError`` on the None tokenizer."""
    from pdverify.model.batch import PrebuiltBatch, Request, SamplingSettings

    t25, t27 = KNOWN["T25"], KNOWN["T27"]
    assert (t27.releases[0], t27.releases[-1]) == ("0.4.4.post2", "0.5.13.post1")
    assert t27.properties() == t25.properties() and t27.releases_for("P24")[0] == "0.5.6"

    def batch(skip: bool, min_new_tokens: int) -> dict[str, Any]:
        req = Request(0, 0, 1, [0], [], sampling=SamplingSettings(min_new_tokens=min_new_tokens))
        return {"batch": PrebuiltBatch([req], [[1]], skip_tokenizer_init=skip)}

    assert t27.shows(batch(True, 1)) and not t27.shows(batch(True, 0)) and not t27.shows(batch(False, 1))
    assert t25.shows(batch(False, 1)) and not t25.shows(batch(True, 1))
    no_tokenizer = ("building the sampling info raised AttributeError at min_new_tokens.py:31: 'NoneType' object has "
                    "no attribute 'additional_stop_token_ids'")  # fmt: skip
    none_eos = ("building the sampling info raised TypeError at min_new_tokens.py:27: 'NoneType' object cannot be "
                "interpreted as an integer")  # fmt: skip
    assert t27.explanation("P19")({}, no_tokenizer) and t27.explanation("P30")({}, no_tokenizer)
    assert not t27.explanation("P19")({}, none_eos) and not t25.explanation("P19")({}, no_tokenizer)
    assert not t27.explanation("P19")({}, "seq_lens [1] != expected [2]")


def test_t28_is_the_penalizer_without_the_models_eos_ids() -> None:
    """T28 (to 0.5.18): the ``min_new_tokens`` penalizer leaves out the model configuration's eos ids. It shows only
    where such an id is neither a stop token of the request nor the tokenizer's eos, and explains P27's message only
    when exactly those ids are missing and nothing extra is held back."""
    from pdverify.model.batch import PrebuiltBatch, Request, SamplingSettings

    t28 = KNOWN["T28"]
    assert (t28.releases[0], t28.releases[-1], t28.properties()) == ("0.4.4.post2", "0.5.18", ("P27",))

    def batch(model: tuple[int, ...], stops: list[int] | None = None, minimum: int = 1) -> dict[str, Any]:
        sampling = SamplingSettings(min_new_tokens=minimum, stop_token_ids=stops)
        return {"batch": PrebuiltBatch([Request(0, 0, 1, [0], [], sampling=sampling)], [[1]], eos_token_id=2,
                                       model_eos_token_ids=model)}  # fmt: skip

    assert t28.shows(batch((2, 3))) and not t28.shows(batch((2,))) and not t28.shows(batch((2, 3), stops=[3]))
    eom = batch((2, 3))
    eom["batch"] = replace(eom["batch"], additional_stop_token_ids=(3,))
    assert not t28.shows(eom), "the tokenizer's additional stop token is held back on every release"
    assert not t28.shows(batch((2, 3), minimum=0)) and not t28.shows(batch(()))
    head = "request 0 (min_new_tokens=1) is held back from tokens [2], expected the tokens it finishes on [2, 3]: "
    assert t28.explains(batch((2, 3)), head + "missing [3], extra [] (its stop_token_ids None, ...)")
    assert not t28.explains(batch((2, 3)), head + "missing [3], extra [5] (...)")  # something else held back
    assert not t28.explains(batch((2, 3)), head.replace("[2, 3]", "[2, 3, 4]") + "missing [3, 4], extra []")
    assert not t28.explains(batch((2, 3)), "the penalizer's minimums [0] != the requests' [1]")


def test_t3_with_t17s_arrival_order() -> None:
    """0.5.3-0.5.10.post1 read the budget once and do not sort the queue by priority (T17): Q4's overshoot is the
    raw-length pass in arrival order (generated on 0.5.3-0.5.6.post2: four requests, the 23-token one first in arrival
    and last in priority, a 25-token budget; the release admits it and two 1-token ones, 48 tokens)."""
    from pdverify.model.queue import DecodeQueueCase, QueuedRequest

    t3 = KNOWN["T3"]
    one = QueuedRequest(length=1, output_len=0, max_new_tokens=1)
    case = DecodeQueueCase(page_size=12, requests=(replace(one, length=23, priority=1), one, one, one),
                           free_pages=tuple(range(1, 10)), metadata_buffers=4, request_rows=4, token_budget=25,
                           running=((1, None),), priority_order="low_first", max_loras=1)  # fmt: skip
    args = {"case": case}

    def explained() -> None:
        assert t3.explanation("Q4")(args, "48 tokens allocated, the budget was 25")
        assert not t3.explanation("Q4")(args, "60 tokens allocated, the budget was 25"), "no order allocates 60"

    def not_after_the_sort() -> None:
        assert not t3.explanation("Q4")(args, "48 tokens allocated, the budget was 25")

    _bound("0.5.3", explained)
    # 0.5.12 on sorts: arrival order explains nothing there (and the budget is re-read: less than a page over)
    _bound("0.5.12", not_after_the_sort)


def test_f7_is_a_stop_id_past_the_penalizers_table() -> None:
    """F7 (every release): a stop id outside ``[0, vocab_size]`` in a batch where a request - any - asks for
    ``min_new_tokens``, on a server with a tokenizer (without one T27's crash, or 0.5.14's refusal, comes first). The
    padding id ``vocab_size`` is no stray. F7 explains only the penalizer's out-of-bounds scatter of one of the batch's
    strays in a table of ``vocab_size + 1`` columns."""
    from pdverify.findings import F7_RELEASES, PREBUILT_35070, PREBUILT_OBSERVERS
    from pdverify.model.batch import PrebuiltBatch, Request, SamplingSettings

    f7 = KNOWN["F7"]
    assert f7.releases == F7_RELEASES and (f7.releases[0], f7.releases[-1], len(f7.releases)) == (
        "0.4.4.post2",
        "0.5.23",
        69,
    )
    assert f7.properties() == ("P19", *PREBUILT_OBSERVERS, *PREBUILT_35070)
    assert f7.releases_for("P24")[0] == "0.5.6" and f7.releases_for("B3") == F7_RELEASES[-6:]

    def batch(stops: list[int], minimum: int = 1, *, skip: bool = False, same: bool = False) -> dict[str, Any]:
        asking = Request(0, 0, 1, [0], [], sampling=SamplingSettings(min_new_tokens=minimum))
        other = Request(1, 0, 1, [0], [], sampling=SamplingSettings(min_new_tokens=minimum if same else 0,
                                                                   stop_token_ids=stops))  # fmt: skip
        reqs = [other] if same else [asking, other]
        return {"batch": PrebuiltBatch(reqs, [[1], [2]], eos_token_id=None if skip else 2, skip_tokenizer_init=skip)}

    assert f7.shows(batch([33])) and f7.shows(batch([-1])) and f7.shows(batch([5, 151645], same=True))
    assert not f7.shows(batch([32])) and not f7.shows(batch([0, 31])), "the padding column and the vocabulary"
    assert not f7.shows(batch([33], minimum=0)) and not f7.shows(batch([33], skip=True))
    head = "building the sampling info raised RuntimeError at min_new_tokens.py:65: index "
    assert f7.explanation("P19")(batch([33]), head + "33 is out of bounds for dimension 1 with size 33")
    assert f7.explanation("B3")(batch([-1]), head + "-1 is out of bounds for dimension 1 with size 33")
    assert not f7.explanation("P19")(batch([33]), head + "34 is out of bounds for dimension 1 with size 33")
    assert not f7.explanation("P19")(batch([33]), head + "33 is out of bounds for dimension 1 with size 34")
    assert not f7.explanation("P19")(batch([33]), head.replace("min_new_tokens", "sampling_batch_info") + "33 is out "
                                     "of bounds for dimension 1 with size 33")  # fmt: skip
    assert not KNOWN["T25"].explanation("P19")({}, head + "33 is out of bounds for dimension 1 with size 33")


def test_t14_is_pinned_for_its_properties() -> None:
    """T14's evidence does not hang on what the generator draws: the queue properties' explicit examples hold a case
    in its signature (a hybrid SWA pool whose tails end inside a page, against an SWA budget they overrun in pages),
    and one where the raw charges run the SWA pool out of pages: the crash every property that runs the pass meets."""
    from pdverify.properties.test_decode_queue import EXAMPLES

    t14 = KNOWN["T14"]
    assert t14.properties() == ("Q2", "Q1", "Q3", "Q4", "Q5", "Q6")
    assert any(t14.shows({"case": case}) for case in EXAMPLES)
    crash = "KV cache is full! Bug in memory estimation. available=0, evictable=0, protected=0, required_alloc=64"
    assert any(t14.shows({"case": case}) and t14.explanation("Q4")({"case": case}, crash) for case in EXAMPLES)


def test_t32_is_pinned_for_q5() -> None:
    """T32's Q5 form does not hang on the draws either (the ci draws of 0.5.12-0.5.15.post1 reached it on no example,
    and the matrix's gate would call the record stale): the queue's explicit examples hold a PP pass with the decode
    radix cache whose bad-listed request has a matched prefix - the lock the defective step keeps."""
    from pdverify.properties.test_decode_queue import EXAMPLES

    t32 = KNOWN["T32"]
    assert "Q5" in t32.properties() and t32.releases_for("Q5")[0] == "0.5.11"
    pinned = [c for c in EXAMPLES if c.pp_consensus and c.radix and t32.shows({"case": c})]
    assert any(r.consensus == "bad" and r.prefix_pages for c in pinned for r in c.requests)


def test_t32_explains_a_pp_pass_with_t14s_raw_swa_charges() -> None:
    """On 0.5.12-0.5.16 a PP stage's pass both polls its own receivers (T32) and charges raw SWA tails (T14): stop
    64's draws met the two at once on Q3, and T32's explanation replays T14's charges there - nowhere T14 is not."""
    from pdverify.model.queue import DecodeQueueCase, QueuedRequest
    from pdverify.properties.releases import bind_release

    t32 = KNOWN["T32"]
    good = QueuedRequest(1, output_len=0, max_new_tokens=1, consensus="good")
    bad = QueuedRequest(1, output_len=0, max_new_tokens=3, priority=1, receiver_failed="peer", consensus="bad")
    # four 1-token tails of one 2-token page each against an SWA budget of 7: charged 1 token each, all four go and the
    # bad one, sorted last, finds 3 left for its 4 and stays; the pass given the consensus admits three, fails it
    case = DecodeQueueCase(page_size=2, requests=(bad, good, good, good, good), free_pages=tuple(range(1, 26)),
                           metadata_buffers=5, request_rows=5, token_budget=50, priority_order="low_first",
                           max_loras=1, pp_consensus=True, swa_free_pages=tuple(range(1, 16)), window=1,
                           swa_token_budget=7)  # fmt: skip
    message = "queue after the pass #0, expected #4"
    try:
        bind_release("0.5.12")
        assert t32.shows({"case": case}) and t32.explanation("Q3")({"case": case}, message)
        assert not t32.explanation("Q3")({"case": case}, "queue after the pass none, expected #4")
        bind_release("0.5.11")  # no SWA-tail pre-allocation, no T14: not this pass
        assert not t32.explanation("Q3")({"case": case}, message)
    finally:
        bind_release(None)


def test_t30_is_the_missing_token_ids_row_and_t29_the_cleared_top_logprobs() -> None:
    """T30 (0.4.6.post5-0.5.22): a committed request naming token ids holds no token-ids row. It shows only where a
    transferred request asks for logprobs of named ids, and explains Q7's rows message only when the token-ids count
    alone is 0 where one was due. T29 explains the top-logprob message only as decode's cleared pairs."""
    from pdverify.model.transfer_queue import Transfer, TransferQueueCase

    t29, t30 = KNOWN["T29"], KNOWN["T30"]
    assert (t30.releases[0], t30.releases[-1], t30.properties()) == ("0.4.6.post5", "0.5.22", ("Q7",))
    named = Transfer(room=3, decode_slot=0, prefill_slot=0, first_token=1, logprob=-1.0, token_ids_logprob=(4,))
    plain = replace(named, room=4, decode_slot=1, prefill_slot=1, token_ids_logprob=None)
    case = {"case": TransferQueueCase(transfers=(named, plain), slots=2)}
    assert t30.shows(case)
    assert not t30.shows({"case": TransferQueueCase(transfers=(plain,), slots=2)})
    assert not t30.shows({"case": TransferQueueCase(transfers=(replace(named, poll="transferring"),), slots=2)})
    assert not t30.shows({"case": "not a queue"})
    head = "the committed requests [#0, #1] hold (token, top, token-ids) logprob rows "
    tail = " for their one output token, expected [(1, None, 1), (1, None, None)] (one row in each list asked for"
    assert t30.explains(case, head + "[(1, None, 0), (1, None, None)]" + tail)
    assert not t30.explains(case, head + "[(1, None, 1), (1, None, None)]" + tail)  # no difference
    assert not t30.explains(case, head + "[(0, None, 0), (1, None, None)]" + tail)  # the token row lost too
    assert not t30.explains(case, head + "[(1, None, 0)]" + tail)  # a request missing
    assert not t30.explains(case, head + "[(1, None, 0), (1, None, None)" + tail)  # unreadable
    assert not t30.explains(case, "committed [#1], expected every successful transfer [#0, #1] (rooms [3, 4])")
    top = "the committed requests [#0] hold first-token top logprobs {}, prefill computed {} (None: no top logprobs)"
    want = "[((-0.5, 9), (-1.0, 7))]"
    assert t29.explains(case, top.format("[((0.0, 0), (0.0, 0))]", want))
    assert not t29.explains(case, top.format("[((0.0, 0),)]", want))  # one pair short: not the cleared row
    assert not t29.explains(case, top.format("[((-0.5, 9), (0.0, 7))]", want))
    assert not t29.explains(case, top.format("[(0.0, x)]", want))  # unreadable


def test_f9_is_a_request_past_the_row_admitted() -> None:
    """F9 (0.4.6.post5-0.5.23): a request asking for more top logprobs than the metadata row holds is admitted. It
    shows only where a request asks past the row, and explains Q8's message only when exactly those requests were
    admitted (raised in prefill's write, or admitted in flight) where a refusal was due."""
    from pdverify.model.transfer_queue import Transfer, TransferQueueCase

    f9 = KNOWN["F9"]
    assert (f9.releases[0], f9.releases[-1], f9.properties()) == ("0.4.6.post5", "0.5.23", ("Q8",))
    past = Transfer(room=3, decode_slot=0, prefill_slot=0, first_token=1, logprob=-1.0,
                    top_logprobs=tuple((-1.0, k) for k in range(129)))  # fmt: skip
    within = replace(past, room=4, decode_slot=1, prefill_slot=1, top_logprobs=((-1.0, 2),))
    case = {"case": TransferQueueCase(transfers=(past, within), slots=2)}
    assert f9.shows(case) and not f9.shows({"case": TransferQueueCase(transfers=(within,), slots=2)})
    assert not f9.shows({"case": None})
    head = "prefill's outcome per request {}, expected ['refused', 'admitted'] (the requests asking for more"
    assert f9.explains(case, head.format("['raised', 'admitted']"))
    assert f9.explains(case, head.format("['admitted', 'admitted']"))  # in flight: admitted, its write to come
    assert not f9.explains(case, head.format("['raised', 'raised']"))  # a request within the row raised too
    assert not f9.explains(case, head.format("['refused', 'admitted']"))  # no difference
    assert not f9.explains(case, head.format("['raised']"))  # a request missing
    assert not f9.explains(case, head.format("['raised', admitted]"))  # unreadable
    assert not f9.explains(case, "committed [#1], expected every successful transfer [#0, #1] (rooms [3, 4])")


def test_f10_is_each_prompts_samples_in_its_room_and_t31_no_room_at_all() -> None:
    """F10 (0.4.5.post3-0.5.23): the samples of a prompt are sent in the prompt's first expanded request's room. It
    shows only where a call asks for parallel samples, and explains Q9's distinct-rooms message only when the rooms
    are, prompt by prompt, that room n times. T31 (0.4.5.post1-0.4.5.post2) explains only requests with no room."""
    from pdverify.model.dispatch import GenerateCall

    f10, t31 = KNOWN["F10"], KNOWN["T31"]
    assert (f10.releases[0], f10.releases[-1], f10.properties()) == ("0.4.5.post3", "0.5.23", ("Q9",))
    assert t31.releases == ("0.4.5.post1", "0.4.5.post2") and t31.properties() == ("Q9",)
    one = {"call": GenerateCall(prompts=((1,), (2,)), single=False, n=2, room=10)}
    per = {"call": GenerateCall(prompts=((1,), (2,)), single=False, n=2, room=(10, 20))}
    assert f10.shows(one) and f10.shows(per)
    assert not f10.shows({"call": GenerateCall(prompts=((1,), (2,)), single=False, room=10)})  # no samples
    assert not f10.shows({"call": "not a call"})
    head = "the call's 4 samples carry rooms {}: {} carried by more than one (n=2, 2 prompt(s), bootstrap_room=...)"
    assert f10.explains(one, head.format("[10, 10, 11, 11]", "[10, 11]"))
    assert f10.explains(per, head.format("[10, 10, 20, 20]", "[10, 20]"))
    assert not f10.explains(one, head.format("[10, 10, 20, 20]", "[10, 20]"))  # not the expanded rooms of one room
    assert not f10.explains(per, head.format("[10, 11, 10, 11]", "[10, 11]"))  # another collision
    assert not f10.explains(per, head.format("[10, 10, 20]", "[10]"))  # a sample missing
    assert not f10.explains(per, head.format("[10, 10, 20, x]", "[10]"))  # unreadable
    assert not f10.explains(per, "the call's samples are of prompts [0, 0, 1], expected 2 of each of the 2 prompts")
    batch = {"call": GenerateCall(prompts=((1,), (2,)), single=False, room=(10, 20))}
    assert t31.shows(batch) and not t31.shows({"call": GenerateCall(prompts=((1,),), single=True, room=10)})
    routed = "the requests of prompts 0..1 carry rooms {}, the router gave them [10, 20] (bootstrap_room=(10, 20))"
    assert t31.explains(batch, routed.format("[None, None]"))
    assert not t31.explains(batch, routed.format("[None, 20]"))
    assert not t31.explains(batch, routed.format("[]"))
    assert not t31.explains(batch, routed.format("[None, x]"))
    assert t31.explains(per, head.format("[None, None, None, None]", "[None]"))
    assert not t31.explains(per, "the call's samples are of prompts [0], expected [0, 0, 1, 1]")


def test_f11_is_a_pp_stage_following_its_own_receivers() -> None:
    """F11 (0.5.7-0.5.23): a PP decode stage's transfer step hands the pass the agreed rids as one list and the pass
    polls its own receivers. It shows only on a PP step with a transfer agreed bad whose receiver here succeeded, and
    explains Q7's message only when the step's own polls give exactly the reported list - and it differs on such a
    transfer (F8's room-0 hold applied from 0.5.9)."""
    from pdverify.model.transfer_queue import Transfer, TransferQueueCase

    f11 = KNOWN["F11"]
    assert (f11.releases[0], f11.releases[-1], f11.properties()) == ("0.5.7", "0.5.23", ("Q7",))
    bad = Transfer(room=3, decode_slot=0, prefill_slot=0, first_token=1, consensus="bad")
    good = Transfer(room=4, decode_slot=1, prefill_slot=1, first_token=1, consensus="good")
    case = {"case": TransferQueueCase(transfers=(bad, good), slots=2, pp_step=True)}
    agreed = {"case": TransferQueueCase(transfers=(replace(bad, poll="failed"), good), slots=2, pp_step=True)}
    assert f11.shows(case) and not f11.shows(agreed) and not f11.shows({"case": None})
    committed = "committed {}, expected every agreed good transfer [#1] (rooms [4])"
    aborted = "aborted {}, expected the agreed bad transfers [#0]"

    def check() -> None:
        assert f11.explains(case, committed.format("[#0, #1]"))
        assert not f11.explains(case, committed.format("[#1]"))  # no difference
        assert not f11.explains(case, committed.format("[#0]"))  # the good one lost: not F11's
        assert f11.explains(case, aborted.format("[]"))
        assert not f11.explains(case, aborted.format("[#0]"))
        assert not f11.explains(agreed, committed.format("[#1]"))
        assert not f11.explains(case, "the pass raised: RuntimeError")

    _bound("0.5.23", check)
    # room 0 from 0.5.9: F8's gate holds the flipped transfer - kept, neither committed nor aborted - or, with F8's
    # fix applied (a patched run), commits it; before 0.5.9 there is no hold
    zero = {"case": TransferQueueCase(transfers=(replace(bad, room=0), good), slots=2, pp_step=True)}
    queue = "queue after the pass {}, expected the transfers not agreed on []"

    def held() -> None:
        assert f11.explains(zero, queue.format("[#0]")) and f11.explains(zero, committed.format("[#0, #1]"))
        assert not f11.explains(zero, queue.format("[]"))

    def no_hold() -> None:
        assert not f11.explains(zero, queue.format("[#0]")) and f11.explains(zero, committed.format("[#0, #1]"))

    _bound("0.5.23", held)
    _bound("0.5.8", no_hold)


def test_t33_is_a_later_prefill_stage_following_its_own_sender() -> None:
    """T33 (0.5.1-0.5.16): a later PP prefill stage bootstraps a request the stages agreed failed. It shows only on
    S25 with a failed agreement and explains only S25's message that the request was not dropped."""
    from pdverify.model.exchange import PrefillCase

    t33 = KNOWN["T33"]
    assert (t33.releases[0], t33.releases[-1], t33.properties()) == ("0.5.1", "0.5.16", ("S25",))
    case = PrefillCase(1, 1, 0, (1,), (1,))
    bad = {"case": case, "consensus": "bad", "waits": 1}
    assert t33.shows(bad) and not t33.shows({**bad, "consensus": "good"}) and not t33.shows({"case": None})
    head = "a request the PP stages agreed failed was not failed on this stage (its own sender ready): dropped "
    ready = {**bad, "waits": 0}
    assert t33.explains(ready, head + "False, bootstraps [True], shipped [((1,), (0,), True, 7, None)]")
    assert not t33.explains(ready, head + "False, bootstraps [True], shipped []")
    assert not t33.explains(ready, head + "True, bootstraps [True], shipped [((1,), (0,), True, 7, None)]")
    # a held metadata buffer: the agreement lists it failed once, the first stage drops it, and it stays queued here
    assert t33.explains(bad, head + "False, bootstraps [False, False], shipped []")
    assert t33.explains(bad, head + "False, bootstraps [False, False], shipped []\nassert (False and True)")
    assert not t33.explains(bad, head + "False, bootstraps [False, True], shipped [((1,), (0,), True, 7, None)]")
    assert not t33.explains({**bad, "waits": None}, head + "False, bootstraps [True], shipped []")
    # this stage's sender late: kept queued through every step likewise
    late = {**bad, "waits": 1, "late": True}
    head_late = head.replace("sender ready", "sender late")
    assert t33.explains(late, head_late + "False, bootstraps [False, False, False], shipped []")
    assert not t33.explains(late, head + "False, bootstraps [False, False, False], shipped []")
    assert not t33.explains(late, head_late + "False, bootstraps [False, False], shipped []")
    assert not t33.explains({**late, "late": "yes"}, head_late + "False, bootstraps [False, False, False], shipped []")


def test_t34_is_a_later_prefill_stage_asserting_its_late_sender_finished() -> None:
    """T34 (0.5.1-0.5.6.post2): a later PP prefill stage asserts its own sender finished bootstrapping for every rid
    the first stage popped. It shows only on S25 with this stage's sender late and explains only the release's assert
    raised by the stage's bootstrap step."""
    from pdverify.model.exchange import PrefillCase

    t34 = KNOWN["T34"]
    assert (t34.releases[0], t34.releases[-1], t34.properties()) == ("0.5.1", "0.5.6.post2", ("S25",))
    case = PrefillCase(1, 1, 0, (1,), (1,))
    late = {"case": case, "consensus": "good", "waits": 0, "late": True}
    assert t34.shows(late) and t34.shows({**late, "consensus": "bad"})
    assert not t34.shows({**late, "late": False}) and not t34.shows({**late, "case": None})
    crash = (
        "the PP stage's bootstrap step raised AssertionError at prefill.py:256 `assert poll == KVPoll.WaitingForInput "
        "or poll == KVPoll.Failed`"
    )
    assert t34.explains(late, crash) and t34.explains(late, crash.replace(":256", ":224"))
    assert not t34.explains({**late, "late": False}, crash)
    assert not t34.explains(late, crash.replace("prefill.py", "decode.py"))
    assert not t34.explains(late, crash + ": some message")  # another assert of the same line's shape
    assert not t34.explains(late, "a request the PP stages agreed ready (this stage's sender late): dropped False")


def test_t3_is_pinned_for_q1_to_q4() -> None:
    """T3's records do not hang on the draws: the queue's explicit examples hold a request whose raw fill length fits
    the budget while its whole pages do not (Q2-Q4 on every T3 release), and the same for a rebootstrapped request on
    a hybrid SWA pool with the radix cache and no free SWA page, which the release admits and then fails for its SWA
    tail (Q1, 0.5.19-0.5.21: the first releases that accept the radix cache with a hybrid SWA model)."""
    from pdverify.oracle.decode_queue import expected_pass
    from pdverify.properties.test_decode_queue import EXAMPLES

    t3 = KNOWN["T3"]
    assert t3.releases_for("Q1") == ("0.5.19", "0.5.20", "0.5.21")
    assert t3.releases_for("Q4")[0] == "0.4.5.post2" and t3.releases_for("Q4")[-1] == "0.5.21"
    plain = [c for c in EXAMPLES if c.swa_free_pages is None and c.token_budget == 6 and len(c.requests) == 1]
    assert len(plain) == 1 and t3.shows({"case": plain[0]})
    assert expected_pass(plain[0]).admitted == []  # 8 tokens in whole pages, a budget of 6
    assert t3.explanation("Q4")({"case": plain[0]}, "8 tokens allocated, the budget was 6")
    assert t3.explanation("Q2")({"case": plain[0]}, "admitted #0, expected none (buffers 1, rows 1, budget 6 tokens)")
    swa = [c for c in EXAMPLES if c.swa_free_pages == () and c.requests[0].rebootstrap]
    assert len(swa) == 1 and t3.shows({"case": swa[0]})
    want = expected_pass(swa[0])
    assert (want.admitted, want.failed, want.remaining) == ([], [], [0])  # it waits
    assert t3.explanation("Q1")({"case": swa[0]}, "failed #0, expected none")
    assert not t3.explanation("Q1")({"case": swa[0]}, "failed none, expected #0")


def test_t11_is_pinned_for_q1() -> None:
    """T11's Q1 form (0.5.19: a request the LoRA limit should pass over is admitted and fails for its SWA tail) does
    not hang on the draws: the ci draws of stop 63's generator reached it on no example, and the queue's explicit
    examples now hold it - a PP pass whose other microbatch holds the one adapter slot, a base-model request in the
    good list, no free SWA page."""
    from pdverify.oracle.decode_queue import expected_pass
    from pdverify.properties.test_decode_queue import EXAMPLES

    t11 = KNOWN["T11"]
    assert t11.releases_for("Q1") == ("0.5.19",)
    pinned = [c for c in EXAMPLES if c.pp_consensus and c.microbatch_loras and c.swa_free_pages == ()]
    assert len(pinned) == 1 and t11.shows({"case": pinned[0]})
    assert expected_pass(pinned[0]).remaining == [0]  # it waits for an adapter slot
    assert t11.explanation("Q1")({"case": pinned[0]}, "failed #0, expected none")
