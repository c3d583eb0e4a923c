#!/usr/bin/env bash
# mypy over pdverify's SGLang adapters, against SGLang's own inline annotations, in the conformance environment.
#
#   bash ci/mypy-sglang.sh [VENV]        VENV: the conformance environment (default .venv-sglang)
#
# SGLang ships no py.typed marker, so mypy would treat every `sglang` import as untyped (Any) and check nothing
# of it. This copies the installed package beside a py.typed marker into a temporary MYPYPATH, so the adapters'
# calls into SGLang (constructors, functions under test, their return values) are checked against the
# annotations SGLang wrote; SGLang's own modules are analysed silently (their own errors are upstream's, not the
# adapters'). A probe confirms mypy resolved SGLang's types (a run that saw only Any fails here, never passes).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv-sglang}
"$VENV/bin/python" -m pip install -q -c ci/constraints.txt mypy 2>&1 | { grep -v "^WARNING: Location" || true; }
SITE=$("$VENV/bin/python" -c "import os, sglang; print(os.path.dirname(sglang.__file__))")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cp -r "$SITE" "$TMP/sglang"
touch "$TMP/sglang/py.typed"
cat > "$TMP/probe_sglang_types.py" <<'PY'
from sglang.srt.disaggregation.utils import ReqToMetadataIdxAllocator
from sglang.srt.mem_cache.common import kv_to_page_indices

reveal_type(ReqToMetadataIdxAllocator.alloc)
reveal_type(kv_to_page_indices)
PY
MYPY=("$VENV/bin/python" -m mypy --config-file ci/mypy-sglang.ini)
probe=$(MYPYPATH="$TMP" "${MYPY[@]}" "$TMP/probe_sglang_types.py" 2>&1 || true)
if ! grep -qF 'ReqToMetadataIdxAllocator) -> int | None' <<<"$probe" \
   || ! grep -qF 'def (kv_indices: torch._tensor.Tensor, page_size: int)' <<<"$probe"; then
  echo "mypy did not resolve SGLang's annotations (the adapters would be checked against Any):" >&2
  echo "$probe" >&2
  exit 1
fi
echo "mypy resolves SGLang $("$VENV/bin/python" -c 'import sglang; print(sglang.__version__)')'s annotations:"
grep "Revealed type" <<<"$probe" | sed 's/^.*Revealed type is /  /'
MYPYPATH="$TMP" "${MYPY[@]}" pdverify/targets
