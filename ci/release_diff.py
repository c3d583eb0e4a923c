"""Release-to-release differential over the SGLang releases: the same inputs through each unit on adjacent releases,
every behavioural difference listed and explained.

For each adjacent pair (A, B) of the releases given (default: every release with PD code, oldest first), a corpus
drawn once under A's input domain (``python -m pdverify.differential corpus``; shared by the pairs whose older
release has the same domain) goes through the units of both releases (``... probe``, in each release's environment,
as the matrix runs it), and ``pdverify.differential.compare`` lists, per unit, the inputs whose results differ and
how. Writes ``<out>/diffs.md`` and ``<out>/diffs.json``.

Every difference must be explained, and the script exits 1 on one that is not:

* by a boundary with its evidence (``pdverify/properties/contract_evidence.json``): an entry whose first release is
  B and whose units include the unit - a contract or input-domain boundary (its units are those of the properties
  and clauses it bounds), the release where a unit's code first appears or where pdverify's driver of it starts
  (``gate: unit``), or a documented change of behaviour no property bounds (``gate: behaviour``);
* or by a triaged defect (``findings/triage.json``): one that A has and B has not (fixed in B) or B has and A has
  not (introduced in B), on a unit its property calls.

Usage: ``python ci/release_diff.py [VERSION ...] [--examples 40] [--jobs 2] [--out reports/matrix]``; run with the
base conformance environment's python (``.venv-sglang/bin/python``), after the releases' environments are built
(``ci/conformance-matrix.sh`` builds them and runs this afterwards).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pdverify.differential.compare import compare_units  # noqa: E402
from pdverify.properties.releases import bind_release  # noqa: E402

EVIDENCE_FILE = ROOT / "pdverify" / "properties" / "contract_evidence.json"
TRIAGE_FILE = ROOT / "findings" / "triage.json"
RELEASES_FILE = ROOT / "ci" / "sglang-releases.txt"


def all_releases() -> list[str]:
    return [ln.strip() for ln in RELEASES_FILE.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def domain_key(release: str) -> str:
    """The input domain a release's strategies draw from, as a key: releases with equal keys share a corpus."""
    domain = bind_release(release)
    key = ",".join(f"{k}={int(v)}" for k, v in sorted(vars(domain).items()) if isinstance(v, bool))
    key += ";features=" + ",".join(sorted(domain.features))  # the input features too (state payloads, int32 wire...)
    bind_release(None)
    return key


def boundary_units() -> dict[str, set[str]]:
    """Per contract or domain boundary (its name in ``releases.py``), the units of the properties and clauses it
    bounds; per input-domain boundary, every unit whose inputs read the domain."""
    from pdverify.properties import releases
    from pdverify.runner import load_properties

    names = {id(c): n for n, c in vars(releases).items() if isinstance(c, releases.Contract)}
    units: dict[str, set[str]] = {}
    for info in load_properties().values():
        for clause in info.clauses:
            name = names.get(id(clause.contract))
            if name is not None:
                units.setdefault(name, set()).update(info.needs)
    return units


class Explanations:
    """What explains a difference between two releases ``a`` (older) and ``b`` on a unit: every boundary whose first
    release lies in ``(a, b]`` and names the unit (its evidence), and every triaged defect one of the two has and the
    other has not, on a unit its property calls. Adjacent releases are the matrix's case; a slice of releases
    (``.ci/run``) compares releases further apart, with every boundary between them."""

    def __init__(self, evidence: list[dict[str, Any]], triage: list[dict[str, Any]]) -> None:
        from pdverify.runner import load_properties

        props = load_properties()
        by_contract = boundary_units()
        self.releases = all_releases()
        self.boundaries: list[tuple[int, set[str], str]] = []
        for e in evidence:
            name = e["contract"].split()[0]
            if e["first_release"] not in self.releases:
                continue
            units = set(e.get("units", ())) | by_contract.get(name, set())
            why = f"{name} ({e['kind']}, #{e['pr']})" if e.get("pr") else f"{name} ({e['kind']})"
            self.boundaries.append((self.releases.index(e["first_release"]), units, why))
        self.defects = [
            (set(t["releases"]), set(props[t["property"]].needs) if t["property"] in props else set(), t)
            for t in triage
            if t.get("kind") == "upstream defect"
        ]

    def why(self, a: str, b: str, unit: str, kinds: Iterable[str] = ()) -> str | None:
        """What explains the difference (None: nothing). A unit probed on one side only (``kinds`` just
        ``presence``) is explained by a boundary alone: a defect changes what a unit does, never whether it runs."""
        lo, hi = self.releases.index(a), self.releases.index(b)
        reasons = [why for at, units, why in self.boundaries if lo < at <= hi and unit in units]
        for has, units, t in self.defects if set(kinds) != {"presence"} else ():
            if unit in units and (a in has) != (b in has):
                how = "fixed" if a in has else "introduced"
                reasons.append(f"{t['id']} ({how} by {b}: {t['property']})")
        return "; ".join(dict.fromkeys(reasons)) or None


def run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)


