"""The release matrix: ``pdverify check --target sglang`` on every SGLang release with PD code.

For each release: its environment (``ci/sglang_release_env.py``: the release in ``.sglang-releases/<VERSION>/`` on
top of the base ``.venv-sglang``), then the check on CPU under the chosen profile, one run report per release.
Writes ``reports/matrix/``:

* ``matrix.json``: ``{"<release>": {"<property id>": "<status>"}}`` (statuses as in the run report, or
  ``not importable`` for every property of a release that cannot be made importable);
* ``releases.json``: per release, whether it imports (and why not), the wall time, the run's summary, the
  units with the release's function behind each, and its verdict as data (``verdict_facts``);
* ``matrix.md`` and ``matrix.html``: release x property, each failure linked to its counterexample and the
  command that reproduces it; ``summary.md``: one line per release (counts, failures with their triage ids);
* ``<release>/check.json``: the run report.

Triage (``findings/triage.json``): every failure on a release must be explained there, as an upstream defect
or as a contract change. The script exits 1 when a failure is not triaged or a triaged failure no longer
reproduces on a release that ran, 2 on bad arguments, 0 otherwise.

Then the release-to-release differential over the importable releases (``ci/release_diff.py``: ``diffs.md``,
``diffs.json``; ``--no-diff`` skips it): an unexplained behavioural difference fails the matrix too.

Then each finding's recorded examples, replayed where the finding is recorded and where it was fixed
(``ci/replay_findings.py``: ``replays.md``; ``--no-replay`` skips it): an example that does not do what its record
says fails the matrix as well.

Usage: ``python ci/conformance_matrix.py [VERSION ...] [--profile ci] [--jobs 2] [--reuse] [--no-diff]
[--no-replay]``.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RELEASES_FILE = ROOT / "ci" / "sglang-releases.txt"
TRIAGE_FILE = ROOT / "findings" / "triage.json"
NOT_IMPORTABLE = "not importable"
SETTLED = ("passed", "not applicable", NOT_IMPORTABLE)
"""Statuses that need no triage; every other one (failed, error, timeout, flaky, ...) does."""
COLOURS = {
    "passed": "#2e7d32",
    "failed": "#c62828",
    "not applicable": "#9e9e9e",
    NOT_IMPORTABLE: "#6d4c41",
    "error": "#ef6c00",
}


def all_releases() -> list[str]:
    return [ln.strip() for ln in RELEASES_FILE.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def env_for(release: str, root: Path) -> dict[str, str]:
    """The release's directory first, then this checkout (its pdverify and strategies), then the base."""
    return {**os.environ, "PYTHONPATH": f"{root / release}{os.pathsep}{ROOT}", "PYTHONDONTWRITEBYTECODE": "1"}


def prepare(release: str, base: Path, root: Path, reuse: bool, wheels: Path | None) -> dict[str, Any]:
    record_file = root / release / "release.json"
    if reuse and record_file.exists():
        record: dict[str, Any] = json.loads(record_file.read_text())
        return record
    cmd = [str(base / "bin" / "python"), str(ROOT / "ci" / "sglang_release_env.py"), release]
    cmd += ["--base", str(base), "--root", str(root)] + (["--wheels", str(wheels)] if wheels else [])
    subprocess.run(cmd, capture_output=True, text=True, check=False)
    if not record_file.exists():
        return {"release": release, "importable": False, "reason": "the environment builder wrote no record"}
    built: dict[str, Any] = json.loads(record_file.read_text())
    return built


