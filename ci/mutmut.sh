#!/usr/bin/env bash
# mutmut 3.x over pdverify/production with the property suite as its test command (forkserver isolation:
# torch is not fork-safe). Writes reports/mutmut.txt (results) and prints the score.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q 'mutmut==3.8.1'
mkdir -p reports
rm -rf mutants
python -m mutmut run --max-children "${JOBS:-2}" || true
python -m mutmut results --all true > reports/mutmut.txt || python -m mutmut results > reports/mutmut.txt
python - <<'PY'
import collections, re
counts = collections.Counter()
for line in open("reports/mutmut.txt"):
    m = re.match(r"\s*(\S+): (\w[\w ]*)$", line.rstrip())
    if m:
        counts[m.group(2)] += 1
total = sum(counts.values())
if not total:
    raise SystemExit("mutmut produced no results: nothing was measured")
killed = counts.get("killed", 0)
print(dict(counts), f"score {killed}/{total} = {killed / total:.1%}")
PY