def release_parser(description: str) -> argparse.ArgumentParser:
    """The arguments of a script run over the releases' environments: the releases, jobs, where the environments
    are and where the reports go."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("releases", nargs="*", help="default: every release in ci/sglang-releases.txt")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--root", type=Path, default=ROOT / ".sglang-releases")
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "matrix")
    return ap


def chosen_releases(asked: list[str]) -> list[str] | None:
    """The releases asked for (every one with PD code when none is), oldest first; None, said on stderr, when one
    is not a release with PD code."""
    known = all_releases()
    unknown = [r for r in asked if r not in known]
    if unknown:
        print(f"not a release with PD code (ci/sglang-releases.txt): {', '.join(unknown)}", file=sys.stderr)
        return None
    return sorted(asked or known, key=known.index)


def main(argv: list[str] | None = None) -> int:
    ap = release_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=40, help="inputs per unit and corpus")
    args = ap.parse_args(argv)
    releases = chosen_releases(args.releases)
    if releases is None:
        return 2
    known = all_releases()
    if len(releases) < 2:
        print("the differential needs two releases or more", file=sys.stderr)
        return 2
    work = args.out / "diff"
    work.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    keys = {r: domain_key(r) for r in releases}
    corpus_of: dict[str, Path] = {}
    for older in releases[:-1]:
        key = keys[older]
        if key not in corpus_of:
            path = work / f"corpus-{older}.pkl"
            done = run([sys.executable, "-m", "pdverify.differential", "corpus", "--domain", older,
                        "--examples", str(args.examples), "--out", str(path)], dict(os.environ))  # fmt: skip
            if done.returncode:
                print(done.stdout + done.stderr, file=sys.stderr)
                return 2
            corpus_of[key] = path
    pairs = list(itertools.pairwise(releases))
    needed = sorted({(r, keys[a]) for a, b in pairs for r in (a, b)}, key=lambda rk: (known.index(rk[0]), rk[1]))

    def probe(release_key: tuple[str, str]) -> tuple[tuple[str, str], dict[str, Any]]:
        release, key = release_key
        out = work / f"probe-{release}-{hashlib.blake2b(key.encode(), digest_size=4).hexdigest()}.json"
        env = {**os.environ, "PYTHONPATH": f"{args.root / release}{os.pathsep}{ROOT}", "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONWARNINGS": "ignore"}  # fmt: skip
        done = run([sys.executable, "-m", "pdverify.differential", "probe", "--corpus", str(corpus_of[key]),
                    "--out", str(out)], env)  # fmt: skip
        if done.returncode or not out.exists():
            return release_key, {"error": (done.stdout + done.stderr).strip().splitlines()[-1:] or ["no output"]}
        record: dict[str, Any] = json.loads(out.read_text())
        if record.get("release") != release:
            return release_key, {"error": [f"probed sglang {record.get('release')}, not {release}"]}
        return release_key, record

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        records = dict(pool.map(probe, needed))
    evidence = json.loads(EVIDENCE_FILE.read_text())["boundaries"]
    triage = json.loads(TRIAGE_FILE.read_text())["triage"]
    why = Explanations(evidence, triage)
    rows: list[dict[str, Any]] = []
    unexplained = 0
    for a, b in pairs:
        ra, rb = records[(a, keys[a])], records[(b, keys[a])]
        if "error" in ra or "error" in rb:
            rows.append({"older": a, "newer": b, "error": ra.get("error") or rb.get("error")})
            unexplained += 1
            continue
        for d in compare_units(ra["units"], rb["units"]):
            reason = why.why(a, b, d.unit, d.kinds)
            unexplained += reason is None
            rows.append({"older": a, "newer": b, "unit": d.unit, "compared": d.compared, "differing": d.differing,
                         "kinds": d.kinds, "paths": d.paths, "example": d.example, "explained_by": reason})  # fmt: skip
    wall = time.perf_counter() - start
    summary = {"releases": len(releases), "pairs": len(pairs), "examples": args.examples, "wall_s": round(wall),
               "differences": sum(1 for r in rows if "unit" in r), "unexplained": unexplained}  # fmt: skip
    (args.out / "diffs.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    (args.out / "diffs.md").write_text(render(rows, summary))
    print(f"differential: {summary['pairs']} pairs, {summary['differences']} differences, {unexplained} unexplained, "
          f"wall {wall:.0f} s; {args.out / 'diffs.md'} written")  # fmt: skip
    for r in rows:
        if "error" in r:
            print(f"DIFF: {r['older']} -> {r['newer']}: probe failed: {r['error']}", file=sys.stderr)
        elif r["explained_by"] is None:
            print(f"DIFF: {r['older']} -> {r['newer']} {r['unit']}: {r['differing']} of {r['compared']} inputs "
                  f"differ ({', '.join(r['paths'])}) and nothing explains it", file=sys.stderr)  # fmt: skip
    return 1 if unexplained else 0


def render(rows: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    md = [
        "# Release-to-release differential",
        "",
        f"{summary['pairs']} adjacent pairs of {summary['releases']} releases, {summary['examples']} inputs per unit "
        f"and corpus (drawn under the older release's input domain), wall {summary['wall_s']} s: "
        f"{summary['differences']} behavioural differences, **{summary['unexplained']} unexplained**.",
        "",
        "| older -> newer | unit | differing / compared | where (kind: path, inputs) | explained by | first example |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            md.append(f"| {r['older']} -> {r['newer']} | - | - | probe failed: {r['error']} | **UNEXPLAINED** | |")
            continue
        where = "; ".join(f"{p} ({n})" for p, n in list(r["paths"].items())[:4])
        ex = json.dumps(r["example"])[:220].replace("|", "\\|")
        md.append(f"| {r['older']} -> {r['newer']} | {r['unit']} | {r['differing']} / {r['compared']} | "
                  f"{where} | {r['explained_by'] or '**UNEXPLAINED**'} | `{ex}` |")  # fmt: skip
    return "\n".join(md) + "\n"


if __name__ == "__main__":
    sys.exit(main())
