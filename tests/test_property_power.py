"""Every property is shown to fail on a known-bad implementation (legacy or a catalogued mutant).

A property without an entry here fails ``test_every_property_has_a_known_killer``: nobody has seen it fail.
"""

from __future__ import annotations

import pytest

from pdverify.cli.check import COUNTEREXAMPLE
from pdverify.mutants.catalogue import load_all, mutant_target
from pdverify.properties.registry import PropertyInfo
from pdverify.runner import load_properties, run_property
from pdverify.targets import Target, load_target

KILLERS: dict[str, list[str]] = {
    "P1": ["KV01", "KV04", "KV10"],
    "P2": ["KV09", "KV07"],
    "P3": ["KV06", "legacy"],
    "P4": ["SP01", "SP03", "SP04"],
    "P5": ["PN01", "PN03"],
    "P6": ["AF01", "AF02", "AF03"],
    "P7": ["MM01", "MM02"],
    "P8": ["PN02", "KV02"],
    "P9": ["DP02", "PN01"],
    "P10": ["SC04", "SC06"],
    "P11": ["SC03", "SC07"],
    "P12": ["SC02", "SC05"],
    "P13": ["SC04"],
    "P14": ["DP01"],
    "P19": ["PB07", "PB09"],
    "P20": ["PB18"],
    "P21": ["PB01", "PB03", "PB16"],
    "P21b": ["PB02"],
    "P22": ["legacy", "PB15"],
    "P22b": ["legacy", "PB15"],
    "P23": ["PB04", "PB05", "PB13"],
    "P24": ["PB06"],
    "P25": ["PB11", "PB12"],
    "P26": ["PB10", "PB17", "PB19"],
    "P27": ["PB20", "PB21", "PB24", "PB25"],
    "P28": ["PB01", "PB08"],
    "P29": ["PB14"],
    "P30": ["field-clobber"],
    "B1": ["legacy", "KV05"],
    "B2": ["legacy"],
    "B3": ["legacy"],
    "M1": ["DP02", "SC06"],
    "S9": ["XK05"],
    "S10": ["XT01", "XT03", "XT04", "XG03", "XE01", "XH01"],
    "S11": ["XK03"],
    "S12": ["XG01", "XG02", "XG04"],
    "S13": ["XK01", "XK02", "XK04", "XK06", "XE02"],
    "S15": ["XO01", "XO02", "XO03"],
    "S16": ["XC01", "XC02", "XC03", "XC04", "XC05"],
    "S17": ["XR01", "XR02", "XR03", "XR04", "XR05", "XR06"],
    "S18": ["XB01", "XB02"],
    "S19": ["XB03", "XB04", "XB05"],
    "S20": ["XB06", "XB07"],
    "S21": ["XE03", "XE04"],
    "T1": ["TT01", "TT02", "TT03", "TT04", "TT05"],
    "K1": ["KS01", "KS02", "KS03", "KS04"],
    "K2": ["KB01", "KB02", "KB03", "KB04", "KB05"],  # one a clause: popped, start, pages, finalized, buffer
    "T2": ["TT06", "TT07", "TT08"],
    "S22": ["XE05", "XE06"],
    "S23": ["XE07"],
    "S24": ["XB08", "XB09"],  # the limit for every room's peer; the ceiling not rounded up to a page
    # a later PP stage by its own poll; every PP request failed; the first stage's poll alone; the late sender asserted
    "S25": ["XP01", "XP02", "XP03", "XP04"],
    "S14": ["XT02"],
    "P15": ["XS01", "XS02", "XS03", "XT05", "XT06"],
    "P16": ["XS04", "XS05"],
    "P17": ["XS06", "XS07"],
    "P18": ["XS08", "XS09", "XS10"],
    "W1": ["XW01", "XW02", "XW03", "DP01"],
    "W2": ["XW01", "XW02", "XW03"],
    "X1": ["XW02", "XW03", "XD02"],  # one a clause: pages, decode_prefix, state_lists
    # X2: range, origin, partial page; F4, undigested scales, F5; F6, the Mamba state by page, the DSA tail by pages;
    # T22, MiniMax's dense KV undigested
    "X2": ["XV01", "XV02", "XV03", "XV04", "XV05", "XV06", "XV07", "XV08", "XV09", "XV10", "XV11"],
    "D1": ["XD01", "XD02", "XD03", "XD04", "XD05", "XD13"],
    "D2": ["XD06", "XD07", "XD11"],
    "D3": ["XD08", "XD09", "XD12"],
    "D4": ["XD10"],
    "Q1": ["XQ02", "XQ09", "XQ25", "XQ27", "XQ33", "XQ34"],
    # Q2 also: the budget from before the lock, locks protecting nothing, a shared page counted per lock
    "Q2": ["XQ03", "XQ04", "XQ05", "XQ06", "XQ07", "XQ09", "XQ11", "XQ17", "XQ21", "XQ23", "XQ40", "XQ41", "XQ42"],
    "Q3": ["XQ01", "XQ04", "XQ08", "XQ11", "XQ35"],
    "Q4": ["XQ05", "XQ06", "XQ10", "XQ12", "XQ13", "XQ15", "XQ16", "XQ22", "XQ23", "XQ28"],
    "Q5": ["XQ14", "XQ16", "XQ17", "XQ26"],
    "Q6": ["XQ18", "XQ19", "XQ20", "XQ22", "XQ24", "XQ29"],
    # Q7: F8's sentinel, the wrong slot's row, a leaked slot, a failure left queued, a one-token request dropped, the
    # queue reordered, the room read as the token, the logprob and the cached count dropped, the top logprobs to the
    # row's capacity, no token-ids row
    "Q7": ["XU01", "XU02", "XU03", "XU04", "XU05", "XU06", "XU07", "XU08", "XU09", "XU10", "XU11", "XU15", "XU16"],
    # Q8: no bound on the top logprobs (F9), refused at the capacity, cut to the row
    "Q8": ["XU12", "XU13", "XU14"],
    # Q9: a sample in its prompt's room (F10), per-prompt rooms repeated, a room one off, a sample dropped, a
    # generating warm-up, the prompts' rooms crossed
    "Q9": ["XN01", "XN02", "XN03", "XN04", "XN05", "XN06", "XN07"],
    "P18p": ["XD02", "XS01", "XS06", "XK05", "XT05"],
}


