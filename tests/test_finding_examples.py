"""The findings' recorded examples (``findings/examples.json``) and their replay (``pdverify.replay``).

The replays themselves run on the releases in the matrix (``ci/replay_findings.py``); here: every record is
well-formed and inside its finding's signature, every finding has a production-shaped example (or is listed below
with why not yet), and the replay tells a reproduced defect from a pass, a new failure and an input it cannot build.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pdverify.findings import KNOWN
from pdverify.replay import (
    EXAMPLES_FILE,
    TRIAGE_FILE,
    FindingExample,
    due,
    features_missing,
    fixed_release,
    fixed_releases,
    load_examples,
    replay,
    replay_all,
)
from pdverify.targets import load_target
from tests.user_targets import as_release_0_5_23, f2_and_a_second_defect, f2_as_released

EXAMPLES = load_examples()
TRIAGE = json.loads(TRIAGE_FILE.read_text())["triage"]
FIXED = fixed_releases(TRIAGE)

AWAITING_EXAMPLE: dict[str, str] = {}
"""Findings whose production-shaped example is not yet a replayable record, and why."""


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"{e.finding}-{e.property}-{e.shape}")
def test_an_example_is_its_findings_and_inside_its_signature(example: FindingExample) -> None:
    finding = KNOWN[example.finding]
    assert example.property in finding.properties(), f"{example.finding} is not observed by {example.property}"
    assert any(r["id"] == example.finding and r["property"] == example.property for r in TRIAGE)
    kwargs = example.kwargs()
    assert finding.shows(kwargs), f"{example.finding}'s signature does not cover its own example"
    assert example.flags.strip() and example.what.strip()


def test_every_finding_has_a_production_example_or_says_why_not() -> None:
    with_one = {e.finding for e in EXAMPLES if e.shape == "production"}
    triaged = {r["id"] for r in TRIAGE}
    missing = triaged - with_one - set(AWAITING_EXAMPLE)
    assert not missing, f"findings with no production-shaped example: {sorted(missing)}"
    stale = set(AWAITING_EXAMPLE) & with_one
    assert not stale, f"listed as awaiting an example but recorded one: {sorted(stale)}"


def test_the_fixed_release_is_read_from_the_triage() -> None:
    assert fixed_release("T6", TRIAGE) == "0.5.23"
    assert fixed_release("F2", TRIAGE) is None  # not fixed in any release here
    with pytest.raises(KeyError, match="T999"):
        fixed_release("T999", TRIAGE)


def _f2_example() -> FindingExample:
    return next(e for e in EXAMPLES if e.finding == "F2")


def test_a_defect_as_released_is_reproduced() -> None:
    r = replay(_f2_example(), f2_as_released, "reproduced")
    assert (r.outcome, r.ok) == ("reproduced", True), r
    assert r.message.startswith("digests [")


def test_a_target_without_the_defect_passes_and_the_replay_says_it_did_not_reproduce() -> None:
    fixed = as_release_0_5_23("pdverify", "user-f2-fixed")
    r = replay(_f2_example(), fixed, "reproduced")
    assert (r.outcome, r.ok) == ("passed", False), r


def test_a_different_failure_is_not_the_findings() -> None:
    f2 = _f2_example()  # with a decode prefix: the second defect digests from 0, the prefix included
    with_prefix = FindingExample(
        **{**vars(f2), "args": {"case": f2.args["case"].replace("decode_prefix=0", "decode_prefix=64")}}
    )
    r = replay(with_prefix, f2_and_a_second_defect, "reproduced")
    assert r.outcome == "failed" and not r.ok, r


def test_only_the_examples_a_release_concerns_are_replayed() -> None:
    f2 = _f2_example()
    assert due(f2, "0.5.23", FIXED) == "reproduced" and due(f2, "0.5.20", FIXED) is None
    t6 = next(e for e in EXAMPLES if e.finding == "T6")
    assert due(t6, "0.5.23", FIXED) == "fixed" and due(t6, "0.5.22", FIXED) == "reproduced"
    assert [r.example.finding for r in replay_all(f2_as_released, [f2, t6], TRIAGE)] == ["F2", "T6"]
    with pytest.raises(ValueError, match="not a release"):
        replay_all(load_target("pdverify"), [f2], TRIAGE)


def test_an_example_a_release_does_not_run_is_not_in_release_there() -> None:
    """GLM-5.3-Flash's page size is the server's choice: 256 from 0.5.22, 64 before - each production example runs
    only on the releases that build its configuration, and every example runs on one of its finding's releases."""
    flash = [e for e in EXAMPLES if e.finding == "F6" and e.shape == "production" and "GLM-5.3-Flash" in e.flags]
    assert [features_missing(e, "0.5.23") for e in flash] == [[], ["dsa_kpool_packed"]]
    assert [features_missing(e, "0.5.21") for e in flash] == [["dsa_kpool_pages"], []]
    skipped = [r for r in replay_all(f2_as_released, flash, TRIAGE) if r.outcome == "not in release"]
    assert len(skipped) == 1 and skipped[0].ok and skipped[0].message == "uses dsa_kpool_packed"
    for example in EXAMPLES:
        releases = KNOWN[example.finding].releases_for(example.property)
        assert any(not features_missing(example, r) for r in releases), f"{example} runs on none of {releases}"