def run_release(release: str, args: argparse.Namespace) -> dict[str, Any]:
    start = time.perf_counter()
    record = prepare(release, args.base, args.root, args.reuse, args.wheels)
    row: dict[str, Any] = {
        "release": release,
        "importable": bool(record.get("importable")),
        "reason": record.get("reason", ""),
    }
    row["shims"], row["pins"] = record.get("shims", []), record.get("pins", {})
    if not row["importable"]:
        row["seconds"] = round(time.perf_counter() - start, 1)
        return row
    out = args.out / release
    out.mkdir(parents=True, exist_ok=True)
    report = out / "check.json"
    cmd = [str(args.base / "bin" / "python"), "-m", "pdverify.cli.main", "check", "--target", "sglang"]
    cmd += ["--profile", args.profile, "--device", "cpu", "--report", str(report)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env_for(release, args.root), check=False, cwd=ROOT)
    (out / "check.log").write_text(res.stdout + res.stderr)
    row["exit_code"] = res.returncode
    row["seconds"] = round(time.perf_counter() - start, 1)
    if not report.exists():
        row["importable"] = False
        row["reason"] = (
            f"the check wrote no report (exit {res.returncode}): {(res.stderr.strip().splitlines() or [''])[-1]}"
        )
        return row
    data = json.loads(report.read_text())
    installed = data["target"].get("package_version")
    if installed != release:
        row["importable"] = False
        row["reason"] = (
            f"the check ran sglang {installed}, not {release}: the release directory does not shadow the base"
        )
        return row
    row["summary"] = data["summary"]
    row["properties"] = {p["id"]: p for p in data["properties"]}
    row["units"] = data["target"].get("units", {})
    return row


def _not_driven(message: str) -> str | None:
    """``no driver`` or ``import failure`` when a target's message says the release's code is there but not run
    (pdverify has no driver for its form, or its module fails to import); None otherwise."""
    if "no driver" in message:
        return "no driver"
    if "import of " in message and " failed (" in message:
        return "import failure"
    return None


def unit_kind(where: str) -> str:
    """What a release target says of one of its units: ``driven`` (the release's own function behind it), ``no
    driver`` (the release has the code, pdverify does not drive its form), ``import failure`` or ``absent``."""
    if kind := _not_driven(where):
        return kind
    if " has no " in where:
        return "absent"
    return "driven"


def coverage(row: dict[str, Any]) -> dict[str, list[str]]:
    """Per kind of ``unit_kind``, the release's units of that kind."""
    out: dict[str, list[str]] = {"driven": [], "no driver": [], "import failure": [], "absent": []}
    for unit, where in row.get("units", {}).items():
        out[unit_kind(where)].append(unit)
    return out


def reproduce(release: str, prop: dict[str, Any], profile: str) -> str:
    return (
        f"PYTHONPATH=.sglang-releases/{release} .venv-sglang/bin/python -m pdverify.cli.main check --target sglang "
        f"--profile {profile} --device cpu -k {prop['test']}"
    )


def triage_gate(rows: list[dict[str, Any]], triage: list[dict[str, Any]]) -> list[str]:
    """Problems: failures without a triage entry, and triaged failures that ran and did not fail."""
    problems = []
    ran = {r["release"]: r["properties"] for r in rows if r.get("properties")}
    explained = {(rel, t["property"]) for t in triage for rel in t["releases"]}
    for release, props in ran.items():
        for pid, p in props.items():
            if p["status"] not in SETTLED and (release, pid) not in explained:
                problems.append(f"sglang {release}: {pid} {p['status']} and not triaged ({p['message'][:160]})")
    for rel, pid in sorted(explained):
        if rel not in ran or pid not in ran[rel]:
            continue
        status = ran[rel][pid]["status"]
        # a finding with a signature (pdverify.findings) reproduces as "known defect"; a plain "failed" beside it is a
        # failure its signature does not explain: a new defect behind the recorded one
        if status == "failed" and ran[rel][pid].get("findings"):
            problems.append(f"sglang {rel}: {pid} failed outside its recorded finding's signature (a new defect?)")
        elif status not in ("failed", "known defect"):
            problems.append(f"sglang {rel}: {pid} is triaged but {status} now (no longer reproduces)")
    # several findings on one property (0.5.22's S16: F2 and T6): each with a signature must reproduce on its own
    for t in triage:
        for rel in t["releases"]:
            found = ran.get(rel, {}).get(t["property"], {}).get("findings") or {}
            if t["id"] in found and not found[t["id"]].get("reproduced"):
                problems.append(f"sglang {rel}: {t['property']}: {t['id']} is triaged but no longer reproduces "
                                f"({found[t['id']].get('matched', 0)} examples in its signature)")  # fmt: skip
    return problems


