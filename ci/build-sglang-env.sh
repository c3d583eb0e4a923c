#!/usr/bin/env bash
# Build the SGLang conformance environment: its own virtual environment (default .venv-sglang) with the
# released sglang 0.5.23 and its pinned CPU import closure (ci/requirements-sglang.txt, installed --no-deps so
# that sglang's full GPU pin list is not pulled), plus this checkout of pdverify. Kept apart from the main
# suite's CPU torch: this one carries torch 2.14.1 (about 6 GB).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv-sglang}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
"$VENV/bin/python" -m pip install -q --no-deps -r ci/requirements-sglang.txt
"$VENV/bin/python" -m pip install -q --no-deps -e .
"$VENV/bin/python" - <<'PY'
import sglang
import sglang.srt.disaggregation.decode_schedule_batch_mixin  # noqa: F401
import sglang.srt.mem_cache.common  # noqa: F401
print(f"sglang {sglang.__version__} imports on CPU")
PY