def _bad_target(name: str) -> Target:
    if name == "legacy":
        return load_target("legacy")
    if name == "field-clobber":
        from tests.test_fields import clobbering_target

        return clobbering_target()
    return mutant_target(name)


PROPS = load_properties()
load_all()


def test_every_property_has_a_known_killer() -> None:
    assert sorted(PROPS) == sorted(KILLERS), "a property was added or removed without a known-bad target"


@pytest.mark.parametrize(("pid", "killer"), [(p, k) for p, ks in KILLERS.items() for k in ks], ids=lambda v: str(v))
def test_property_fails_on_known_bad(pid: str, killer: str) -> None:
    info: PropertyInfo = PROPS[pid]
    if killer == "field-clobber":
        from tests.test_fields import priority_field

        with priority_field():
            result = run_property(info, _bad_target(killer))
    else:
        result = run_property(info, _bad_target(killer))
    assert result.status == "failed", f"{pid} did not catch {killer}: {result}"
    assert result.examples >= 1
    assert COUNTEREXAMPLE.search(result.message), f"no counterexample reported: {result.message[:300]}"


@pytest.mark.parametrize("pid", sorted(KILLERS))
def test_property_holds_on_pdverify(pid: str) -> None:
    result = run_property(PROPS[pid], load_target("pdverify"))
    assert result.status == "passed", result.message
    assert result.examples > 1
