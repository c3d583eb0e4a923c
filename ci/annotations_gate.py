"""The annotation gate: every mismatch between an SGLang function's annotations and what it was called with (or
returned) during conformance is recorded - an upstream annotation that its own callers contradict, or an adapter
bug to fix - never ignored.

    python ci/annotations_gate.py ANNOTATIONS.json RECORDED.json

ANNOTATIONS.json is what ``PDVERIFY_CHECK_ANNOTATIONS`` wrote (``pdverify.targets.annotations``); RECORDED.json
(``findings/annotations-<release>.json``) lists the known mismatches with why. Stand-in mismatches (a driver's own
object standing where SGLang's class is annotated) are counted, not gated: the stand-in table documents them.
Exit 1 on a mismatch not recorded, or a recorded one that no longer occurs; 2 on unreadable input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        seen = json.loads(Path(argv[0]).read_text())
        recorded = json.loads(Path(argv[1]).read_text())["recorded"]
    except (OSError, ValueError, KeyError) as exc:
        print(f"annotations gate: cannot read input: {exc}", file=sys.stderr)
        return 2
    found = {
        (r["function"], m["parameter"], m["got"]): m
        for r in seen["per_function"]
        for m in r["mismatches"]
        if m["kind"] == "mismatch"
    }
    known = {(k["function"], k["parameter"], k["got"]): k for k in recorded}
    print(
        f"annotations gate: {seen.get('calls', 0)} calls, {seen.get('arguments_checked', 0)} arguments and "
        f"{seen.get('returns_checked', 0)} returns checked; {len(found)} mismatches ({len(known)} recorded), "
        f"{seen.get('stand_in_mismatches', 0)} from stand-ins, {seen.get('unresolved_annotations', 0)} annotations "
        "not resolvable at run time"
    )
    bad = False
    for key, m in sorted(found.items()):
        if key in known:
            print(f"  recorded {key[0]}({key[1]}): got {key[2]} - {known[key]['why']}")
        else:
            bad = True
            print(f"  UNRECORDED {key[0]}({key[1]}): annotated {m['annotation']}, got {key[2]}: {m['detail']}")
    for key in sorted(set(known) - set(found)):
        bad = True
        print(f"  NO LONGER SEEN {key[0]}({key[1]}): got {key[2]}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
