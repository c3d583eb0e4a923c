#!/usr/bin/env bash
# Conformance: pdverify's property suite against the released SGLang (real import, CPU), under branch coverage
# of SGLang's functions under test; writes reports/sglang/ (JSON run report, coverage HTML, XML, Markdown), then
# the findings gate (each recorded finding reproduced, nothing new) and the planted second defects (reported new).
#
#   bash ci/conformance.sh                                   the release as installed
#   bash ci/conformance.sh --patch findings/F1/fix.patch     the release with a candidate fix applied to a copy of
#                                                            its source (patch -p2, upstream paths python/sglang/...):
#                                                            the gate must report the fixed finding "fixed by patch"
#                                                            (the finding is the patch's folder name, or --fixes ID)
#                                                            and every other property as before; writes
#                                                            reports/sglang-patched-<ID>/
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-sglang}
PATCH="" FIXES=""
while [ $# -gt 0 ]; do
  case "$1" in
    --patch) PATCH=$(realpath "${2:?--patch needs a patch file}"); shift 2 ;;
    --fixes) FIXES=${2:?--fixes needs a finding id}; shift 2 ;;
    *) echo "conformance.sh: unknown argument $1 (use --patch FILE [--fixes ID])" >&2; exit 2 ;;
  esac
done
[ -z "$PATCH" ] || [ -f "$PATCH" ] || { echo "conformance.sh: --patch: no such file" >&2; exit 2; }
if [ -n "$PATCH" ] && [ -z "$FIXES" ]; then FIXES=$(basename "$(dirname "$PATCH")"); fi
OUT=${OUT:-reports/sglang${FIXES:+-patched-$FIXES}}
bash ci/build-sglang-env.sh "$VENV"
mkdir -p "$OUT"
RELEASE=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))')
export PYTHONWARNINGS=ignore::UserWarning
if [ -n "$PATCH" ]; then
  # the patch goes into a copy of the installed release, put first on the path; the venv stays as released
  SITE=$("$VENV/bin/python" -c 'import sglang, pathlib; print(pathlib.Path(sglang.__file__).parent.parent)')
  rm -rf "$OUT/patched" && mkdir -p "$OUT/patched"
  cp -r "$SITE/sglang" "$OUT/patched/"
  patch -p2 --batch --forward -d "$OUT/patched" < "$PATCH" || { echo "conformance.sh: $PATCH does not apply to sglang $RELEASE" >&2; exit 2; }
  export PYTHONPATH="$PWD/$OUT/patched${PYTHONPATH:+:$PYTHONPATH}"
  "$VENV/bin/python" -c "import sglang, sys; sys.exit(0 if sglang.__file__.startswith('$PWD/$OUT/patched') else 1)" \
    || { echo "conformance.sh: the patched copy is not the sglang imported" >&2; exit 2; }
  echo "conformance: sglang $RELEASE with $PATCH (fixes $FIXES)"
fi
# --source names the package: a dotted module path makes coverage resolve it before the tracer starts, which
# crashes torch 2.14's import (SystemError "bad call flags"); the reports are restricted to the files of the functions under test.
# A failing property (exit 1) is judged by the findings gate below; anything worse stops here.
code=0
# every call into an SGLang function under test is also checked against its own annotations (typeguard)
[ -n "$PATCH" ] || export PDVERIFY_CHECK_ANNOTATIONS="$PWD/$OUT/annotations.json"
"$VENV/bin/python" -m coverage run --branch --context=sglang-cpu --data-file="$OUT/.coverage" --source=sglang \
  -m pdverify.cli.main check --target sglang --profile "${PROFILE:-ci}" --device cpu --report "$OUT/check.json" || code=$?
[ "$code" -le 1 ] || { echo "conformance: pdverify check exited $code" >&2; exit "$code"; }
if [ -z "$PATCH" ]; then
  # the branches of the released code are explained one by one (ci/sglang-unreached.json); a patch moves them
  "$VENV/bin/python" -m pdverify.cli.main coverage --data "$OUT/.coverage" --functions sglang --out "$OUT" \
    --title "SGLang $RELEASE: functions under test" --unreached ci/sglang-unreached.json --require-explained \
    --include '*/sglang/srt/mem_cache/common.py' '*/sglang/srt/disaggregation/decode_schedule_batch_mixin.py' \
    '*/sglang/srt/disaggregation/minimax.py' '*/sglang/srt/disaggregation/prefill.py' \
    '*/sglang/srt/disaggregation/common/conn.py' '*/sglang/srt/disaggregation/common/staging_buffer.py' \
    '*/sglang/srt/disaggregation/common/utils.py' '*/sglang/srt/disaggregation/mooncake/conn.py' \
    '*/sglang/srt/disaggregation/decode.py' '*/sglang/srt/disaggregation/decode_hicache_mixin.py' \
    '*/sglang/kernels/ops/memory/virtual_slot.py' '*/sglang/srt/disaggregation/utils.py' \
    '*/sglang/srt/managers/io_struct.py' '*/sglang/srt/managers/tokenizer_manager.py'
fi
# SGLang's failures must be exactly the recorded findings (findings/sglang-<release>.json), each reproduced by its
# signature (pdverify.findings) - or, with a patch, the fixed one no longer reproduced
"$VENV/bin/python" ci/findings_gate.py "$OUT/check.json" "findings/sglang-$RELEASE.json" ${FIXES:+--fixed "$FIXES"}
if [ -z "$PATCH" ]; then
  # every annotation mismatch is recorded: an upstream annotation its own callers contradict, or an adapter bug
  unset PDVERIFY_CHECK_ANNOTATIONS
  "$VENV/bin/python" ci/annotations_gate.py "$OUT/annotations.json" "findings/annotations-$RELEASE.json"
  # a recorded finding must not blind its property: second defects planted behind each are reported new
  "$VENV/bin/python" ci/planted_defects.py "findings/sglang-$RELEASE.json" --out "$OUT/plants"
fi
