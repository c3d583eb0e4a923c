#!/usr/bin/env bash
# Build the SGLang conformance environment.
#
#   bash ci/build-sglang-env.sh [VENV]                      the base: VENV (default .venv-sglang) with the released
#                                                           sglang 0.5.23 and its pinned CPU import closure
#                                                           (ci/requirements-sglang.txt, --no-deps, so sglang's full
#                                                           GPU pin list is not pulled), plus this checkout of pdverify
#   bash ci/build-sglang-env.sh --release VERSION [VENV]    the base, then release VERSION in .sglang-releases/VERSION/
#                                                           (ci/sglang_release_env.py: the wheel --no-deps, its own
#                                                           pins where the base's break its imports, documented import
#                                                           shims); check it with
#                                                           PYTHONPATH=.sglang-releases/VERSION VENV/bin/pdverify check --target sglang
#
# The base carries torch 2.14.1 (about 6 GB) and serves every release.
set -euo pipefail
cd "$(dirname "$0")/.."
RELEASE=""
if [ "${1:-}" = "--release" ]; then
  RELEASE=${2:?--release needs a version, e.g. --release 0.5.13}
  shift 2
fi
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
if [ -n "$RELEASE" ] && [ "$RELEASE" != "0.5.23" ]; then
  "$VENV/bin/python" ci/sglang_release_env.py "$RELEASE" --base "$VENV"
fi
