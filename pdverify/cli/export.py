"""Regression export: each failing property becomes a standalone pytest file that rebuilds the shrunk
counterexample with plain constructors and replays the property body on the target, without Hypothesis."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from pdverify.cli.report import PropertyResult

HEADER = '''"""Regression exported by `pdverify check`: {id} ({title}) {status} on target {spec!r} ({device}).

It rebuilds the shrunk counterexample with plain constructors and replays the property without
Hypothesis: it fails while the fault is there and passes once it is fixed.
Original run: {reproduce}
"""

import pytest
import torch

from pdverify.model.batch import LogprobSettings, PrebuiltBatch, Request
from pdverify.model.layout import PagedRow
from pdverify.runner import load_properties
from pdverify.targets import load_target
from pdverify.strategies.layouts import PDPair

TARGET = {spec!r}
DEVICE = {device!r}


def test_{slug}_regression() -> None:
    if DEVICE == "cuda" and not torch.cuda.is_available():
        pytest.skip("recorded on CUDA; CUDA not available here")
    body = load_properties()[{id!r}].test.hypothesis.inner_test
    body(
        target=load_target(TARGET),
        device=DEVICE,
{args}
    )
'''

_NAMESPACE: dict[str, Any] = {}


def _namespace() -> dict[str, Any]:
    if not _NAMESPACE:
        from pdverify.model.batch import LogprobSettings, PrebuiltBatch, Request
        from pdverify.model.layout import PagedRow
        from pdverify.strategies.layouts import PDPair

        _NAMESPACE.update(
            torch=torch, LogprobSettings=LogprobSettings, PrebuiltBatch=PrebuiltBatch, Request=Request,
            PagedRow=PagedRow, PDPair=PDPair,
        )  # fmt: skip
    return _NAMESPACE


def _literal(value: Any) -> str:
    """``repr`` that round-trips through the exported file's imports; ``ValueError`` when it does not."""
    text = repr(value)
    try:
        back = eval(text, dict(_namespace()))
    except Exception as exc:
        raise ValueError(f"cannot rebuild {type(value).__name__} from its repr: {exc}") from None
    if back != value:
        raise ValueError(f"{type(value).__name__} does not round-trip through its repr")
    return text


NOT_EXPORTABLE = "__not_exportable__"


def counterexample_literals(kwargs: dict[str, Any] | None) -> dict[str, str] | None:
    """The drawn arguments of a counterexample as Python source that rebuilds them (``target`` and
    ``device`` left out), or ``{NOT_EXPORTABLE: why}``. Plain strings, so that a pytest-xdist worker can send
    them to the controller with its report."""
    if not kwargs:
        return None
    try:
        return {k: _literal(v) for k, v in kwargs.items() if k not in ("target", "device")}
    except ValueError as exc:
        return {NOT_EXPORTABLE: str(exc)}


def export_regressions(directory: Path, spec: str, results: list[PropertyResult]) -> list[Path]:
    """Write one file per failure that captured its counterexample; return the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for r in results:
        if not r.kwargs:
            continue
        if NOT_EXPORTABLE in r.kwargs:
            (directory / f"SKIPPED_{r.id}.txt").write_text(f"{r.id}: not exported: {r.kwargs[NOT_EXPORTABLE]}\n")
            continue
        args = "\n".join(f"        {k}={v}," for k, v in r.kwargs.items())
        slug = re.sub(r"[^0-9a-zA-Z]+", "_", f"{r.id}_{spec}_{r.device}").strip("_").lower()
        path = directory / f"test_regression_{slug}.py"
        path.write_text(
            HEADER.format(
                id=r.id,
                title=r.title,
                status=r.status,
                spec=spec,
                device=r.device,
                reproduce=r.reproduce,
                slug=slug,
                args=args,
            )
        )
        written.append(path)
    return written
