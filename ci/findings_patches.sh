#!/usr/bin/env bash
# Each finding's folder holds up: on the release as installed its reproducer exits 1 and its regression test fails;
# on a copy of the release with its own fix.patch applied the reproducer exits 0 and the test passes.
#
#   bash ci/findings_patches.sh [ID ...]        (default: every findings/F*/ folder)
#
# Runs in the SGLang conformance environment (ci/build-sglang-env.sh); exits 1 when any check does not hold.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-sglang}
PY="$VENV/bin/python"
export PYTHONWARNINGS=ignore
SITE=$("$PY" -c 'import sglang, pathlib; print(pathlib.Path(sglang.__file__).parent.parent)')
ids=("$@")
[ ${#ids[@]} -gt 0 ] || mapfile -t ids < <(ls -d findings/F*/ | xargs -n1 basename)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bad=0
for id in "${ids[@]}"; do
  dir=findings/$id
  test_file=$(ls "$dir"/test_*.py | head -1)
  "$PY" "$dir/repro.py" > "$work/$id-release.txt" 2>&1; before=$?
  "$PY" -m pytest -q -p no:cacheprovider "$test_file" > "$work/$id-test-release.txt" 2>&1; test_before=$?
  rm -rf "$work/sglang" && cp -r "$SITE/sglang" "$work/"
  patch -s -p2 --batch --forward -d "$work" < "$dir/fix.patch" || { echo "$id: fix.patch does not apply"; bad=1; continue; }
  PYTHONPATH="$work" "$PY" "$dir/repro.py" > "$work/$id-patched.txt" 2>&1; after=$?
  PYTHONPATH="$work" "$PY" -m pytest -q -p no:cacheprovider "$test_file" > "$work/$id-test-patched.txt" 2>&1; test_after=$?
  verdict=ok
  { [ "$before" = 1 ] && [ "$after" = 0 ] && [ "$test_before" = 1 ] && [ "$test_after" = 0 ]; } || { verdict=FAILED; bad=1; }
  echo "$id: repro exit $before on the release, $after with fix.patch; $(basename "$test_file"): $(tail -1 "$work/$id-test-release.txt") -> $(tail -1 "$work/$id-test-patched.txt"): $verdict"
done
exit $bad
