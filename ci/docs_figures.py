"""Generate the figures the docs show from the files that hold them, so that no table is typed by hand.

    python ci/docs_figures.py            rewrite every generated block in docs/
    python ci/docs_figures.py --check    exit 1 when a block differs from what its source gives (tests run this)

A generated block sits between ``<!-- generated: NAME -->`` and ``<!-- end: NAME -->`` in a docs file:

* ``evidence`` (docs/release-matrix.md): the upstream change behind every release boundary, from
  ``pdverify/properties/contract_evidence.json``;
* ``gate`` (docs/findings.md): the findings gate per recorded finding, from the conformance reports under
  ``reports/sglang*/check.json`` (kept as it is when no report is there: the block records the last run).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ci"))

from conformance_matrix import verdict_parts  # noqa: E402
from findings_gate import _reproduced, gate  # noqa: E402


def evidence_table() -> str:
    entries = json.loads((ROOT / "pdverify" / "properties" / "contract_evidence.json").read_text())["boundaries"]
    rows = ["| boundary | gates | first release | kind | upstream change |", "|---|---|---|---|---|"]
    for b in entries:
        change = f"#{b['pr']} {b['title']} ({b['commit']}, {b['date']})" if b.get("pr") else "not in the mirror read"
        rows.append(
            f"| `{b['contract'].split(' ')[0]}` | {b.get('gate', '')} | {b['first_release']} | {b['kind']} | {change} |"
        )
    return "\n".join(rows)


def gate_table() -> str | None:
    recorded = json.loads((ROOT / "findings" / "sglang-0.5.23.json").read_text())
    runs = [("0.5.23 as released", ROOT / "reports" / "sglang" / "check.json", set())]
    runs += [(f"with findings/{p.name.split('-')[-1]}/fix.patch", p / "check.json", {p.name.split("-")[-1]})
             for p in sorted((ROOT / "reports").glob("sglang-patched-*"))]  # fmt: skip
    rows = ["| run | properties | gate |", "|---|---|---|"]
    for label, path, fixed in runs:
        if not path.exists():
            continue
        report = json.loads(path.read_text())
        code, _ = gate(report, recorded, fixed)
        counts = ", ".join(f"{n} {s}" for s, n in sorted(report["summary"].items()))
        verdicts = []
        for f in recorded["findings"]:
            reproduced, matched, _ = _reproduced(report, f["id"])
            done = "**fixed by patch**" if f["id"] in fixed and not reproduced else f"reproduced on {reproduced}"
            verdicts.append(f"{f['id']} {done} ({matched} examples in its signature)")
        new = sum(1 for p in report["properties"] if p["status"] in ("failed", "error", "timeout", "flaky"))
        rows.append(f"| {label} | {counts} | {'green' if code == 0 else 'RED'}: {'; '.join(verdicts)}; {new} new |")
    return "\n".join(rows) if len(rows) > 2 else None


def generation_table() -> str | None:
    path = ROOT / "reports" / "mutate-generation.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    rows = ["| family | mutants | killed on every seed | runs killed | median | p95 | max |"]
    rows.append("|---|---|---|---|---|---|---|")
    for name, s in [("**all**", data["summary"]["overall"]), *data["summary"]["families"].items()]:
        killed, runs = f"{s['killed']} ({s['kill_rate']:.0%})", f"{s['runs_killed']}/{s['runs']}"
        spread = f"{s['median']:.0f} | {s['p95']:.0f} | {s['max']}"
        rows.append(f"| {name} | {s['mutants']} | {killed} | {runs} | {spread} |")
    missed = [
        f"{m['id']} ({sum(n is not None for n in m['examples_to_failure'])}/{len(m['seeds'])})"
        for m in data["mutants"]
        if not all(n is not None for n in m["examples_to_failure"])
    ]
    seeds = ", ".join(map(str, data["seeds"]))
    missed_text = ", ".join(missed) or "none"
    rows += ["", f"Seeds {seeds}; {data['wall_s']:.0f} s wall. Not killed on every seed: {missed_text}."]
    return "\n".join(rows)


def matrix_table() -> str | None:
    """The matrix's verdicts (reports/matrix/releases.json, each release's ``verdict`` facts), consecutive
    releases with the same verdict in one row, the differential's summary (reports/matrix/diffs.json) and the
    findings' replays (reports/matrix/replays.json)."""
    path = ROOT / "reports" / "matrix" / "releases.json"
    diffs = ROOT / "reports" / "matrix" / "diffs.json"
    if not path.exists() or not diffs.exists():
        return None
    releases = [r for r in json.loads(path.read_text()) if r.get("verdict", {}).get("importable")]
    if len(releases) < 2:
        return None
    groups: list[tuple[list[str], tuple[str, str, str, str]]] = []  # releases in a row, the verdict they share
    for r in releases:
        shown = _shown(verdict_parts(r["verdict"]))
        if groups and groups[-1][1] == shown:
            groups[-1][0].append(r["release"])
        else:
            groups.append(([r["release"]], shown))
    rows = ["| releases | verdict | checked | not applicable | units |", "|---|---|---|---|---|"]
    for names, (head, counts, na, units) in groups:
        span = names[0] if len(names) == 1 else f"{names[0]} - {names[-1]} ({len(names)})"
        rows.append(f"| {span} | {head} | {counts} | {na} | {units} |")
    summary = json.loads(diffs.read_text())["summary"]
    diff = (
        f"{summary['pairs']} pairs, {summary['differences']} differences, {summary['unexplained']} unexplained "
        f"({summary['examples']} inputs per unit, {summary['wall_s']} s)"
    )
    rows += ["", f"{len(releases)} releases. Differential: {diff}."]
    replays = ROOT / "reports" / "matrix" / "replays.json"
    if replays.exists():
        r = json.loads(replays.read_text())["summary"]
        done = f"{r['not_as_recorded']} not as recorded ({r['wall_s']} s)"
        rows[-1] += (f" Findings replayed: {r['replays']} replays of {r['findings']} findings' recorded examples "
                     f"on {r['releases']} releases, {done}.")  # fmt: skip
    return "\n".join(rows)


def _shown(parts: tuple[str, str, str, str]) -> tuple[str, str, str, str]:
    """A verdict as the docs table shows it: "sound" without its counts (the checked column has them)."""
    head, counts, na, units = parts
    return ("sound" if head.startswith("sound") else head, counts, na, units)


BLOCKS = {
    "matrix": ("docs/release-matrix.md", matrix_table),
    "evidence": ("docs/release-matrix.md", evidence_table),
    "gate": ("docs/findings.md", gate_table),
    "generation": ("docs/measurements.md", generation_table),
}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name, (doc, make) in BLOCKS.items():
        path = ROOT / doc
        text = path.read_text()
        pattern = re.compile(rf"(<!-- generated: {name} -->\n)(.*?)(<!-- end: {name} -->)", re.S)
        match = pattern.search(text)
        if match is None:
            print(f"{doc}: no generated block {name!r}", file=sys.stderr)
            return 2
        body = make()
        if body is None:  # no source here (no conformance report): the block keeps the last run's figures
            continue
        if match.group(2) != body + "\n":
            stale.append(f"{doc}: block {name!r}")
            text = text[: match.start(2)] + body + "\n" + text[match.end(2) :]
            if not check:
                path.write_text(text)
    if stale and check:
        print("stale generated blocks (run python ci/docs_figures.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
