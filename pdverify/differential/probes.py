"""One probe per unit: the inputs it is given (pdverify's own strategies, as the properties draw them) and how it is
called, with its result read back as the properties read it (``normalize``).

A probe never asserts anything: it records. What a release does with an input is compared with what the next
release does with the same input (``pdverify.differential.compare``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st

from pdverify.differential.normalize import normalize, raised
from pdverify.model.layout import PagedRow, build_req_to_token
from pdverify.targets import ServerRefuses, Target


@dataclass(frozen=True)
class Probe:
    unit: str
    """The unit (``pdverify.targets.protocol.FUNCTIONS``) the probe calls; a target without it is not probed."""
    inputs: Callable[[], st.SearchStrategy[dict[str, Any]]]
    """The inputs, drawn under the input domain bound when the corpus is made (``bind_release``)."""
    call: Callable[[Target, dict[str, Any], str], Any]
    """The unit called on one input on a device; its result (normalised afterwards)."""
    needs: tuple[str, ...] = ()
    """Further units the call goes through (all must be supplied)."""


def _table(row: PagedRow, extra_rows: int, device: str) -> torch.Tensor:
    rows = [[1] * row.length] * extra_rows + [row.locations]
    return build_req_to_token(rows, row.length + 3, device=device)


def _pages(target: Target, x: dict[str, Any], device: str) -> Any:
    return target.require("kv_to_page_indices")(torch.tensor(x["values"], dtype=x["dtype"], device=device), x["ps"])


def _suffix(target: Target, x: dict[str, Any], device: str) -> Any:
    row: PagedRow = x["row"]
    seq = max(row.prefix_len, min(x["seq"], row.length))
    return target.require("suffix_page_indices")(_table(row, x["extra_rows"], device), x["extra_rows"],
                                                 row.prefix_len, seq, row.page_size)  # fmt: skip


def _minimax(target: Target, x: dict[str, Any], device: str) -> Any:
    row: PagedRow = x["row"]
    kv = torch.tensor(row.locations, dtype=torch.int32, device=device)
    return target.require("minimax_index_transfer_pages")(
        kv, page_size=row.page_size, prefix_len=row.prefix_len + x["misalign"]
    )


def _translate(target: Target, x: dict[str, Any], device: str) -> Any:
    case = x["case"]
    loc = torch.tensor(case.loc if case.two_d else case.loc[0], dtype=getattr(torch, case.dtype), device=device)
    kw: dict[str, Any] = {"loc": loc, "v2p": torch.tensor(case.v2p, dtype=torch.int64, device=device),
                          "page_size": case.page_size}  # fmt: skip
    if case.dcp_size > 1:
        kw.update(dcp_size=case.dcp_size, dcp_rank=case.dcp_rank)
    out = None
    if case.out_mode == "out":
        out = torch.full(loc.shape, 7777, dtype=torch.int64, device=device)
        kw["out"] = out
    elif case.out_mode == "out_width":
        out = torch.full((case.out_width + case.out_spare,), 7777, dtype=torch.int64, device=device)
        kw.update(out=out, out_width=case.out_width)
    return {"result": target.require("translate_token_ids")(**kw), "out": out}


def _exchange(target: Target, x: dict[str, Any], device: str) -> Any:
    from pdverify.properties.test_transfer import run_exchange

    ex = run_exchange(target, x["pair"], device)
    return {"num_pages": ex.num_pages, "sends": ex.sends, "states": ex.states, "decode": ex.decode}


def _prebuilt(target: Target, x: dict[str, Any], device: str) -> Any:
    from pdverify.targets.layouts import run_prepare_for_prebuilt

    out = run_prepare_for_prebuilt(target, x["batch"], device)
    fields = {k: v for k, v in out.fields.items() if k != "sampling_info"}
    return {
        "fields": fields,
        "untouched": sorted(out.untouched),
        "reqs_after": out.reqs_after,
        "sampling_info_calls": len(out.sampling_info_calls),
        "sampling_info_is_returned": out.fields.get("sampling_info", None) is out.sampling_info_returned,
        "prompt_reads": len(out.prompt_reads),
        "table_unchanged": bool(torch.equal(out.req_to_token_before, out.req_to_token_after)),
    }


def _wire(target: Target, x: dict[str, Any], device: str) -> Any:
    pages = np.array(x["pages"], dtype=x.get("dtype", "int32"))  # what the older release's decode sends
    return target.require("wire_roundtrip")(pages, x["aux"], x["state"], x["prefix"])


def _wire_inputs() -> st.SearchStrategy[dict[str, Any]]:
    from pdverify import strategies as s
    from pdverify.properties.releases import DOMAIN

    return st.fixed_dictionaries({
        "pages": st.lists(st.integers(0, 2**31 - 1), max_size=64), "state": s.state_lists(),
        "aux": st.integers(0, 2**31 - 1), "prefix": st.integers(0, 4096) if DOMAIN.decode_prefix else st.just(0),
        "dtype": st.just(DOMAIN.wire_page_dtype),  # int64 lists before #7214
    })  # fmt: skip


def _case(unit: str) -> Callable[[Target, dict[str, Any], str], Any]:
    def call(target: Target, x: dict[str, Any], device: str) -> Any:
        return target.require(unit)(x["case"], device)

    return call


def _catalogue() -> dict[str, Probe]:
    from pdverify import strategies as s

    def fixed(**parts: st.SearchStrategy[Any]) -> Callable[[], st.SearchStrategy[dict[str, Any]]]:
        return lambda: st.fixed_dictionaries(parts)

    probes = [
        Probe("kv_to_page_indices", fixed(values=s.token_index_lists(), ps=s.page_sizes(), dtype=s.index_dtypes()),
              _pages),
        Probe("suffix_page_indices", fixed(row=s.paged_rows(), seq=st.integers(0, 1024), extra_rows=st.integers(0, 3)),
              _suffix),
        Probe("kv_to_page_num", fixed(n=st.integers(0, 1 << 20), ps=s.page_sizes()),
              lambda t, x, d: t.require("kv_to_page_num")(x["n"], x["ps"])),
        Probe("page_align_floor", fixed(n=st.integers(0, 1 << 20), ps=s.page_sizes()),
              lambda t, x, d: t.require("page_align_floor")(x["n"], x["ps"])),
        Probe("minimax_index_transfer_pages", fixed(row=s.paged_rows(), misalign=st.integers(0, 3)), _minimax),
        Probe("translate_token_ids", fixed(case=s.token_translations()), _translate),
        Probe("send_kv_chunk", fixed(pair=s.pd_pairs()), _exchange, ("kv_to_page_num", "decode_page_indices")),
        Probe("prepare_for_prebuilt", fixed(batch=s.batches()), _prebuilt),
        Probe("prefill_exchange", fixed(case=s.prefill_cases()), _case("prefill_exchange")),
        Probe("kv_sender", fixed(case=s.sender_cases()), _case("kv_sender")),
        Probe("bootstrap", fixed(case=s.bootstrap_cases()), _case("bootstrap")),
        Probe("decode_prealloc", fixed(case=s.decode_cases()), _case("decode_prealloc")),
        Probe("decode_queue", fixed(case=s.decode_queues()), _case("decode_queue")),
        Probe("wire_roundtrip", _wire_inputs, _wire),
        Probe("kv_checksum", fixed(case=s.checksum_cases()), _case("kv_checksum")),
    ]  # fmt: skip
    return {p.unit: p for p in probes}


PROBES: dict[str, Probe] = _catalogue()
"""Every probe, by unit."""


def run_probe(probe: Probe, target: Target, inputs: list[dict[str, Any]], device: str = "cpu") -> list[Any] | str:
    """``probe``'s unit on each input: the normalised result or exception of each, in order (``{"refused": why}``
    where the target's server refuses the input: ``ServerRefuses``); or why the target cannot be probed (a unit it
    does not supply, with the target's reason)."""
    missing = [u for u in (probe.unit, *probe.needs) if not target.supplies(u)]
    if missing:
        reasons = dict(target.unit_sources)
        return "; ".join(f"{u}: {reasons.get(u, 'not supplied')}" for u in missing)
    results: list[Any] = []
    for x in inputs:
        try:
            results.append({"returns": normalize(probe.call(target, x, device))})
        except ServerRefuses as exc:  # outside the release's domain: not a behaviour to compare
            results.append({"refused": str(exc)})
        except Exception as exc:  # a unit's exception is part of its behaviour
            results.append(raised(exc))
    return results
