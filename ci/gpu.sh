#!/usr/bin/env bash
# The GPU job, runnable on any CUDA machine: the property suite on cuda and cpu (thorough profile unless
# PDVERIFY_PROFILE says otherwise), the ledger cross-checked against the CUDA profiler, and pdverify bench.
# Writes reports/gpu/. Needs a CUDA build of torch (installed here if torch is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-reports/gpu}
PROFILE=${PDVERIFY_PROFILE:-thorough}
mkdir -p "$OUT"
python3 -c "import torch" 2>/dev/null || python3 -m pip install -q torch
python3 -m pip install -q --no-deps -e . && python3 -m pip install -q 'hypothesis>=6.120' pytest numpy
python3 -c "import torch, sys; ok = torch.cuda.is_available(); print('cuda:', ok, torch.version.cuda, torch.cuda.get_device_name(0) if ok else ''); sys.exit(0 if ok else 3)"
export PYTHONUNBUFFERED=1
pdverify check --device cuda --profile "$PROFILE" --report "$OUT/check-cuda.json" | tee "$OUT/check-cuda.txt"
pdverify check --device cpu --profile "$PROFILE" --report "$OUT/check-cpu.json" -k "not M1" | tee "$OUT/check-cpu.txt"
python3 -m pdverify.ledger.crosscheck | tee "$OUT/ledger-crosscheck.txt"
pdverify bench --device cuda --json "$OUT/bench-cuda.json" | tee "$OUT/bench-cuda.txt"