def test_bad_records_are_refused_naming_the_entry(tmp_path: Path) -> None:
    good = {"finding": "F2", "property": "S16", "shape": "production", "flags": "x", "what": "y",
            "args": {"case": "PrefillCase(4, 4, 0, (0, 1, 2, 3), (4,))"}}  # fmt: skip
    for bad, match in (({**good, "shape": "typical"}, "shape must be one of"), ({**good, "seed": 1}, "unknown"),
                       ({k: v for k, v in good.items() if k != "flags"}, "missing \\['flags'\\]")):  # fmt: skip
        path = tmp_path / "examples.json"
        path.write_text(json.dumps({"examples": [bad]}))
        with pytest.raises(ValueError, match=match):
            load_examples(path)
    broken = FindingExample("F2", "S16", "production", "x", "y", {"case": "PrefillCase(page_size=)"})
    with pytest.raises(ValueError, match="argument 'case' does not build"):
        broken.kwargs()


def test_a_refusal_on_the_fixing_release_is_a_fix_only_where_the_record_says_so(tmp_path: Path) -> None:
    """T26's fix is 0.5.21's admission check, T27's 0.5.14's: there their examples are refused (``fixed_by:
    refusal``). A refused example whose record does not say so, or one refused where the finding is recorded, is not
    as recorded; an unknown ``fixed_by`` is refused at load."""
    from pdverify.replay import Replay

    t26 = next(e for e in EXAMPLES if e.finding == "T26" and e.shape == "shrunk")
    assert t26.fixed_by == "refusal" and all(e.fixed_by is None for e in EXAMPLES if e.finding not in ("T26", "T27"))
    assert all(e.fixed_by == "refusal" for e in EXAMPLES if e.finding == "T27")
    plain = FindingExample(t26.finding, t26.property, t26.shape, t26.flags, t26.what, t26.args)
    assert Replay(t26, "0.5.21", "fixed", "refused", "verify refuses").ok
    assert not Replay(plain, "0.5.21", "fixed", "refused", "verify refuses").ok
    assert not Replay(t26, "0.5.20", "reproduced", "refused", "verify refuses").ok
    # the pdverify port refuses a seed past 64 bits as 0.5.23's verify does: the replay says refused, never passed
    assert replay(t26, load_target("pdverify"), "fixed").outcome == "refused"
    # and min_new_tokens without a tokenizer as 0.5.23's normalize does
    t27 = next(e for e in EXAMPLES if e.finding == "T27" and e.shape == "production")
    assert replay(t27, load_target("pdverify"), "fixed").outcome == "refused"
    path = tmp_path / "examples.json"
    row = {k: v for k, v in json.loads(EXAMPLES_FILE.read_text())["examples"][0].items() if k != "fixed_by"}
    path.write_text(json.dumps({"examples": [{**row, "fixed_by": "patch"}]}))
    with pytest.raises(ValueError, match="fixed_by must be one of"):
        load_examples(path)


