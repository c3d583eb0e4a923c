"""Cross-check the ledger against the CUDA profiler: ``python -m pdverify.ledger.crosscheck`` (GPU job).

Runs each production and legacy path once on CUDA under ``TransferLedger(profile=True)`` and prints, per
path, the ledger's copy counts, the profiler's memcpy counts and whether they agree. Exit 0 when all agree,
1 when one differs, 3 when CUDA is absent.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import torch

from pdverify.ledger.ledger import TransferLedger


def main() -> int:
    if not torch.cuda.is_available():
        print("ledger cross-check needs CUDA: torch.cuda.is_available() is False")
        return 3
    return _run()  # pragma: no cover - cuda-only


def _run() -> int:  # pragma: no cover - cuda-only
    from pdverify.model.batch import PrebuiltBatch, Request
    from pdverify.targets import load_target
    from pdverify.targets.layouts import run_prepare_for_prebuilt

    kv = (torch.arange(4096, device="cuda") + 64).to(torch.int64)
    table = kv.to(torch.int32).reshape(1, -1)
    batch = PrebuiltBatch([Request(0, 0, 4096, [0] * 4096)], [list(range(64, 64 + 4096))])
    bad = 0
    for name in ("pdverify", "legacy", "fast"):
        target = load_target(name)
        checks: dict[str, Callable[[], Any]] = {
            "kv_to_page_indices": functools.partial(target.require("kv_to_page_indices"), kv, 16),
            "decode_page_indices": functools.partial(target.require("decode_page_indices"), table, 0, 0, 4096, 16),
        }
        for label, call in checks.items():
            with TransferLedger("cuda", profile=True) as led:
                call()
            verdict = led.cross_check()
            bad += verdict is not None
            profiled = f"profiler {led.profiled} of {led.profiled_events} events"
            print(f"{name:<9}{label:<22}{led.describe()} | {profiled} | {verdict or 'agree'}")
        out = run_prepare_for_prebuilt(target, batch, "cuda", measure=True)
        print(f"{name:<9}{'prepare_for_prebuilt':<22}{out.ledger.describe()}")
    return 1 if bad else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
