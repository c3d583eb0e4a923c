"""The conformance gate: SGLang's failing properties must be exactly the recorded findings.

    python ci/findings_gate.py REPORT.json FINDINGS.json

Exit 0 when every property that failed on the release is a recorded finding and every recorded finding failed
again; 1 otherwise (a new failure: record it with its counterexample, never weaken the property; a finding
that no longer reproduces: the release or the suite changed, look before removing it); 2 on unreadable input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BAD = ("failed", "error", "timeout", "flaky", "no examples")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        report = json.loads(Path(argv[0]).read_text())
        recorded = json.loads(Path(argv[1]).read_text())
    except (OSError, ValueError) as exc:
        print(f"findings gate: cannot read input: {exc}", file=sys.stderr)
        return 2
    failing = {f"{p['id']}[{p['device']}]": p for p in report["properties"] if p["status"] in BAD}
    known = {f"{f['property']}[{f.get('device', 'cpu')}]": f for f in recorded["findings"]}
    new = sorted(set(failing) - set(known))
    gone = sorted(set(known) - set(failing))
    print(f"findings gate: {len(failing)} failing, {len(known)} recorded, {len(new)} new, {len(gone)} not reproduced")
    for key in new:
        p = failing[key]
        print(f"  NEW {key} {p['status']}: {p['message'][:300]}\n    reproduce: {p.get('reproduce', '')}")
    for key in gone:
        print(f"  NOT REPRODUCED {key}: {known[key].get('summary', '')}")
    return 1 if new or gone else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