def test_the_command_replays_what_concerns_the_target_and_exits_on_a_miss(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from pdverify.replay import main

    records = [e for e in json.loads(EXAMPLES_FILE.read_text())["examples"] if e["finding"] in ("F2", "T6")]
    path = tmp_path / "examples.json"
    path.write_text(json.dumps({"examples": records}))
    assert main(["--target", "tests.user_targets:f2_as_released", "--examples", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("ok   0.5.23 F2 S16 production: expected reproduced, reproduced") for line in lines)
    assert any(" T6 S16 production: expected fixed, passed" in line for line in lines), lines
    assert main(["--target", "tests.user_targets:f2_and_a_second_defect", "--examples", str(path), "--json"]) == 1
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    t6 = next(r for r in rows if r["finding"] == "T6")  # the second defect is T6's: on its fixing release, a regression
    assert (t6["expected"], t6["outcome"], t6["ok"]) == ("fixed", "reproduced", False), t6


PRODUCTION_PASSAGE = re.compile(
    r"Production-shaped \((.*?); replayed from findings/examples\.json[^)]*\): (.*?)\.?$", re.S
)


def test_triage_production_passages_are_the_recorded_examples() -> None:
    """A triage row that quotes its finding's production-shaped example quotes the record the replays run (flags
    and description), so the two cannot drift apart; a quoted example with no record is refused."""
    records = {(e.finding, e.flags, e.what.rstrip(".")) for e in load_examples() if e.shape == "production"}
    quoted = 0
    for row in TRIAGE:
        at = row["what"].find("Production-shaped (")
        if at < 0:
            continue
        match = PRODUCTION_PASSAGE.match(row["what"][at:])
        assert match, f"{row['id']} {row['property']}: a production-shaped passage not in the recorded form"
        assert (row["id"], match.group(1), match.group(2)) in records, (
            f"{row['id']} {row['property']}: the quoted production example is not the one in findings/examples.json"
        )
        quoted += 1
    assert quoted >= 11


def test_an_untriaged_finding_is_refused_alike() -> None:
    """``due`` and ``fixed_release`` refuse a finding with no triage row with the same message."""
    triage = json.loads(TRIAGE_FILE.read_text())["triage"]
    f3 = next(e for e in load_examples() if e.finding == "F3")
    with pytest.raises(KeyError, match="finding F3 has no triage row"):
        due(f3, "0.5.20", {})
    with pytest.raises(KeyError, match="finding F99 has no triage row"):
        fixed_release("F99", triage)
    assert due(f3, "0.5.23", fixed_releases(triage)) == "reproduced" and fixed_release("F3", triage) is None


def test_a_recorded_release_outside_the_examples_signature_expects_it_fixed() -> None:
    from types import SimpleNamespace

    mooncake = next(e for e in EXAMPLES if e.finding == "T29" and "transport='nixl'" not in e.args["case"])
    nixl = next(e for e in EXAMPLES if e.finding == "T29" and "transport='nixl'" in e.args["case"])
    # 0.4.9: NIXL's aux transfer still copies the first buffer only, Mooncake's was fixed in 0.4.8.post1 (#7516)
    target = SimpleNamespace(package="sglang", release="0.4.9")
    assert due(mooncake, "0.4.9", FIXED, target) == "fixed" and due(nixl, "0.4.9", FIXED, target) == "reproduced"
    on_047 = SimpleNamespace(package="sglang", release="0.4.7")
    assert due(mooncake, "0.4.7", FIXED, on_047) == "reproduced"
    assert due(mooncake, "0.4.9", FIXED) == "reproduced"  # no target named: the record alone decides
