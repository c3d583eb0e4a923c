"""Second defects planted behind the recorded findings must be reported as new (issue: a finding must not blind
its property).

    python ci/planted_defects.py FINDINGS.json [--out DIR]

For every plant in ``pdverify.mutants.sglang_plants`` (run in the SGLang conformance environment): ``pdverify check
--target sglang-plant:ID`` on the plant's property, then the findings gate on that report. A plant passes when
the gate reports its property's failure as NEW; exit 1 when any plant went unseen (the finding blinded its
property), 2 on a run that could not be judged.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from findings_gate import gate


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="planted_defects.py")
    parser.add_argument("findings")
    parser.add_argument("--out", default="reports/sglang/plants")
    args = parser.parse_args(argv)
    from pdverify.mutants.sglang_plants import PLANTS
    from pdverify.runner import load_properties

    properties = load_properties()
    recorded = json.loads(Path(args.findings).read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    unseen, broken = [], []
    print(f"planted defects: {len(PLANTS)} plants behind {len({p.behind for p in PLANTS.values()})} findings")
    for plant in PLANTS.values():
        report_path = out / f"{plant.id}.json"
        cmd = [sys.executable, "-m", "pdverify.cli.main", "check", "--target", f"sglang-plant:{plant.id}",
               "--profile", "ci", "--device", "cpu", "-k", properties[plant.property].name,
               "--report", str(report_path)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode not in (0, 1) or not report_path.exists():
            broken.append(plant.id)
            print(f"  {plant.id}: pdverify check exited {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
            continue
        report = json.loads(report_path.read_text())
        code, lines = gate(report, recorded, set())
        new = [line for line in lines if line.startswith(f"  NEW {plant.property}[")]
        verdict = "reported new" if code == 1 and new else "UNSEEN"
        if not new:
            unseen.append(plant.id)
        row = next(p for p in report["properties"] if p["id"] == plant.property)
        print(f"  {plant.id} behind {plant.behind} ({plant.property}, {plant.description}): {verdict}; "
              f"first failing example {row['first_failure']}: {row['message'][:160]}")  # fmt: skip
    if broken:
        return 2
    return 1 if unseen else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
