#!/usr/bin/env bash
# Conformance: pdverify's property suite against the released SGLang (real import, CPU), under branch coverage
# of SGLang's functions under test; writes reports/sglang/ (JSON run report, coverage HTML, XML, Markdown).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-sglang}
OUT=${OUT:-reports/sglang}
bash ci/build-sglang-env.sh "$VENV"
mkdir -p "$OUT"
export PYTHONWARNINGS=ignore::UserWarning
"$VENV/bin/python" -m coverage run --branch --data-file="$OUT/.coverage" \
  --source=sglang.srt.mem_cache.common,sglang.srt.disaggregation.decode_schedule_batch_mixin,sglang.srt.disaggregation.minimax \
  -m pdverify.cli.main check --target sglang --profile "${PROFILE:-ci}" --device cpu --report "$OUT/check.json"
"$VENV/bin/python" -m pdverify.cli.main coverage --data "$OUT/.coverage" --functions sglang --out "$OUT"
