"""Examples per second of the property suite, before and after, side by side in one run.

    python ci/suite_speed.py [--base REF] [--examples N] [--seed S] [--json PATH] [PROPERTY ...]

Checks ``REF`` (default: the commit before the speed work) out into a temporary git worktree, then runs every
chosen property (default: all but M1) on the default target and cpu, ``N`` examples, the same Hypothesis seed,
once with the base tree's pdverify and strategies and once with this tree's, each in its own process, and
prints examples/s per property and the ratio. A measurement, not a test: nothing here asserts a speed.
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
BASE = "a8a0ec7"
"""The last commit before the strategies drew one seed per ordering (issue 14)."""

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
    ap.add_argument("--base", default=BASE)
    ap.add_argument("--examples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--json", type=Path)
    ap.add_argument("properties", nargs="*")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from pdverify.runner import load_properties

    props = args.properties or [p for p in load_properties() if p != "M1"]
    with tempfile.TemporaryDirectory() as tmp:
        base_tree = Path(tmp) / "base"
        subprocess.run(
            ["git", "-C", str(HERE), "worktree", "add", "-q", "--detach", str(base_tree), args.base], check=True
        )
        try:
            before = measure(base_tree, args.examples, args.seed, props)
        finally:
            subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(base_tree)], check=False)
    after = measure(HERE, args.examples, args.seed, props)
    rows = []
    print(f"examples/s per property, {args.examples} examples, seed {args.seed}, cpu, target pdverify")
    print(f"{'property':10} {'before':>10} {'after':>10} {'ratio':>7}")
    for pid in props:
        b, a = before.get(pid), after.get(pid)
        if not b or not a:
            print(f"{pid:10} {'absent' if not b else '':>10} {'absent' if not a else '':>10}")
            continue
        eb, ea = b["examples"] / b["seconds"], a["examples"] / a["seconds"]
        rows.append(
            {
                "property": pid,
                "before": eb,
                "after": ea,
                "ratio": ea / eb,
                "examples_before": b["examples"],
                "examples_after": a["examples"],
            }
        )
        print(f"{pid:10} {eb:10.0f} {ea:10.0f} {ea / eb:6.1f}x")
    tb, ta = sum(before[p]["seconds"] for p in before), sum(after[p]["seconds"] for p in after)
    print(f"{'total s':10} {tb:10.1f} {ta:10.1f} {tb / ta:6.1f}x")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "base": args.base,
                    "examples": args.examples,
                    "seed": args.seed,
                    "rows": rows,
                    "seconds_before": tb,
                    "seconds_after": ta,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
