"""The conformance gate, per finding: SGLang's failures must be exactly its recorded findings.

    python ci/findings_gate.py REPORT.json FINDINGS.json [--fixed ID ...]

A recorded finding is matched by its signature (``pdverify.findings``): the run report counts, per property, the
examples whose failure each recorded finding explains (``findings``), and the property keeps searching past them.
The gate prints one line per finding and exits

* 0 when every recorded finding reproduced (on at least one example) and no property failed otherwise;
* 1 on a new failure (any property that failed, errored, timed out... - outside every recorded signature, or
  inside one with a failure the finding does not explain: record it, never weaken the property), or a recorded
  finding that did not reproduce (the release or the suite changed: look before removing it);
* 2 on unreadable input.

``--fixed ID`` (a candidate fix applied, ``ci/conformance.sh --patch``): finding ID must *not* reproduce - the gate
reports it "fixed by patch" - while everything else holds as above.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

BAD = ("failed", "error", "timeout", "flaky", "no examples", "vacuous")


def _reproduced(report: dict[str, Any], finding: str) -> tuple[int, int, list[str]]:
    """Examples reproducing ``finding`` and examples in its signature, over the report's properties; their rows."""
    reproduced = matched = 0
    rows = []
    for p in report["properties"]:
        counts = (p.get("findings") or {}).get(finding)
        if counts is not None:
            reproduced += counts["reproduced"]
            matched += counts["matched"]
            rows.append(f"{p['id']}[{p['device']}]")
    return reproduced, matched, rows


def gate(report: dict[str, Any], recorded: dict[str, Any], fixed: set[str]) -> tuple[int, list[str]]:
    lines = []
    new = [p for p in report["properties"] if p["status"] in BAD]
    bad = bool(new)
    ids = [f["id"] for f in recorded["findings"]]
    unknown = sorted(fixed - set(ids))
    if unknown:
        return 2, [f"findings gate: --fixed names no recorded finding: {', '.join(unknown)}"]
    verdicts = []
    # one verdict per finding, however many properties its record names (a finding two properties observe has an
    # entry for each: F8 on Q7 and X2); the counts are over every property the run reports it on
    properties: dict[str, list[str]] = {}
    for f in recorded["findings"]:
        properties.setdefault(f["id"], []).append(f["property"])
    for fid, props in properties.items():
        reproduced, matched, rows = _reproduced(report, fid)
        where = f"{', '.join(props)} ({', '.join(rows) or 'not run'})"
        if fid in fixed:
            verdict = "fixed by patch" if reproduced == 0 and rows else "STILL REPRODUCES" if reproduced else "NOT RUN"
            bad |= verdict != "fixed by patch"
        else:
            verdict = f"reproduced on {reproduced} examples" if reproduced else "NOT REPRODUCED"
            bad |= not reproduced
        verdicts.append(f"  {fid:4} {verdict:32} {matched:5} in signature   {where}")
    lines.append(
        f"findings gate: {len(properties)} recorded, {len(new)} new failures"
        + (f", checking as fixed: {', '.join(sorted(fixed))}" if fixed else "")
    )
    lines.append(f"  {'id':4} {'verdict':32} {'examples':>5} in signature   property")
    lines += verdicts
    for p in new:
        lines.append(f"  NEW {p['id']}[{p['device']}] {p['status']}: {p['message'][:300]}")
        lines.append(f"    reproduce: {p.get('reproduce', '')}")
    return (1 if bad else 0), lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="findings_gate.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("report")
    parser.add_argument("findings")
    parser.add_argument("--fixed", nargs="*", default=[], metavar="ID", help="findings a patch under test must fix")
    args = parser.parse_args(argv)
    try:
        report = json.loads(Path(args.report).read_text())
        recorded = json.loads(Path(args.findings).read_text())
    except (OSError, ValueError) as exc:
        print(f"findings gate: cannot read input: {exc}", file=sys.stderr)
        return 2
    if report.get("known_findings", "apply") != "apply":
        print(
            "findings gate: the run ignored recorded findings (--known-findings ignore): run it with apply",
            file=sys.stderr,
        )
        return 2
    code, lines = gate(report, recorded, set(args.fixed))
    print("\n".join(lines))
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