def triage_ids(
    triaged: dict[tuple[str, str], list[dict[str, Any]]], release: str, pid: str, prop: dict[str, Any]
) -> list[str]:
    """The triage ids behind a failing property on a release, none when untriaged: every finding recorded for it that
    reproduced in the run (a property can have several, e.g. 0.5.22's D1: F1 and T5), and a triaged plain failure
    (a finding without a signature)."""
    found = prop.get("findings") or {}
    ids = [t["id"] for t in triaged.get((release, pid), ()) if t["id"] not in found or found[t["id"]].get("reproduced")]
    return list(dict.fromkeys(ids))


def summary_table(
    rows: list[dict[str, Any]], matrix: dict[str, dict[str, str]], triaged: dict[tuple[str, str], list[dict[str, Any]]]
) -> str:
    """One line per release: how many properties passed / were not applicable, and each failure with its triage."""
    out = ["| release | passed | failed (triage) | not applicable | wall s |", "|---|---|---|---|---|"]
    for r in rows:
        statuses = matrix[r["release"]]
        if not r.get("properties"):
            out.append(f"| {r['release']} | - | {NOT_IMPORTABLE}: {r.get('reason', '')} | - | {r.get('seconds', '')} |")
            continue
        bad = [
            f"{pid} ({', '.join(triage_ids(triaged, r['release'], pid, r['properties'][pid])) or 'UNTRIAGED'})"
            for pid, st in statuses.items()
            if st not in SETTLED
        ]
        counts = [sum(1 for st in statuses.values() if st == want) for want in ("passed", "not applicable")]
        out.append(f"| {r['release']} | {counts[0]} | {', '.join(bad) or '-'} | {counts[1]} | {r.get('seconds', '')} |")
    return "\n".join(out) + "\n"


def not_applicable_reason(message: str) -> str:
    """Why a property was not applicable on a release: the release has no such code, its contract differs by
    design (a boundary with its evidence), or pdverify has no driver for the release's form of the path."""
    if kind := _not_driven(message):
        return kind
    if "contract before" in message or "contract after" in message:
        return "contract"
    return "no such code"


def verdict_facts(row: dict[str, Any], triaged: dict[tuple[str, str], list[dict[str, Any]]]) -> dict[str, Any]:
    """What a release's verdict says, as data (``releases.json``'s ``verdict``): the defects it has (triage ids),
    untriaged failures, properties and clauses passed of those checked, the not-applicable counts by reason and
    the units driven of those present; ``importable: False`` with the reason for a release that does not import."""
    if not row.get("properties"):
        return {"importable": False, "reason": row.get("reason", "")}
    release, props = row["release"], row["properties"]
    checked = {pid: p for pid, p in props.items() if p["status"] != "not applicable"}
    failing = {pid: triage_ids(triaged, release, pid, p) for pid, p in checked.items() if p["status"] not in SETTLED}
    reasons: dict[str, int] = {}
    for p in props.values():
        if p["status"] == "not applicable":
            why = not_applicable_reason(p.get("message", ""))
            reasons[why] = reasons.get(why, 0) + 1
    clauses = [c for p in checked.values() for c in p.get("clauses", ()) if c["status"] != "not applicable"]
    cov = coverage(row)
    return {
        "importable": True,
        "defects": sorted({i for ids in failing.values() for i in ids}),
        "untriaged": sorted(pid for pid, ids in failing.items() if not ids),
        "passed": sum(1 for p in checked.values() if p["status"] == "passed"),
        "checked": len(checked),
        "clauses_passed": sum(1 for c in clauses if c["status"] == "passed"),
        "clauses": len(clauses),
        "not_applicable": dict(sorted(reasons.items())),
        "units_driven": cov["driven"],
        "units_not_driven": cov["no driver"] + cov["import failure"],
    }


