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
# --source names the package: a dotted module path makes coverage resolve it before the tracer starts, which
# crashes torch 2.14's import (SystemError "bad call flags"); the reports are restricted to the files of the functions under test.
# A failing property (exit 1) is judged by the findings gate below; anything worse stops here.
code=0
"$VENV/bin/python" -m coverage run --branch --context=sglang-cpu --data-file="$OUT/.coverage" --source=sglang \
  -m pdverify.cli.main check --target sglang --profile "${PROFILE:-ci}" --device cpu --report "$OUT/check.json" || code=$?
[ "$code" -le 1 ] || { echo "conformance: pdverify check exited $code" >&2; exit "$code"; }
"$VENV/bin/python" -m pdverify.cli.main coverage --data "$OUT/.coverage" --functions sglang --out "$OUT" \
  --title "SGLang 0.5.23: functions under test" --unreached ci/sglang-unreached.json --require-explained \
  --include '*/sglang/srt/mem_cache/common.py' '*/sglang/srt/disaggregation/decode_schedule_batch_mixin.py' \
  '*/sglang/srt/disaggregation/minimax.py' '*/sglang/srt/disaggregation/prefill.py' \
  '*/sglang/srt/disaggregation/common/conn.py' '*/sglang/srt/disaggregation/common/staging_buffer.py' \
  '*/sglang/srt/disaggregation/common/utils.py' '*/sglang/srt/disaggregation/mooncake/conn.py' \
  '*/sglang/srt/disaggregation/decode.py' '*/sglang/srt/disaggregation/decode_hicache_mixin.py' \
  '*/sglang/kernels/ops/memory/virtual_slot.py'
# SGLang's failures must be exactly the recorded findings (findings/sglang-<release>.json)
"$VENV/bin/python" ci/findings_gate.py "$OUT/check.json" "findings/sglang-$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))').json"
