"""Make one released SGLang importable for a CPU check, without a multi-GB environment per release.

One base environment (``.venv-sglang``: torch, numpy and SGLang 0.5.23's CPU import closure, built by
``ci/build-sglang-env.sh``) serves every release. Each release lives in its own directory
``.sglang-releases/<VERSION>/``, put in front of the base on ``PYTHONPATH``:

* the release's wheel, installed ``--no-deps``;
* its own pins where the base's newer ones break its imports: the ``transformers`` it pins (an older SGLang
  registers model configs that a newer ``transformers`` already ships, and fails at import), with the exact
  ``huggingface_hub`` / ``tokenizers`` / ... that pin resolves to, installed only where they differ from the
  base's;
* ``RELEASE_EXTRAS``: modules an older release imports that the 0.5.23 closure lacks;
* the shims in ``ci/sglang-shims/`` (see ``SHIMS``): each replaces an API a newer library removed and is
  documented there; none of them is on the path of a function under test.

The directory gets ``release.json``: ``{"release", "importable", "reason", "pins", "extras", "shims"}``. A release
that cannot be made importable keeps its directory and the reason, so the matrix lists it (never skips it).

Usage: ``python ci/sglang_release_env.py VERSION [--base .venv-sglang] [--root .sglang-releases]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHIM_DIR = HERE / "sglang-shims"

PINNED_FROM_RELEASE = ("transformers",)
"""Packages whose release pin is installed in the release directory (with what that pin resolves to)."""

PINNED_ALONE = ("xgrammar",)
"""Packages installed ``--no-deps`` at the release's pin when the base lacks them (0.5.16 to 0.5.20 import
``xgrammar`` at module level; its own requirements, torch among them, are the base's)."""

COMMON_EXTRAS = ["fastapi==0.165.0", "opentelemetry-api==1.45.2", "httpx==0.28.1", "httpcore==1.0.9"]
"""Modules every older release imports at module level that the 0.5.23 closure lacks (``--no-deps``)."""

RELEASE_EXTRAS: dict[str, list[str]] = {}
"""Release prefix -> further requirements (``--no-deps``) of those releases."""

SHIMS: dict[str, list[str]] = {
    "": ["sgl_kernel"],
    "0.4": ["sitecustomize.py", "vllm"],
    **{f"0.5.1{post}": ["sitecustomize.py"] for post in ("", ".post1", ".post2", ".post3")},
    "0.4.4.post4": ["decord"],
    "0.4.5": ["decord"],
    "0.4.5.post1": ["decord"],
}
"""Release prefix (``""``: every release) -> shims from ``ci/sglang-shims/`` copied into the release directory."""

IMPORTS = """
import sglang
import sglang.srt.disaggregation.utils
import sglang.srt.disaggregation.prefill
import sglang.srt.disaggregation.decode
try:
    import sglang.srt.disaggregation.decode_schedule_batch_mixin
except ModuleNotFoundError as exc:  # releases before the mixin (0.4.6.post5) have none
    if "decode_schedule_batch_mixin" not in str(exc):
        raise
print("IMPORT-OK", sglang.__version__)
"""


def pip(base: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(base / "bin" / "python"), "-m", "pip", *args], capture_output=True, text=True, check=False
    )


def _matches(release: str, prefix: str) -> bool:
    """``prefix`` names a release (``0.4.5``) or a series (``0.4``, every 0.4.x); ``""`` every release."""
    return not prefix or release == prefix or (prefix.count(".") == 1 and release.startswith(prefix + "."))