def verdict_parts(facts: dict[str, Any]) -> tuple[str, str, str, str]:
    """A verdict's four parts as the matrix prints them: the head (defects, or "sound on N of M checked
    properties"), the counts, the not-applicable counts by reason, the units driven of those present."""
    head = (
        f"defects: {', '.join(facts['defects'])}"
        if facts["defects"]
        else f"sound on {facts['passed']} of {facts['checked']} checked properties"
    )
    if facts["untriaged"]:
        head += f"; UNTRIAGED failures: {', '.join(facts['untriaged'])}"
    counts = (
        f"{facts['passed']} passed of {facts['checked']} checked properties, "
        f"{facts['clauses_passed']} of {facts['clauses']} clauses"
    )
    na = ", ".join(f"{n} {why}" for why, n in facts["not_applicable"].items()) or "none"
    units = (
        f"{len(facts['units_driven'])} driven of {len(facts['units_driven']) + len(facts['units_not_driven'])} present"
    )
    return head, counts, na, units


def verdict(row: dict[str, Any], triaged: dict[tuple[str, str], list[dict[str, Any]]]) -> str:
    """One line per release: the defects it has (triage ids) or "sound on N of M checked properties", and the
    not-applicable counts by reason."""
    facts = verdict_facts(row, triaged)
    if not facts["importable"]:
        return f"* **{row['release']}**: not importable ({facts['reason']})"
    head, counts, na, units = verdict_parts(facts)
    if facts["units_not_driven"]:
        units += f" (not driven: {', '.join(facts['units_not_driven'])})"
    return f"* **{row['release']}**: {head} ({counts}); not applicable: {na}; units: {units}"


