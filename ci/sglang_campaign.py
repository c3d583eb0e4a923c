"""A coverage-fed search campaign on SGLang's own code: the property suite against ``--target sglang`` for a
fixed time, with SGLang's branch coverage of the functions under test recorded over time.

    .venv-sglang/bin/python ci/sglang_campaign.py [--minutes M] [--examples N] [--out DIR] [-k IDS]

Run in the conformance environment (``bash ci/build-sglang-env.sh``). Rounds until the time is up; in each round
every chosen property runs once on the real release (``pdverify.targets.sglang``), with a fresh seed and the
example database in ``DIR/db`` (kept: a failure replays with the command the report prints), the scheduler-level
units first (Q, D, S, K, W), then the page helpers and ``prepare_for_prebuilt`` (P, T, B). The whole campaign runs
under coverage.py (branch mode) over SGLang's package, and after every property the branches it added to the
SGLang functions under test (``pdverify.cli.coverage.FUNCTION_SETS['sglang']``) are counted. That count is the
feedback: a property that added branches in its last run gets ``4 N`` examples in the next round, one that
added none ``N`` (the search goes where the release's code still opens up); a property that failed stays in
the campaign (past a known defect the search goes on: the suite's findings predicates set explained examples
aside).

Writes ``DIR/campaign.json`` and ``DIR/campaign.md``: duration, examples, branch coverage over time (per round
and per property run), the branches never taken, and every failure with its replay command. Exit 0 when no
property failed, 1 when one did (a finding to record), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ORDER = ("Q", "D", "S", "K", "W", "P", "T", "B")
"""Property families in campaign order: scheduler-level units first."""


def _family_rank(pid: str) -> tuple[int, int, str]:
    letters = pid.rstrip("0123456789bp")
    digits = "".join(ch for ch in pid if ch.isdigit())
    return (ORDER.index(letters[0]) if letters[:1] in ORDER else len(ORDER), int(digits or 0), pid)


def _branches(
    cov: Any, functions: list[str], include: list[str]
) -> tuple[int, int, dict[str, set[tuple[int, int]]], list[str]]:
    """(covered, total) branches of ``functions`` so far, per function the branches still missing, and the
    functions not measured (their module never imported)."""
    from pdverify.cli.coverage import _regions, summarize

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "c.json"
        cov.json_report(outfile=str(out), include=include)
        report = json.loads(out.read_text())
    rows = summarize(report, functions)
    missing = {
        spec: {tuple(b) for b in region.get("missing_branches", [])} for spec, _, region in _regions(report, functions)
    }
    unmeasured = [r.function for r in rows if r.statements == 0]
    return sum(r.covered_branches for r in rows), sum(r.branches for r in rows), missing, unmeasured


def main() -> int:  # pragma: no cover - the conformance environment's campaign
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--examples", type=int, default=200, help="examples a property runs in a round (N)")
    ap.add_argument("--out", type=Path, default=Path("reports/campaign"))
    ap.add_argument("-k", dest="only", default=None, help="comma-separated property ids (default: all but M1)")
    args = ap.parse_args()
    if args.minutes <= 0 or args.examples < 1:
        print("sglang_campaign: --minutes must be > 0 and --examples >= 1", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["PDVERIFY_DB_DIR"] = str((args.out / "db").resolve())  # read when pdverify registers its profiles
    import coverage

    cov = coverage.Coverage(branch=True, data_file=str(args.out / ".coverage"), source_pkgs=["sglang"])
    cov.start()
    from hypothesis import settings

    from pdverify.cli.coverage import FUNCTION_SETS, _module_file
    from pdverify.properties.registry import EXAMPLES
    from pdverify.runner import load_properties, run_property
    from pdverify.targets import load_target

    target = load_target("sglang")
    cov.stop()
    props = load_properties()
    wanted = args.only.split(",") if args.only else [p for p in props if p != "M1"]
    unknown = [p for p in wanted if p not in props]
    if unknown:
        print(f"sglang_campaign: -k: no property {', '.join(unknown)}", file=sys.stderr)
        return 2
    chosen = sorted(wanted, key=_family_rank)
    functions = FUNCTION_SETS["sglang"]
    # the report reads only the files of the functions under test (the whole package takes a minute a report)
    include = sorted({_module_file(spec.partition(":")[0]) for spec in functions})
    for n in (args.examples, 4 * args.examples):
        settings.register_profile(f"campaign{n}", parent=settings.get_profile("thorough"), max_examples=n)
    covered0, _, _, _ = _branches(cov, functions, include)
    deadline = time.monotonic() + 60 * args.minutes
    start = time.monotonic()
    timeline: list[dict[str, Any]] = [{"round": 0, "seconds": 0.0, "examples": 0, "covered": covered0}]
    runs: list[dict[str, Any]] = []
    failures: dict[str, dict[str, Any]] = {}
    total = 0
    gained = dict.fromkeys(chosen, 1)  # every property starts as if it had just added a branch
    examples, rnd, covered = 0, 0, covered0
    while time.monotonic() < deadline:
        rnd += 1
        for pid in chosen:
            if time.monotonic() >= deadline:
                break
            n = 4 * args.examples if gained[pid] else args.examples
            seed = 20261201 + 1000 * rnd + chosen.index(pid)
            cov.start()
            run = run_property(props[pid], target, "cpu", f"campaign{n}", seed=seed)
            cov.stop()
            known = {k: v for k, v in EXAMPLES.reproduced.items() if v}
            status = "known defect" if run.status == "passed" and known else run.status
            now, total, _, _ = _branches(cov, functions, include)
            gained[pid] = now - covered
            covered = now
            examples += run.examples
            runs.append({"round": rnd, "property": pid, "seed": seed, "examples": run.examples,
                         "status": status, "known_findings": known, "new_branches": gained[pid],
                         "covered": covered, "seconds": round(time.monotonic() - start, 1)})  # fmt: skip
            if run.status == "failed" and pid not in failures:
                failures[pid] = {
                    "property": pid,
                    "round": rnd,
                    "seed": seed,
                    "message": run.message,
                    "replay": f"PDVERIFY_DB_DIR={args.out / 'db'} pdverify check --target sglang --profile thorough "
                    f"-k {pid}",
                }
            print(f"round {rnd} {pid:5} {status:15} {run.examples:5} examples  +{gained[pid]:3} branches  "
                  f"{covered} covered  {time.monotonic() - start:6.0f} s", flush=True)  # fmt: skip
        timeline.append({"round": rnd, "seconds": round(time.monotonic() - start, 1), "examples": examples,
                         "covered": covered})  # fmt: skip
    cov.save()
    # the total at the end: SGLang's modules are imported lazily, by the first property that drives them
    _, total, missing, unmeasured = _branches(cov, functions, include)
    result = {
        "release": getattr(target, "release", None),
        "minutes": args.minutes,
        "seconds": round(time.monotonic() - start, 1),
        "examples": examples,
        "rounds": rnd,
        "branches_total": total,
        "branches_covered": covered,
        "timeline": timeline,
        "runs": runs,
        "failures": list(failures.values()),
        "missing_branches": {k: sorted(v) for k, v in missing.items() if v},
        "not_measured": unmeasured,
    }
    (args.out / "campaign.json").write_text(json.dumps(result, indent=2, default=str))
    (args.out / "campaign.md").write_text(_markdown(result))
    print(_markdown(result))
    return 1 if failures else 0


def _markdown(r: dict[str, Any]) -> str:
    total = max(r["branches_total"], 1)
    lines = [
        f"# Campaign on SGLang {r['release']}: {r['seconds']:.0f} s, {r['examples']:,} examples, {r['rounds']} rounds",
        "",
        f"Branches of the SGLang functions under test: {r['branches_covered']}/{r['branches_total']} "
        f"({100 * r['branches_covered'] / total:.1f}%).",
        "",
        "| round | seconds | examples | branches covered |",
        "|---|---|---|---|",
    ]
    for t in r["timeline"]:
        share = 100 * t["covered"] / total
        lines.append(f"| {t['round']} | {t['seconds']:.0f} | {t['examples']:,} | {t['covered']} ({share:.1f}%) |")
    adders = [x for x in r["runs"] if x["new_branches"] > 0]
    lines += ["", "Property runs that added branches:", ""]
    lines += [f"* round {x['round']}, {x['property']} at {x['seconds']:.0f} s: +{x['new_branches']}" for x in adders]
    known: dict[str, int] = {}
    for x in r["runs"]:
        for k, v in x["known_findings"].items():
            known[k] = known.get(k, 0) + v
    lines += ["", "Recorded findings reproduced (examples set aside, the search went on): "
              + (", ".join(f"{k} {v:,}" for k, v in sorted(known.items())) or "none")]  # fmt: skip
    lines += ["", "## Failures (new)", ""]
    if not r["failures"]:
        lines.append("None.")
    for f in r["failures"]:
        head = (f["message"] or "").strip().splitlines()[:3]
        lines += [f"* **{f['property']}** (round {f['round']}, seed {f['seed']}): {' / '.join(head)}",
                  f"  replay: `{f['replay']}`"]  # fmt: skip
    if r["not_measured"]:
        lines += ["", "Functions under test never imported by the chosen properties (not in the total): "
                  + ", ".join(f"`{f}`" for f in r["not_measured"])]  # fmt: skip
    lines += ["", "## Branches never taken", ""]
    for spec, branches in r["missing_branches"].items():
        lines.append(f"* `{spec}`: {', '.join(f'{a}->{b}' for a, b in branches)}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
