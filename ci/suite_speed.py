"""Examples per second of the property suite, before and after, side by side in one run.

    python ci/suite_speed.py [--base REF ...] [--examples N] [--seed S] [--json PATH] [PROPERTY ...]

Checks each ``REF`` (default: the commit before the speed work, and the end of its second pass) out into a
temporary git worktree, then runs every chosen property (default: all but M1) on the default target and cpu,
``N`` examples, the same Hypothesis seed, once with each base tree's pdverify and strategies and once with this
tree's, each in its own process, and prints examples/s per property and the ratio of this tree to each base (a
property a base does not have is "absent" there). A measurement, not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
BASES = ("a8a0ec7", "88c49b5")
"""The last commit before the strategies drew one seed per ordering (issue 14, the numbers the issue quotes), and
the last one before they drew on the engine's primitives (the first base lacks the scheduler-level
properties)."""

WORKER = r"""
import json, sys, time
from hypothesis import settings
from pdverify.runner import load_properties
from pdverify.targets import load_target
from pdverify.properties.registry import EXAMPLES, reset_examples
import pdverify
assert pdverify.__file__.startswith(sys.argv[1]), (pdverify.__file__, sys.argv[1])
n, seed, wanted = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(",")
settings.register_profile("speed", max_examples=n, deadline=None, database=None, derandomize=False)
settings.load_profile("speed")
props, target, out = load_properties(), load_target("pdverify"), {}
for pid in wanted:
    info = props.get(pid)
    if info is None:
        continue
    test = info.test
    test._hypothesis_internal_use_settings = settings.get_profile("speed")
    test._hypothesis_internal_use_seed = seed
    reset_examples()
    t0 = time.perf_counter()
    test(target=target, device="cpu")
    dt = time.perf_counter() - t0
    out[pid] = {"examples": EXAMPLES.examples, "seconds": dt}
print(json.dumps(out))
"""


def measure(tree: Path, examples: int, seed: int, props: list[str]) -> dict[str, dict[str, float]]:
    env = {**os.environ, "PYTHONPATH": str(tree), "CI": ""}
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, str(tree), str(examples), str(seed), ",".join(props)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode:
        raise SystemExit(f"measuring {tree} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", action="append", help=f"a commit to compare with (repeatable; default {BASES})")
    ap.add_argument("--examples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--json", type=Path)
    ap.add_argument("properties", nargs="*")
    args = ap.parse_args()
    bases: list[str] = args.base or list(BASES)
    sys.path.insert(0, str(HERE))
    from pdverify.runner import load_properties

    props = args.properties or [p for p in load_properties() if p != "M1"]
    before: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, base in enumerate(bases):
            base_tree = Path(tmp) / f"base{k}"
            subprocess.run(
                ["git", "-C", str(HERE), "worktree", "add", "-q", "--detach", str(base_tree), base], check=True
            )
            try:
                before[base] = measure(base_tree, args.examples, args.seed, props)
            finally:
                subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(base_tree)], check=False)
    after = measure(HERE, args.examples, args.seed, props)
    rows = []
    print(f"examples/s per property, {args.examples} examples, seed {args.seed}, cpu, target pdverify")
    head = "".join(f"{b[:10]:>11}" for b in bases) + f"{'now':>8}" + "".join(f"{'x' + b[:7]:>10}" for b in bases)
    print(f"{'property':10}{head}")
    for pid in props:
        a = after.get(pid)
        if not a:
            print(f"{pid:10} absent now")
            continue
        ea = a["examples"] / a["seconds"]
        rates = {b: before[b][pid]["examples"] / before[b][pid]["seconds"] for b in bases if pid in before[b]}
        cells = "".join(f"{rates[b]:11.0f}" if b in rates else f"{'absent':>11}" for b in bases)
        ratios = "".join(f"{ea / rates[b]:9.1f}x" if b in rates else f"{'':>10}" for b in bases)
        print(f"{pid:10}{cells}{ea:8.0f}{ratios}")
        rows.append({"property": pid, "now": ea, "examples_now": a["examples"], "bases": rates})
    totals = {b: sum(v["seconds"] for v in before[b].values()) for b in bases}
    ta = sum(v["seconds"] for v in after.values())
    print(f"{'total s':10}" + "".join(f"{totals[b]:11.1f}" for b in bases) + f"{ta:8.1f}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "bases": bases,
                    "examples": args.examples,
                    "seed": args.seed,
                    "rows": rows,
                    "seconds_bases": totals,
                    "seconds_now": ta,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
