"""The transfer ledger: exact counts, every interception removed on exit, clear errors on misuse."""

from __future__ import annotations

from contextlib import ExitStack
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from pdverify.ledger import LedgerError, TransferLedger, measure
from pdverify.ledger.ledger import _profile_span
from pdverify.legacy import page_index as legacy
from pdverify.production import page_index as prod
from pdverify.production.prebuilt import async_h2d


def _no_modes() -> bool:
    return not _get_current_function_mode_stack() and not _get_current_dispatch_mode_stack()  # type: ignore[no-untyped-call]


def test_counts_each_way() -> None:
    kv = torch.arange(64, dtype=torch.int32)
    with TransferLedger("cpu") as led:
        prod.kv_to_page_indices(kv, 16)
        kv[:3].tolist()
        kv[0].item()
        torch.tensor([1, 2, 3], dtype=torch.int64, device="cpu")
        torch.as_tensor(np.arange(5))
        async_h2d([4, 5], dtype=torch.int32, device="cpu")
    assert [(c.direction, c.elements, c.via) for c in led.copies] == [
        ("D2H", 4, ".numpy()"),
        ("D2H", 3, ".tolist()"),
        ("D2H", 1, ".item()"),
        ("H2D", 3, "torch.tensor()"),
        ("H2D", 5, "torch.as_tensor()"),
        ("H2D", 2, "torch.tensor()"),
    ]
    assert (led.d2h_elements, led.d2h_bytes, led.h2d_elements, led.h2d_bytes) == (8, 32, 10, 72)
    assert (led.d2h_copies, led.h2d_copies) == (3, 3)
    assert "floor_divide" in " ".join(launch.op for launch in led.launches)
    assert _no_modes()


def test_legacy_copies_every_token() -> None:
    kv = torch.arange(1000, dtype=torch.int64)
    _, new = measure("cpu", prod.kv_to_page_indices, kv, 64)
    _, old = measure("cpu", legacy.kv_to_page_indices, kv, 64)
    assert (new.d2h_bytes, old.d2h_bytes) == (16 * 8, 1000 * 8)


def test_views_and_allocations_are_not_launches() -> None:
    x = torch.arange(8)
    with TransferLedger("cpu") as led:
        x[::2]
        x.view(2, 4)
        torch.empty(3)
    assert led.launches == []


def test_nested_ledger_refused_and_outer_still_removed() -> None:
    with pytest.raises(LedgerError, match="do not nest"), TransferLedger("cpu"), TransferLedger("cpu"):
        pass
    assert _no_modes()
    with TransferLedger("cpu"):  # usable again afterwards
        pass


def test_exception_inside_measured_call_removes_interception() -> None:
    def boom() -> None:
        torch.arange(3).tolist()
        raise KeyError("inside")

    with pytest.raises(KeyError, match="inside"):
        measure("cpu", boom)
    assert _no_modes()


@pytest.mark.parametrize(("device", "message"), [("tpu", "unknown device"), ("meta", "cpu or cuda")])
def test_unknown_device(device: str, message: str) -> None:
    with pytest.raises(LedgerError, match=message):
        TransferLedger(device)


def test_profile_without_cuda() -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA present: the profile path is exercised by ci/gpu.sh")
    with pytest.raises(LedgerError, match="needs device 'cuda'"):
        TransferLedger("cuda", profile=True)
    with pytest.raises(LedgerError, match="needs device 'cuda'"):
        TransferLedger("cpu", profile=True)


def test_describe_names_the_numbers() -> None:
    _, led = measure("cpu", legacy.kv_to_page_indices, torch.arange(10, dtype=torch.int32), 4)
    assert "D2H 1 copies / 10 elements / 40 B" in led.describe()


def test_profile_span_reads_the_events_after_the_profiler_stops() -> None:
    """The cross-check's profiler is read once it has stopped: read inside the span, its event list is empty
    (the first H200 run compared every ledger with zero profiled memcpys). Shown on CPU with the CPU activity."""
    seen: list[list[str]] = []
    order: list[str] = []
    with ExitStack() as stack:
        _profile_span(
            stack,
            torch.profiler.ProfilerActivity.CPU,
            lambda events: seen.append([e.name for e in events]),
            lambda: order.append("synchronize"),
        )
        torch.ones(3) + 1  # an operation for the profiler to record
        assert not seen
    assert order == ["synchronize"]
    assert len(seen) == 1 and "aten::add" in seen[0]


def test_profile_counts_memcpys_and_refuses_an_empty_trace() -> None:
    led = TransferLedger("cpu")
    with led:
        prod.kv_to_page_indices(torch.arange(64, dtype=torch.int64), 16)
    led._read_profile([SimpleNamespace(name=n) for n in ("Memcpy DtoH (Device -> Pageable)", "aten::slice")])
    assert led.profiled == {"D2H": 1, "H2D": 0} and led.profiled_events == 2
    assert led.cross_check() is None
    led._read_profile([SimpleNamespace(name="Memcpy HtoD (Pageable -> Device)")])
    assert led.cross_check() == "ledger {'D2H': 1, 'H2D': 0} != CUDA profiler {'D2H': 0, 'H2D': 1}"
    led._read_profile([])
    assert led.cross_check() == (
        f"the CUDA profiler recorded no events while the ledger saw {len(led.launches)} launches"
    )
    assert led.launches


def test_aside_keeps_a_callees_copies_apart_and_listed() -> None:
    with TransferLedger("cpu") as led:
        torch.tensor([1, 2], device="cpu")
        with led.aside("sampling_info") as side:
            torch.tensor([3.0, 4.0, 5.0], device="cpu")
            torch.ones(2) + 1
        with led.aside("sampling_info"):
            torch.tensor([6], device="cpu")
        torch.arange(4).tolist()
    assert side is led.asides["sampling_info"]
    assert [(c.direction, c.elements) for c in led.copies] == [("H2D", 2), ("D2H", 4)]
    assert [(c.direction, c.elements) for c in side.copies] == [("H2D", 3), ("H2D", 1)]
    assert side.launches and not any("add" in launch.op for launch in led.launches)
    assert "; set aside, sampling_info: [D2H 0 copies / 0 elements / 0 B []; H2D 2 copies / 4 elements" in (
        led.describe()
    )
    led._read_profile([SimpleNamespace(name="Memcpy HtoD (Pageable -> Device)")] * 3)
    assert led.cross_check() == "ledger {'D2H': 1, 'H2D': 3} != CUDA profiler {'D2H': 0, 'H2D': 3}"


def test_asides_do_not_nest() -> None:
    led = TransferLedger("cpu")
    with led.aside("a"), pytest.raises(LedgerError, match=r"aside\('b'\) inside aside block"), led.aside("b"):
        pass  # pragma: no cover - not reached
    with led.aside("b"):  # the refused block left no open aside behind
        pass
    assert set(led.asides) == {"a", "b"}
