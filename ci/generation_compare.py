"""Examples to failure by generation alone, before and after, side by side in one run.

    python ci/generation_compare.py [--base REF] [--after REF] [--seeds N] [--jobs J] [--only IDS]
                                    [--json PATH] [--md PATH]

Checks ``--base`` (default: the last commit before the strategies' boundary weights and swarm switches) out into
a temporary git worktree and runs ``pdverify mutate --generation-only`` there and in this tree (or in commit
``--after``, checked out the same way), each in its own process, with the same seeds (the measurement's fixed
ones, ``20261201`` on); then prints, per family and overall,
the kill rate by generation alone and the median / p95 / max generated examples to the first failure, before and
after, and every mutant whose verdict or count changed. Mutants only one side has are listed apart. A
measurement, not a test: nothing here asserts a figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
BASE = "aad0bad"
"""The end of the session that measured 154 of 160 mutants killed by generation alone on every seed."""

RUN = "import sys; from pdverify.cli.main import main; raise SystemExit(main(sys.argv[1:]))"


def measure(tree: Path, seeds: int, jobs: int, only: str | None, out: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree), "CI": ""}
    cmd = [sys.executable, "-c", RUN, "mutate", "--generation-only", "--seeds", str(seeds), "--jobs", str(jobs)]
    cmd += ["--json", str(out)] + (["--only", only] if only else [])
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if not out.exists():
        raise SystemExit(f"measuring {tree} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def _cell(summary: dict[str, Any]) -> str:
    return (
        f"{summary['killed']}/{summary['mutants']} ({summary['kill_rate']:.0%}) | "
        f"{summary['median']:g} | {summary['p95']:.0f} | {summary['max']}"
    )


def _counts(m: dict[str, Any]) -> str:
    return ", ".join("-" if n is None else str(n) for n in m["examples_to_failure"])


def table(before: dict[str, Any], after: dict[str, Any], base: str) -> str:
    fam_b, fam_a = before["summary"]["families"], after["summary"]["families"]
    lines = [
        f"| family | before ({base}): killed on every seed | median | p95 | max "
        "| after: killed on every seed | median | p95 | max |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| **all** | {_cell(before['summary']['overall'])} | {_cell(after['summary']['overall'])} |",
    ]
    for fam in sorted(set(fam_b) | set(fam_a)):
        left = _cell(fam_b[fam]) if fam in fam_b else "absent | | |"
        right = _cell(fam_a[fam]) if fam in fam_a else "absent | | |"
        lines.append(f"| {fam} | {left} | {right} |")
    mb = {m["id"]: m for m in before["mutants"]}
    ma = {m["id"]: m for m in after["mutants"]}
    changed = [
        f"* {mid}: {_counts(mb[mid])} -> {_counts(ma[mid])}"
        for mid in sorted(set(mb) & set(ma))
        if mb[mid]["examples_to_failure"] != ma[mid]["examples_to_failure"]
    ]
    lines += ["", f"Examples per seed, changed ({len(changed)} of {len(set(mb) & set(ma))} mutants on both sides):"]
    lines += changed or ["* none"]
    only_a = sorted(set(ma) - set(mb))
    only_b = sorted(set(mb) - set(ma))
    if only_a:
        lines += ["", "Only after: " + "; ".join(f"{mid} ({_counts(ma[mid])})" for mid in only_a)]
    if only_b:
        lines += ["", "Only before: " + "; ".join(f"{mid} ({_counts(mb[mid])})" for mid in only_b)]
    lines += ["", f"Seeds {', '.join(map(str, after['seeds']))}; wall {before['wall_s']:.0f} s before, "
              f"{after['wall_s']:.0f} s after."]  # fmt: skip
    return "\n".join(lines)


def _seeds(n: int) -> list[int]:
    """The seeds ``pdverify mutate --generation-only --seeds n`` uses (``pdverify.cli.main``)."""
    return [20261201 + k for k in range(n)]


def _at(ref: str, tmp: Path, name: str, args: argparse.Namespace) -> dict[str, Any]:
    """The measurement of commit ``ref``, checked out in a temporary worktree."""
    tree = tmp / name
    subprocess.run(["git", "-C", str(HERE), "worktree", "add", "-q", "--detach", str(tree), ref], check=True)
    try:
        return measure(tree, args.seeds, args.jobs, args.only, tmp / f"{name}.json")
    finally:
        subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(tree)], check=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default=BASE, help=f"the commit to compare with (default {BASE})")
    ap.add_argument("--after", default=None, help="a commit to measure instead of this working tree")
    ap.add_argument(
        "--before-json", type=Path, help="reuse the base's measurement from an earlier --json of this script"
    )
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default=None, help="mutants whose id or function contains one of these (comma-separated)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.before_json:
            earlier = json.loads(args.before_json.read_text())
            if earlier["base"] != args.base or earlier["before"]["seeds"] != _seeds(args.seeds):
                raise SystemExit(f"{args.before_json} measured {earlier['base']} on other seeds: rerun without it")
            before = earlier["before"]
        else:
            before = _at(args.base, Path(tmp), "before", args)
        if args.after:
            after = _at(args.after, Path(tmp), "after", args)
        else:
            after = measure(HERE, args.seeds, args.jobs, args.only, Path(tmp) / "after.json")
    text = table(before, after, args.base)
    print(text)
    if args.md:
        args.md.write_text(f"# Examples to failure, generation alone: before and after\n\n{text}\n")
    if args.json:
        args.json.write_text(json.dumps({"base": args.base, "before": before, "after": after}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
