"""Every finding's recorded examples (``findings/examples.json``), replayed on the releases it concerns.

For each release given (default: every release in ``ci/sglang-releases.txt``) that a recorded example concerns - a
release its finding is recorded for on the example's property, or the release that fixed it - ``python -m
pdverify.replay`` runs in that release's environment (as the matrix runs its check). The example must fail where the
finding is recorded, explained by it, and pass on the fixing release. Writes ``<out>/replays.md`` and
``replays.json``; exits 1 when an example does not do what its record says, or a release it concerns could not be
replayed. Independent of what the generators draw: a finding's evidence does not move when a strategy changes.

Usage: ``python ci/replay_findings.py [VERSION ...] [--jobs 2] [--out reports/matrix]``, with the base conformance
environment's python (``.venv-sglang/bin/python``), after the releases' environments are built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "ci"))

from release_diff import chosen_releases, release_parser  # noqa: E402

from pdverify.replay import TRIAGE_FILE, due, fixed_releases, load_examples  # noqa: E402


def replay_release(release: str, root: Path) -> list[dict[str, Any]]:
    """The replays of ``release``, run in its environment (one record with ``outcome: error`` when it cannot run)."""
    env = {**os.environ, "PYTHONPATH": f"{root / release}{os.pathsep}{ROOT}", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONWARNINGS": "ignore"}  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "pdverify.replay", "--json"], env=env, capture_output=True,
                          text=True, check=False, cwd=ROOT)  # fmt: skip
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode not in (0, 1) or any(r["release"] != release for r in rows):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        why = f"the replay did not run on sglang {release}: {tail}"
        return [{"release": release, "finding": "-", "property": "-", "shape": "-", "expected": "-",
                 "outcome": "error", "ok": False, "message": why}]  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    args = release_parser(__doc__.split("\n\n")[0]).parse_args(argv)
    asked = chosen_releases(args.releases)
    if asked is None:
        return 2
    fixed = fixed_releases(json.loads(TRIAGE_FILE.read_text())["triage"])
    examples = load_examples()
    due_on = {r: sum(1 for e in examples if due(e, r, fixed)) for r in asked}  # each release's due replays, once
    releases = [r for r in asked if due_on[r]]
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = [row for rel in pool.map(lambda r: replay_release(r, args.root), releases) for row in rel]
    wall = time.perf_counter() - start
    expected = sum(due_on.values())
    bad = [r for r in rows if not r["ok"]]
    md = [
        "# Findings replayed",
        "",
        f"Each finding's recorded examples (`findings/examples.json`) on the releases they concern: {len(rows)} "
        f"replays ({expected} due) on {len(releases)} releases in {wall:.0f} s; {len(bad)} not as recorded. An "
        "example must fail where its finding is recorded (explained by it) and pass on the release that fixed it.",
        "",
        "| release | finding | property | shape | expected | outcome | ok | message |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        message = r["message"][:160].replace("|", "\\|")
        md.append(f"| {r['release']} | {r['finding']} | {r['property']} | {r['shape']} | {r['expected']} | "
                  f"{r['outcome']} | {'ok' if r['ok'] else '**NO**'} | {message} |")  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "replays.md").write_text("\n".join(md) + "\n")
    summary = {"replays": len(rows), "due": expected, "releases": len(releases), "not_as_recorded": len(bad),
               "wall_s": round(wall), "findings": len({r["finding"] for r in rows if r["finding"] != "-"})}  # fmt: skip
    (args.out / "replays.json").write_text(json.dumps({"summary": summary, "replays": rows}, indent=1) + "\n")
    for r in bad:
        print(f"REPLAY: sglang {r['release']}: {r['finding']} {r['property']} ({r['shape']}): expected "
              f"{r['expected']}, {r['outcome']}: {r['message'][:200]}", file=sys.stderr)  # fmt: skip
    if len(rows) < expected and not bad:
        print(f"REPLAY: {expected - len(rows)} due replays did not run", file=sys.stderr)
        return 1
    print(f"replays: {len(rows)} on {len(releases)} releases in {wall:.0f} s, {len(bad)} not as recorded; "
          f"{args.out / 'replays.md'} written")  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