def write_outputs(rows: list[dict[str, Any]], args: argparse.Namespace, triage: list[dict[str, Any]]) -> None:
    ids: list[str] = []
    for r in rows:
        for pid in r.get("properties", {}):
            if pid not in ids:
                ids.append(pid)
    matrix = {
        r["release"]: (
            {pid: p["status"] for pid, p in r["properties"].items()}
            if r.get("properties")
            else dict.fromkeys(ids, NOT_IMPORTABLE)
        )
        for r in rows
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "matrix.json").write_text(json.dumps(matrix, indent=1) + "\n")
    triaged: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for t in triage:
        for rel in t["releases"]:
            triaged.setdefault((rel, t["property"]), []).append(t)
    meta = [{**{k: v for k, v in r.items() if k != "properties"}, "verdict": verdict_facts(r, triaged)} for r in rows]
    (args.out / "releases.json").write_text(json.dumps(meta, indent=1) + "\n")

    def short(status: str) -> str:
        return {"passed": "pass", "failed": "FAIL", "not applicable": "n/a", NOT_IMPORTABLE: "no import"}.get(
            status, status
        )

    verdicts = [verdict(r, triaged) for r in rows]
    md = ["# SGLang release matrix", "", "Verdict per release (triage ids: findings/triage.json):", "", *verdicts, ""]
    md += ["| release | " + " | ".join(ids) + " | wall s |", "|---" * (len(ids) + 2) + "|"]
    for r in rows:
        cells = []
        for pid in ids:
            status = matrix[r["release"]].get(pid, "not applicable")
            cell = short(status)
            if status not in SETTLED:
                tids = triage_ids(triaged, r["release"], pid, r["properties"][pid])
                cell = f"**{cell}** ({', '.join(tids) or 'untriaged'})"
            cells.append(cell)
        md.append(f"| {r['release']} | " + " | ".join(cells) + f" | {r.get('seconds', '')} |")
    md += ["", "## Units per release: present and driven", "",
           "Each unit a release has is driven through the release's own code, or listed here with why it is not "
           "(`no driver`: pdverify has no driver for that release's form of the path, the reason given per unit).",
           "", "| release | driven | not driven (why) | absent |", "|---|---|---|---|"]  # fmt: skip
    for r in rows:
        if not r.get("units"):
            continue
        cov = coverage(r)
        why = "; ".join(f"{u}: {r['units'][u]}" for u in cov["no driver"] + cov["import failure"]) or "-"
        md.append(f"| {r['release']} | {', '.join(cov['driven']) or '-'} | {why} | {', '.join(cov['absent']) or '-'} |")
    gone = [r for r in rows if not r["importable"]]
    if gone:
        md += ["", "Releases that cannot be made importable:", ""]
        md += [f"* {r['release']}: {r['reason']}" for r in gone]
    (args.out / "matrix.md").write_text("\n".join(md) + "\n")
    (args.out / "summary.md").write_text(summary_table(rows, matrix, triaged))

    h = [
        "<!doctype html><meta charset=utf-8><title>pdverify: SGLang release matrix</title>",
        "<style>body{font:13px sans-serif}td,th{border:1px solid #ddd;padding:2px 4px;text-align:center}"
        "th{position:sticky;top:0;background:#fff}a{color:#fff}pre{white-space:pre-wrap;font-size:11px}</style>",
        f"<h1>SGLang release matrix</h1><p>profile {html.escape(args.profile)}, CPU; colour by status.</p>",
        "<ul>" + "".join(f"<li>{html.escape(v[2:]).replace('**', '')}</li>" for v in verdicts) + "</ul>",
        "<table><tr><th>release</th>" + "".join(f"<th>{html.escape(p)}</th>" for p in ids) + "<th>s</th></tr>",
    ]
    details = []
    for r in rows:
        tds = []
        for pid in ids:
            status = matrix[r["release"]].get(pid, "not applicable")
            colour = COLOURS.get(status, COLOURS["error"])
            label = html.escape(short(status))
            if status not in SETTLED:
                anchor = f"{r['release']}-{pid}"
                label = f"<a href='#{html.escape(anchor)}'>{label}</a>"
                p = r["properties"][pid]
                tids = triage_ids(triaged, r["release"], pid, p)
                details.append(
                    f"<h3 id='{html.escape(anchor)}'>sglang {html.escape(r['release'])}: {html.escape(pid)}"
                    f" ({html.escape(', '.join(tids)) or 'UNTRIAGED'})</h3>"
                    f"<p>{html.escape(p['message'])}</p><pre>{html.escape(p.get('counterexample') or '')}</pre>"
                    f"<p>reproduce: <code>{html.escape(reproduce(r['release'], p, args.profile))}</code></p>"
                )
            why = r.get("properties", {}).get(pid, {}).get("message", "") or r.get("reason", "")
            tds.append(f"<td style='background:{colour};color:#fff' title='{html.escape(why)}'>{label}</td>")
        h.append(f"<tr><th>{html.escape(r['release'])}</th>{''.join(tds)}<td>{r.get('seconds', '')}</td></tr>")
    h.append("</table>")
    h += details
    (args.out / "matrix.html").write_text("\n".join(h) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="pdverify check on every SGLang release with PD code")
    ap.add_argument("releases", nargs="*", help="default: every release in ci/sglang-releases.txt")
    ap.add_argument("--profile", default="ci")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--reuse", action="store_true", help="reuse release environments that are already built")
    ap.add_argument("--base", type=Path, default=ROOT / ".venv-sglang")
    ap.add_argument("--root", type=Path, default=ROOT / ".sglang-releases")
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "matrix")
    ap.add_argument("--wheels", type=Path, default=None, help="a folder of sglang wheels (offline)")
    ap.add_argument("--triage", type=Path, default=TRIAGE_FILE)
    ap.add_argument("--no-diff", action="store_true", help="skip the release differential (ci/release_diff.py)")
    ap.add_argument("--no-replay", action="store_true", help="skip the findings' replays (ci/replay_findings.py)")
    ap.add_argument("--diff-examples", type=int, default=40, help="the differential's inputs per unit")
    ap.add_argument(
        "--assemble",
        action="store_true",
        help="run nothing: build the matrix from the reports already under --out (one CI job per release)",
    )
    args = ap.parse_args(argv)
    known = all_releases()
    releases = args.releases or known
    unknown = [r for r in releases if r not in known]
    if unknown:
        print(f"not a release with PD code (ci/sglang-releases.txt): {', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.assemble:
        return finish([assembled(r, args) for r in releases], args, time.perf_counter())
    if not (args.base / "bin" / "python").exists():
        print(f"no base environment at {args.base}: run ci/build-sglang-env.sh first", file=sys.stderr)
        return 2
    args.base, args.root, args.out = args.base.resolve(), args.root.resolve(), args.out.resolve()
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(lambda r: run_release(r, args), releases))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rows.json").write_text(json.dumps(rows) + "\n")
    code = finish(rows, args, start)
    importable = [r["release"] for r in rows if r["importable"]]
    sys.path.insert(0, str(ROOT / "ci"))
    if not args.no_replay and importable:
        # each finding's recorded examples fail where it is recorded and pass where it was fixed, whatever the
        # generators drew (ci/replay_findings.py writes replays.md beside matrix.md)
        import replay_findings

        code = max(code, replay_findings.main([*importable, "--jobs", str(args.jobs), "--root", str(args.root),
                                               "--out", str(args.out)]))  # fmt: skip
    if args.no_diff or len(importable) < 2:
        return code
    # every behavioural difference between adjacent releases is explained, or the matrix fails like an untriaged
    # failure (ci/release_diff.py writes diffs.md beside matrix.md)
    import release_diff

    diff = release_diff.main([*importable, "--examples", str(args.diff_examples), "--jobs", str(args.jobs),
                              "--root", str(args.root), "--out", str(args.out)])  # fmt: skip
    return max(code, diff)


