#!/usr/bin/env bash
# The SGLang release matrix: pdverify check --target sglang on each release (default: every release with PD code,
# ci/sglang-releases.txt), each in its own directory over the base conformance environment. Writes reports/matrix/
# (matrix.json, matrix.md, matrix.html, one run report per release); exits 1 on an untriaged failure or a triaged
# one that no longer reproduces (findings/triage.json). Not part of .ci/run: a full matrix runs for tens of minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-sglang}
bash ci/build-sglang-env.sh "$VENV" >/dev/null
exec "$VENV/bin/python" ci/conformance_matrix.py --base "$VENV" --profile "${PROFILE:-ci}" --jobs "${JOBS:-2}" "$@"