def release_pins(wheel: Path) -> dict[str, str]:
    """``name -> version`` of the ``==`` pins in the wheel's metadata (unconditional requirements only)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    pins = {}
    for line in text.splitlines():
        m = re.match(r"Requires-Dist: ([A-Za-z0-9_.-]+)\s*\(?==\s*([^;)\s]+)\)?\s*(;.*)?$", line)
        if m and not (m.group(3) and "extra ==" in m.group(3)):
            pins[m.group(1).lower()] = m.group(2)
    return pins


def base_versions(base: Path) -> dict[str, str]:
    out = pip(base, "list", "--format=json").stdout
    return {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(out or "[]")}


def resolve(base: Path, requirement: str) -> dict[str, str]:
    """What ``requirement`` resolves to on its own (``pip install --dry-run --report``)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "r.json"
        res = pip(base, "install", "-q", "--dry-run", "--ignore-installed", "--report", str(report), requirement)
        if res.returncode:
            raise RuntimeError(f"cannot resolve {requirement}: {res.stderr.strip().splitlines()[-1:]}")
        items = json.loads(report.read_text())["install"]
    return {i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"] for i in items}


def build(release: str, base: Path, root: Path, wheel_dir: Path | None) -> dict[str, object]:
    target = root / release
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    record: dict[str, object] = {"release": release, "importable": False, "reason": "", "pins": {}, "extras": []}
    with tempfile.TemporaryDirectory() as tmp:
        src = ["--no-index", "--find-links", str(wheel_dir)] if wheel_dir else []
        got = pip(base, "download", "-q", "--no-deps", *src, f"sglang=={release}", "-d", tmp)
        wheels = list(Path(tmp).glob("sglang-*.whl"))
        if got.returncode or not wheels:
            record["reason"] = f"no wheel for sglang=={release}: {got.stderr.strip().splitlines()[-1:]}"
            return record
        done = pip(base, "install", "-q", "--no-deps", "--no-compile", "--target", str(target), str(wheels[0]))
        if done.returncode:
            record["reason"] = f"wheel does not install: {done.stderr.strip().splitlines()[-1:]}"
            return record
        pins = release_pins(wheels[0])
    have = base_versions(base)
    overrides: dict[str, str] = {}
    for name in PINNED_FROM_RELEASE:
        if name in pins and have.get(name) != pins[name]:
            try:
                closure = resolve(base, f"{name}=={pins[name]}")
            except RuntimeError as exc:
                record["reason"] = str(exc)
                return record
            overrides.update({n: v for n, v in closure.items() if have.get(n) != v})
    for name in PINNED_ALONE:
        if name in pins and name not in have:
            overrides[name] = pins[name]
    extras = COMMON_EXTRAS + [
        req for prefix, reqs in RELEASE_EXTRAS.items() if _matches(release, prefix) for req in reqs
    ]
    # an extra's own pin wins over the same package in a pin's closure: the closure resolves to the registry's
    # newest (httpx 0.29.0 came in under transformers 5.12.1 beside the extras' httpx 0.28.1, and pip refused both)
    pinned_extras = {re.split(r"[=<>!~]", req, maxsplit=1)[0].lower().replace("_", "-") for req in extras}
    overrides = {n: v for n, v in overrides.items() if n not in pinned_extras}
    wanted = [f"{n}=={v}" for n, v in sorted(overrides.items())] + extras
    if wanted:
        done = pip(base, "install", "-q", "--no-deps", "--no-compile", "--target", str(target), *wanted)
        if done.returncode:
            record["reason"] = f"pins do not install: {done.stderr.strip().splitlines()[-1:]}"
            return record
    shims = [s for prefix, files in SHIMS.items() if _matches(release, prefix) for s in files]
    for shim in shims:
        if (SHIM_DIR / shim).is_dir():
            shutil.copytree(SHIM_DIR / shim, target / shim)
        else:
            shutil.copy(SHIM_DIR / shim, target / shim)
    record.update(pins=overrides, extras=extras, shims=shims)
    env = {**os.environ, "PYTHONPATH": str(target)}
    res = subprocess.run(
        [str(base / "bin" / "python"), "-c", IMPORTS], capture_output=True, text=True, env=env, timeout=600
    )
    if res.returncode == 0 and f"IMPORT-OK {release}" in res.stdout:
        record["importable"] = True
    elif res.returncode == 0:
        record["reason"] = f"the release directory does not shadow the base's sglang: {res.stdout.strip()}"
    else:
        lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
        record["reason"] = f"import fails: {lines[-1] if lines else res.returncode}"
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("release")
    ap.add_argument("--base", type=Path, default=Path(".venv-sglang"))
    ap.add_argument("--root", type=Path, default=Path(".sglang-releases"))
    ap.add_argument("--wheels", type=Path, default=None, help="a folder of sglang wheels to use offline")
    args = ap.parse_args(argv)
    record = build(args.release, args.base.resolve(), args.root.resolve(), args.wheels)
    (args.root / args.release).mkdir(parents=True, exist_ok=True)
    (args.root / args.release / "release.json").write_text(json.dumps(record, indent=2) + "\n")
    state = "importable" if record["importable"] else f"NOT importable: {record['reason']}"
    print(f"sglang {args.release}: {state}")
    return 0 if record["importable"] else 4


if __name__ == "__main__":
    sys.exit(main())