def assembled(release: str, args: argparse.Namespace) -> dict[str, Any]:
    """A release's row from what an earlier run left under ``--out`` (its ``rows.json`` or its report)."""
    saved = args.out / "rows.json"
    if saved.exists():
        for row in json.loads(saved.read_text()):
            if row["release"] == release:
                return dict(row)
    meta = args.out / "releases.json"
    row: dict[str, Any] = {"release": release, "importable": False, "reason": "no report from this release's job"}
    built = args.root / release / "release.json"
    if built.exists():
        row.update({k: v for k, v in json.loads(built.read_text()).items() if k in ("importable", "reason")})
    if meta.exists():
        row.update(next((m for m in json.loads(meta.read_text()) if m["release"] == release), {}))
    report = args.out / release / "check.json"
    if report.exists():
        data = json.loads(report.read_text())
        row.update(
            importable=True,
            reason="",
            summary=data["summary"],
            properties={p["id"]: p for p in data["properties"]},
            units=data["target"].get("units", {}),
        )
    return row


def finish(rows: list[dict[str, Any]], args: argparse.Namespace, start: float) -> int:
    for r in rows:
        ran = f"{r.get('summary')} ({r.get('seconds', '?')} s)"
        state = ran if r.get("summary") else f"{NOT_IMPORTABLE}: {r['reason']}"
        print(f"sglang {r['release']}: {state}")
    triage = json.loads(args.triage.read_text())["triage"] if args.triage.exists() else []
    write_outputs(rows, args, triage)
    wall = time.perf_counter() - start
    print(
        f"{len(rows)} releases, {sum(1 for r in rows if r['importable'])} importable, wall {wall:.0f} s; "
        f"{args.out} written"
    )
    problems = triage_gate(rows, triage)
    for p in problems:
        print(f"TRIAGE: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
