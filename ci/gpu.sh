#!/usr/bin/env bash
# The GPU job, for a CUDA machine with no network. It installs nothing and downloads nothing: it expects
# Python (3.11+) with torch (a CUDA build), hypothesis, pytest, numpy and pytest-xdist already installed, and
# runs pdverify from this source tree (PYTHONPATH; the pytest plugin is passed with -p), so there is no
# build, no build isolation and no step that can fail offline. Rich is used when present, plain text otherwise.
#
#   bash ci/gpu.sh            the thorough profile on cuda and cpu, ledger cross-check, full bench
#   bash ci/gpu.sh --quick    within 8 minutes: ci profile on cuda, the ledger cross-check against the CUDA
#                             profiler, pdverify bench --device cuda --quick
#   bash ci/gpu.sh --quick --cpu-rehearsal
#                             every step on cpu instead (no CUDA needed; the profiler cross-check is skipped):
#                             tests the offline path on a machine without a GPU
#
# Writes reports/gpu/ (check JSON and text, ledger cross-check, bench JSON and text, environment.txt).
# Exit codes: 0 all green; 1 a property failed or the ledger disagreed with the profiler; 3 a package is
# missing or CUDA is absent (without --cpu-rehearsal).
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=0 REHEARSAL=0
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    --cpu-rehearsal) REHEARSAL=1 ;;
    *) echo "ci/gpu.sh: unknown argument $arg (known: --quick, --cpu-rehearsal)" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3}
OUT=${OUT:-reports/gpu}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PIP_NO_INDEX=1

echo "== environment (nothing is installed: every package must already be there)"
"$PY" - <<'PY' | tee "$OUT/environment.txt"
import importlib.util, sys
need = ["torch", "hypothesis", "pytest", "numpy", "xdist"]
missing = [m for m in need if importlib.util.find_spec(m) is None]
if missing:
    print(f"ci/gpu.sh: missing package(s): {', '.join(missing)} - install them on the runner image "
          "(this job never downloads)", file=sys.stderr)
    sys.exit(3)
import hypothesis, numpy, pytest, torch
print(f"python {sys.version.split()[0]}  torch {torch.__version__} (cuda {torch.version.cuda})  "
      f"hypothesis {hypothesis.__version__}  pytest {pytest.__version__}  numpy {numpy.__version__}  "
      f"rich {'present' if importlib.util.find_spec('rich') else 'absent (plain output)'}")
PY

DEVICE=cuda
if [ "$REHEARSAL" = 1 ]; then
  DEVICE=cpu
  echo "== cpu rehearsal: every step on cpu (the CUDA check and the profiler cross-check are skipped)"
else
  echo "== CUDA check"
  "$PY" -c "import torch, sys; ok = torch.cuda.is_available(); print('cuda:', ok, torch.cuda.get_device_name(0) if ok else 'no CUDA device'); sys.exit(0 if ok else 3)"
fi

if [ "$QUICK" = 1 ]; then PROFILE=${PDVERIFY_PROFILE:-ci}; BENCH=(--quick); else PROFILE=${PDVERIFY_PROFILE:-thorough}; BENCH=(); fi
status=0
pdv() { "$PY" -m pdverify.cli.main "$@"; }

echo "== the property suite on $DEVICE (profile $PROFILE)"
pdv check --device "$DEVICE" --profile "$PROFILE" -n "${JOBS:-2}" --report "$OUT/check-$DEVICE.json" | tee "$OUT/check-$DEVICE.txt" || status=1
if [ "$QUICK" = 0 ] && [ "$DEVICE" = cuda ]; then
  pdv check --device cpu --profile "$PROFILE" -n "${JOBS:-2}" --report "$OUT/check-cpu.json" | tee "$OUT/check-cpu.txt" || status=1
fi

if [ "$DEVICE" = cuda ]; then
  echo "== the ledger against the CUDA profiler"
  "$PY" -m pdverify.ledger.crosscheck | tee "$OUT/ledger-crosscheck.txt" || status=1
fi

echo "== pdverify bench --device $DEVICE ${BENCH[*]}"
pdv bench --device "$DEVICE" "${BENCH[@]}" --targets legacy,pdverify,fast --json "$OUT/bench-$DEVICE.json" | tee "$OUT/bench-$DEVICE.txt" || status=1
exit "$status"
