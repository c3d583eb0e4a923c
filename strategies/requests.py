"""Strategies for transferred requests and PREBUILT batches.

Slot values are distinct across the whole request-to-token table (every row comes from one paged allocator
with a shuffled free list), so a slice taken at the wrong offset or from the wrong row cannot hide.
"""

from __future__ import annotations

from hypothesis import strategies as st

from pdverify.model.batch import LogprobSettings, PrebuiltBatch, Request
from pdverify.model.layout import token_locations
from strategies._validate import check_int
from strategies.fields import REGISTRY
from strategies.layouts import page_sizes


def requests(
    req_pool_idx: int,
    *,
    max_prompt: int = 64,
    max_output: int = 4,
    page_size: int = 1,
) -> st.SearchStrategy[Request]:
    """One request at row ``req_pool_idx``: a prompt of 0..``max_prompt`` tokens, 0..``max_output`` output
    tokens, a decode prefix anywhere in ``0..extend_end`` (page-aligned half of the time), extend length
    ``extend_end - prefix`` (0 included), where ``extend_end`` is the KV decode committed (one more during a
    PD rebootstrap); stained or not, ``already_computed`` above and below the prefix, logprob settings,
    multimodal inputs, the rebootstrap flag set, clear or absent, and every registered extra field."""
    check_int("req_pool_idx", req_pool_idx)
    check_int("max_prompt", max_prompt)
    check_int("max_output", max_output)
    check_int("page_size", page_size, minimum=1)
    return _requests(req_pool_idx=req_pool_idx, max_prompt=max_prompt, max_output=max_output, page_size=page_size)


@st.composite
def _requests(
    draw: st.DrawFn,
    req_pool_idx: int,
    *,
    max_prompt: int = 64,
    max_output: int = 4,
    page_size: int = 1,
) -> Request:
    prompt = draw(st.lists(st.integers(0, 50_000), max_size=max_prompt))
    output = draw(st.lists(st.integers(0, 50_000), max_size=max_output))
    seq_len = len(prompt) + max(0, len(output) - 1)
    rebootstrap = bool(output) and draw(st.booleans())
    extend_end = seq_len + (1 if rebootstrap else 0)
    if draw(st.booleans()):
        prefix = draw(st.integers(0, extend_end // page_size)) * page_size
    else:
        prefix = draw(st.integers(0, extend_end))
    cached = draw(st.integers(0, max(len(prompt), 0)))
    return Request(
        req_pool_idx=req_pool_idx,
        prefix_len=prefix,
        extend_len=extend_end - prefix,
        origin_input_ids=prompt,
        output_ids=output,
        retracted_stain=draw(st.booleans()),
        already_computed=draw(st.integers(0, extend_end + 4)),
        cached_tokens=cached,
        cached_tokens_device=draw(st.integers(0, cached)),
        is_retracted=draw(st.booleans()),
        pd_rebootstrap_in_progress=True if rebootstrap else draw(st.sampled_from([False, True, None])),
        logprob=LogprobSettings(draw(st.integers(0, 5)), draw(st.none() | st.lists(st.integers(0, 100), max_size=3))),
        multimodal_inputs=draw(st.none() | st.builds(dict, mm=st.integers(0, 9))),
        extra={name: draw(spec.strategy) for name, spec in REGISTRY.items()},
    )


def batches(
    *,
    min_requests: int = 0,
    max_requests: int = 6,
    max_prompt: int = 64,
    spare_rows: int = 2,
) -> st.SearchStrategy[PrebuiltBatch]:
    """A PREBUILT batch of ``min_requests..max_requests`` requests on distinct, shuffled rows of an int32
    request-to-token table (plus ``spare_rows`` unused rows); rows are paged with distinct slot values
    across the table; ``return_logprob`` on or off."""
    check_int("min_requests", min_requests)
    check_int("max_requests", max_requests)
    check_int("max_prompt", max_prompt)
    check_int("spare_rows", spare_rows)
    if min_requests > max_requests:
        from hypothesis.errors import InvalidArgument

        raise InvalidArgument(f"min_requests={min_requests} must be <= max_requests={max_requests}")
    return _batches(min_requests=min_requests, max_requests=max_requests, max_prompt=max_prompt, spare_rows=spare_rows)


@st.composite
def _batches(
    draw: st.DrawFn,
    *,
    min_requests: int = 0,
    max_requests: int = 6,
    max_prompt: int = 64,
    spare_rows: int = 2,
) -> PrebuiltBatch:
    ps = draw(page_sizes(max_size=16))
    n = draw(st.integers(min_requests, max_requests))
    rows = n + spare_rows
    pool_of = draw(st.permutations(range(rows)))[:n]
    reqs = [draw(requests(pool_of[i], max_prompt=max_prompt, page_size=ps)) for i in range(n)]
    width = max([r.extend_end for r in reqs], default=0) + draw(st.integers(0, 3))
    per_row = -(-width // ps) if width else 0
    total_pages = rows * per_row
    order = draw(st.permutations(range(1, total_pages + 1)))
    table = []
    for r in range(rows):
        pages = order[r * per_row : (r + 1) * per_row]
        table.append(token_locations(pages, width, ps))
    return PrebuiltBatch(reqs, table, return_logprob=draw(st.booleans()))
