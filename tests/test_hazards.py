"""The silent hazards of the released code (docs/concepts.md, "Silent hazards"), as explicit out-of-contract scenarios.

Each test first shows the corruption the released functions produce today (so that a future upstream fix
flips the test), then that pdverify's oracles and ``pdverify.contracts`` reject the same input clearly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pdverify import contracts
from pdverify.model.layout import build_req_to_token, token_locations
from pdverify.oracle import transfer as oracle
from pdverify.production import page_index, transfer

PS = 4


def test_misaligned_decode_prefix_overwrites_the_cached_prefix() -> None:
    # ps 4, D 2, L 10: prefill chunks end at 8 (non-last) and 10 (last).
    prefill_row = token_locations([5, 6, 2], 10, PS)
    decode_row = token_locations([7, 1, 3], 10, PS)
    table_p = build_req_to_token([prefill_row], 12)
    table_d = build_req_to_token([decode_row], 12)
    state = transfer.PrefillSendState(0, 10, 2, page_index.kv_to_page_num(10 - 2, PS), 2)
    sent = []
    for end, last in ((8, False), (10, True)):
        chunk, state = transfer.send_kv_chunk(table_p, state, extend_end=end, last_chunk=last, page_size=PS)
        assert chunk is not None
        sent += chunk.pages.tolist()
    dst = transfer.decode_page_indices(table_d, 0, 2, 10, PS).tolist()
    # Silent today: 3 pages sent into 2 destinations, the sender was told 2, and decode's first destination
    # is page 7 — the page that holds decode's cached prefix rows [0, 2).
    assert (len(sent), len(dst), state.num_pages) == (3, 2, 2)
    assert dst[0] == 7 and decode_row[0] // PS == 7
    # pdverify rejects it.
    with pytest.raises(ValueError, match="not page-aligned"):
        contracts.check_decode_prefix(2, PS, request="r1")
    with pytest.raises(ValueError, match="sender and receiver page counts are equal"):
        contracts.check_page_counts(len(sent), len(dst), request="r1")
    with pytest.raises(ValueError, match="decode_prefix_len must be page-aligned"):
        oracle.decode_pages(decode_row, 2, 10, PS)


def test_sequence_past_written_slots_maps_to_page_zero() -> None:
    table = torch.zeros((2, 16), dtype=torch.int32)
    table[1, :10] = torch.tensor(token_locations([5, 2, 9], 10, PS), dtype=torch.int32)
    pages = page_index.suffix_page_indices(table, 1, 4, 16, PS)
    assert pages.tolist() == [2, 9, 0]  # silent today: the padding page is a destination
    with pytest.raises(ValueError, match="holds page 0"):
        contracts.check_destination_pages(pages.astype(np.int32), request=1)
    guarded = contracts.guarded_suffix_page_indices(page_index.suffix_page_indices)
    with pytest.raises(ValueError, match="include page 0"):
        guarded(table, 1, 4, 16, PS)
    assert guarded(table, 1, 4, 10, PS).tolist() == [2, 9]
    with pytest.raises(ValueError, match="written slots"):
        oracle.decode_pages(table[1].tolist()[:10], 4, 16, PS)


def test_int64_page_list_is_misread_as_int32() -> None:
    pages = np.array([4036, 2628, 897], dtype=np.int64)
    assert transfer.from_wire(transfer.to_wire(pages)).tolist() == [4036, 0, 2628, 0, 897, 0]  # silent today
    with pytest.raises(ValueError, match="int32 on the wire"):
        contracts.check_wire_dtype(pages, request="r7")
    contracts.check_wire_dtype(pages.astype(np.int32))


def test_contract_checks_pass_in_contract_and_name_the_request() -> None:
    contracts.check_decode_prefix(8, PS)
    contracts.check_destination_pages(np.array([3, 1], dtype=np.int32))
    contracts.check_destination_pages(np.array([], dtype=np.int32))
    contracts.check_page_counts(2, 2)
    contracts.check_out_cache_loc(torch.tensor([4, 9, 15]), pool_tokens=16, page_size=PS)
    contracts.check_out_cache_loc(torch.tensor([], dtype=torch.int64), pool_tokens=16, page_size=PS)
    with pytest.raises(ValueError, match=r"request 'abc': out_cache_loc spans \[2, 9\]"):
        contracts.check_out_cache_loc(torch.tensor([2, 9]), pool_tokens=16, page_size=PS, request="abc")
    with pytest.raises(ValueError, match="page_size must be >= 1"):
        contracts.check_decode_prefix(0, 0)
    with pytest.raises(ValueError, match="prefix_len 8 > seq_len 4"):
        contracts.guarded_suffix_page_indices(page_index.suffix_page_indices)(torch.zeros((1, 8)), 0, 8, 4, PS)
