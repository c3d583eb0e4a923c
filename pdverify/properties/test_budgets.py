"""Transfer budgets (B1-B3): what the two upstream changes removed must stay removed.

Measured with ``pdverify.ledger.TransferLedger`` around the target call; a failure message carries the
measured copies, elements and bytes.
"""

from __future__ import annotations

import torch
from hypothesis import example
from hypothesis import strategies as st

from pdverify.ledger import measure
from pdverify.model.batch import PrebuiltBatch, Request
from pdverify.model.layout import PagedRow, build_req_to_token
from pdverify.production.transfer import PrefillSendState
from pdverify.properties.pinned_batches import SAMPLING_BATCHES
from pdverify.properties.registry import FROM_31173, FROM_35070, examples, note_event, prop
from pdverify.strategies import batches, index_dtypes, page_sizes, paged_rows, token_index_lists
from pdverify.targets import Target
from pdverify.targets.layouts import run_prepare_for_prebuilt

PER_REQUEST_H2D = 8
"""Metadata elements a request may send host-to-device in ``prepare_for_prebuilt`` (pool index, sequence
length in three dtypes, their host mirrors on a CPU run), whatever its prompt and extend lengths."""

SAMPLING_H2D_PER_REQUEST = 10
"""Elements a request may send host-to-device in the ``SamplingBatchInfo.from_schedule_batch`` that
``prepare_for_prebuilt`` calls (temperature, top-p, top-k, min-p, seed, the three penalties, ``min_new_tokens``
and a custom logit processor's row: one each), plus three per logit-bias entry (its row, column and value) and,
where a request holds its stop tokens back (``min_new_tokens``), one per slot of the padded stop-token list (every
request times the most stop tokens one has: its own, the model configuration's end of sequence and the
tokenizer's, and the tokenizer's additional stop tokens). Kept apart from the budget
above (the ledger's ``sampling_info`` aside) and bounded on its own: what it copies grows with the batch and the
client's parameters, never with the prompt."""


def stop_slots(batch: PrebuiltBatch) -> int:
    """Slots of the padded stop-token list the ``min_new_tokens`` penalizer builds (none when no request asks for
    ``min_new_tokens``): every request times the most distinct stop tokens one has."""
    if not any(r.sampling.min_new_tokens > 0 for r in batch.reqs):
        return 0
    eos = set(batch.model_eos_token_ids) | set(batch.additional_stop_token_ids)
    eos |= set() if batch.eos_token_id is None else {batch.eos_token_id}
    return len(batch.reqs) * max(len(set(r.sampling.stop_token_ids or []) | eos) for r in batch.reqs)


@example(values=list(range(64)), ps=16, dtype=torch.int32)
@prop(
    "B1",
    "kv_to_page_indices copies exactly ceil(n / page_size) elements device-to-host, in one copy",
    contract=FROM_31173,
    needs=("kv_to_page_indices",),
    values=token_index_lists(),
    ps=page_sizes(),
    dtype=index_dtypes(),
)
def test_b1_page_indices_d2h(target: Target, device: str, values: list[int], ps: int, dtype: torch.dtype) -> None:
    kv = torch.tensor(values, dtype=dtype, device=device)
    _, led = measure(device, target.require("kv_to_page_indices"), kv, ps)
    pages = -(-len(values) // ps)
    note_event("pages < tokens" if pages < len(values) else "pages == tokens")
    assert led.d2h_copies == 1 and led.d2h_elements == pages, (
        f"{len(values)} tokens at page_size {ps}: expected one D2H copy of {pages} elements, measured {led.describe()}"
    )
    assert led.h2d_copies == 0, f"unexpected host-to-device traffic: {led.describe()}"


@example(row=PagedRow((5, 2, 9, 4), 16, 4, 0), split=6)
@prop(
    "B2",
    "the prefill chunk and decode page paths copy no token-level slice to the host (pages, plus one guard word)",
    contract=FROM_31173,
    needs=("send_kv_chunk", "decode_page_indices"),
    row=paged_rows(max_length=512),
    split=st.integers(0, 512),
)
def test_b2_pd_paths_d2h(target: Target, device: str, row: PagedRow, split: int) -> None:
    ps, d, n = row.page_size, row.prefix_len, row.length
    table = build_req_to_token([row.locations], n + ps, device=device)
    state = PrefillSendState(0, n, d, -(-(n - d) // ps), d)
    for end, last in ((min(split, n), False), (n, True)):
        start = state.start_send_idx
        result, led = measure(
            device, target.require("send_kv_chunk"), table, state, extend_end=end, last_chunk=last, page_size=ps
        )
        chunk, state = result
        pages = 0 if chunk is None else len(chunk.pages)
        assert led.d2h_elements <= pages + 1, (
            f"send_kv_chunk [{start}, {state.start_send_idx}) at page_size {ps} sends {pages} pages but copied "
            f"{led.describe()}"
        )
    result_d, led = measure(device, target.require("decode_page_indices"), table, 0, d, n, ps)
    assert led.d2h_elements <= len(result_d) + 1, (
        f"decode_page_indices of [{d}, {n}) at page_size {ps}: {len(result_d)} pages but copied {led.describe()}"
    )


LONG_PROMPTS = PrebuiltBatch(
    [Request(0, 0, 300, list(range(300))), Request(1, 16, 184, list(range(200)))],
    [list(range(1000, 1300)), list(range(2000, 2300))],
)


@examples("batch", [LONG_PROMPTS, *SAMPLING_BATCHES])
@prop(
    "B3",
    "prepare_for_prebuilt copies only O(batch) metadata host-to-device, nothing that grows with the prompt "
    "(the sampling info it builds on a budget of its own)",
    contract=FROM_35070,
    needs=("prepare_for_prebuilt",),
    batch=batches(max_prompt=256),
)
def test_b3_prebuilt_h2d(target: Target, device: str, batch: PrebuiltBatch) -> None:
    led = run_prepare_for_prebuilt(target, batch, device, measure=True).ledger
    assert led is not None
    n = max(1, len(batch.reqs))
    budget = PER_REQUEST_H2D * n
    tokens = sum(r.extend_len for r in batch.reqs)
    note_event("extend tokens > budget" if tokens > budget else "extend tokens <= budget")
    assert led.h2d_elements <= budget and all(c.elements <= 4 * n for c in led.copies), (
        f"{len(batch.reqs)} request(s), {tokens} extend tokens: H2D budget {budget} elements "
        f"(O(batch)), measured {led.describe()}"
    )
    sampling = led.asides.get("sampling_info")
    if sampling is not None:
        bias = sum(len(r.sampling.logit_bias or {}) for r in batch.reqs)
        stops = stop_slots(batch)
        most = SAMPLING_H2D_PER_REQUEST * n + 3 * bias + stops
        assert sampling.h2d_elements <= most and all(c.elements <= max(n, bias, stops) for c in sampling.copies), (
            f"{len(batch.reqs)} request(s), {tokens} extend tokens, {bias} logit-bias entries, {stops} stop-token "
            f"slots: the sampling info's H2D budget is {most} elements, a copy at most one per request, per bias "
            f"entry or per stop-token slot, measured {sampling.describe()}"
        )
