"""``pdverify bench``: the variants side by side in one run — bytes each way, copies, device launches and
median wall time, with ratios against ``sglang`` (when installed) or ``pdverify`` and ``legacy``.

On CUDA times are device times from CUDA events; on CPU they are host wall times, and the output says so.
Transfer counts come from ``TransferLedger`` (one measured call per cell, outside the timed repeats).
"""

from __future__ import annotations

import functools
import json
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from pdverify.ledger import TransferLedger
from pdverify.model.batch import PrebuiltBatch, Request
from pdverify.targets import Target, TargetError, load_target
from pdverify.targets.layouts import build_batch_object

SEND_TOKENS = (1_024, 16_384, 131_072, 1_048_576)
PAGE_SIZES = (1, 16, 64)
BATCHES = ((1, 1_024), (64, 1_024), (64, 32_768), (512, 32_768))
QUICK_SEND_TOKENS = (1_024, 131_072)
QUICK_BATCHES = ((1, 1_024), (512, 32_768))


@dataclass(frozen=True)
class Cell:
    bench: str
    size: str
    variant: str
    d2h_bytes: int
    h2d_bytes: int
    copies: int
    launches: int
    median_s: float
    repeats: int


def _time(fn: Callable[[], Any], device: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        if device == "cuda":  # pragma: no cover - cuda-only
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            stop = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            fn()
            stop.record()
            torch.cuda.synchronize()
            times.append(float(start.elapsed_time(stop)) / 1000)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return float(statistics.median(times))


def bench_send(targets: list[Target], device: str, tokens: tuple[int, ...], repeats: int) -> list[Cell]:
    """Decode's wire page list of one send: int64 token indices (translated) -> int32 pages on the host."""
    cells = []
    for n in tokens:
        for ps in PAGE_SIZES:
            pages = torch.randperm(max(1, -(-n // ps)) + 8, device=device)[: -(-n // ps)] + 1
            row = (pages.repeat_interleave(ps)[:n] * ps + torch.arange(n, device=device) % ps).to(torch.int64)
            table = row.reshape(1, n)
            for t in targets:
                fn = t.decode_page_indices
                if fn is None:
                    continue
                with TransferLedger(device) as led:
                    fn(table, 0, 0, n, ps)
                secs = _time(functools.partial(fn, table, 0, 0, n, ps), device, repeats)
                cells.append(Cell("send", f"{n} tokens, ps {ps}", t.name, led.d2h_bytes, led.h2d_bytes,
                                  len(led.copies), len(led.launches), secs, repeats))  # fmt: skip
    return cells


def bench_prebuilt(targets: list[Target], device: str, sizes: tuple[tuple[int, int], ...], repeats: int) -> list[Cell]:
    """``prepare_for_prebuilt`` on a batch of fresh requests (prefix 0, extend = context): the target call alone
    is measured and timed; building the batch objects is not."""
    cells = []
    for requests, context in sizes:
        reqs = [Request(i, 0, context, [0] * context, [], already_computed=0) for i in range(requests)]
        batch = PrebuiltBatch(reqs, [])
        table = (torch.arange(requests * context, dtype=torch.int32, device=device) + 64).reshape(requests, context)
        for t in targets:
            fn = t.prepare_for_prebuilt
            if fn is None:
                continue
            duck, _ = build_batch_object(t, batch, device, table=table)
            with ExitStack() as stack:
                if t.sampling_info_path is not None:
                    stack.enter_context(mock.patch(t.sampling_info_path, return_value=None))
                with TransferLedger(device) as led:
                    fn(duck)
                reps = 1 if t.name == "legacy" and requests * context > 1_000_000 else repeats
                secs = _time(functools.partial(fn, duck), device, reps)
            cells.append(Cell("prepare_for_prebuilt", f"{requests} x {context}", t.name, led.d2h_bytes,
                              led.h2d_bytes, len(led.copies), len(led.launches), secs, reps))  # fmt: skip
    return cells


def _ratios(cells: list[Cell], reference: str) -> list[str]:
    lines = []
    groups: dict[tuple[str, str], dict[str, Cell]] = {}
    for c in cells:
        groups.setdefault((c.bench, c.size), {})[c.variant] = c
    header = f"{'bench':<22}{'size':<24}{'variant':<10}{'D2H B':>12}{'H2D B':>12}{'copies':>8}{'launches':>9}"
    header += f"{'median':>12}{'bytes vs ' + reference:>16}{'time vs ' + reference:>16}"
    lines.append(header)
    for (bench, size), by in groups.items():
        ref = by.get(reference)
        for v, c in by.items():
            moved = c.d2h_bytes + c.h2d_bytes
            ref_moved = (ref.d2h_bytes + ref.h2d_bytes) if ref else 0
            rb = f"{moved / ref_moved:.3f}" if ref and ref_moved else "-"
            rt = f"{c.median_s / ref.median_s:.2f}" if ref and ref.median_s else "-"
            lines.append(f"{bench:<22}{size:<24}{v:<10}{c.d2h_bytes:>12}{c.h2d_bytes:>12}{c.copies:>8}"
                         f"{c.launches:>9}{c.median_s * 1e3:>10.3f}ms{rb:>16}{rt:>16}")  # fmt: skip
    return lines


def run_bench(
    *,
    names: list[str],
    device: str,
    quick: bool,
    repeats: int,
    json_path: Path | None,
    echo: Any = print,
    strict: bool = False,
) -> int:
    """Measure ``names`` side by side. ``strict`` (targets named on the command line): a target that cannot be
    loaded is an error (exit 3); otherwise (the default list) it is skipped with the reason."""
    targets = []
    for name in names:
        try:
            targets.append(load_target(name))
        except TargetError as exc:
            if strict:
                echo(f"bench: error: --targets: {name}: {exc}")
                return 3
            echo(f"bench: skipping {name}: {exc}")
    if not targets:
        echo("bench: no target could be loaded: nothing measured")
        return 1
    reference = "sglang" if any(t.name == "sglang" for t in targets) else "pdverify"
    clock = "device time (CUDA events)" if device == "cuda" else "HOST wall time (CPU run: no device timing)"
    echo(f"pdverify bench on {device}: times are {clock}; ratios against {reference!r}")
    t0 = time.perf_counter()
    cells = bench_send(targets, device, QUICK_SEND_TOKENS if quick else SEND_TOKENS, repeats)
    cells += bench_prebuilt(targets, device, QUICK_BATCHES if quick else BATCHES, repeats)
    for line in _ratios(cells, reference):
        echo(line)
    if "legacy" in names:
        echo("")
        for line in _ratios(cells, "fast" if any(t.name == "fast" for t in targets) else reference):
            echo(line)
    echo(f"\nbench wall time {time.perf_counter() - t0:.1f}s")
    if json_path is not None:
        json_path.write_text(json.dumps({"device": device, "clock": clock, "reference": reference,
                                         "cells": [asdict(c) for c in cells]}, indent=2) + "\n")  # fmt: skip
    return 0
