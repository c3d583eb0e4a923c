"""Faults in the PD KV checksum end to end: pdverify's port (``production.checksum``) with one range rule replaced,
each a slip SGLang made or could make in ``send_kv_chunk`` / ``_verify_kv_checksums``."""

from __future__ import annotations

from collections.abc import Callable
from unittest import mock

import torch

from pdverify.model.checksum import ChecksumCase, ChecksumTrace
from pdverify.mutants.catalogue import mutant
from pdverify.production import checksum as port


@mutant("XV01", "kv_checksum", "wrong range", "decode verifies the prompt only (F3: 0.5.21-0.5.23's seq_len)")
def decode_verifies_prompt(case: ChecksumCase, device: str) -> ChecksumTrace:
    with mock.patch.object(port, "verified_length", lambda prompt, outputs: prompt):
        return port.kv_checksum(case, device)


@mutant("XV02", "kv_checksum", "wrong origin", "both digests start at 0, over the prefix never sent (to 0.5.22)")
def digests_from_zero(case: ChecksumCase, device: str) -> ChecksumTrace:
    with mock.patch.object(port, "digest_start", lambda decode_prefix: 0):
        return port.kv_checksum(case, device)


@mutant("XV03", "kv_checksum", "missing alignment", "a non-last chunk sends its partial last page too")
def partial_page_sent(case: ChecksumCase, device: str) -> ChecksumTrace:
    with mock.patch.object(port, "chunk_stop", lambda end, page_size, last: end):
        return port.kv_checksum(case, device)


@mutant("XV12", "kv_checksum", "sentinel collision", "decode reads a room of 0 as metadata not yet written (F8)")
def room_zero_unwritten(case: ChecksumCase, device: str) -> ChecksumTrace:
    with mock.patch.object(port, "metadata_landed", lambda row: row[0] != 0):
        return port.kv_checksum(case, device)


@mutant("XV13", "kv_checksum", "wrong index", "prefill's aux transfer reads decode's slot of its own buffers")
def aux_from_decode_slot(case: ChecksumCase, device: str) -> ChecksumTrace:
    with mock.patch.object(port, "aux_slots", lambda c: (c.decode_aux_index, c.decode_aux_index)):
        return port.kv_checksum(case, device)


Indices = dict[str, torch.Tensor]
Rewrite = Callable[[ChecksumCase, Indices, torch.Tensor, torch.Tensor, torch.Tensor], "Indices | None"]
"""``rewrite(case, fixed, kv_pages, window, slot)``: the mutant's state indices from the port's."""


def _with_indices(case: ChecksumCase, device: str, rewrite: Rewrite) -> ChecksumTrace:
    """The port with each side's state indices rewritten: ``rewrite(case, fixed, kv_pages, window, slot)`` gets the
    port's (fixed) indices of a pool that registers state and returns the mutant's."""
    fixed = port.state_indices

    def indices(
        c: ChecksumCase, kv: torch.Tensor, window: torch.Tensor, slot: torch.Tensor, row: torch.Tensor
    ) -> Indices | None:
        got = fixed(c, kv, window, slot, row)
        return None if got is None else rewrite(c, got, kv, window, slot)

    with mock.patch.object(port, "state_indices", indices):
        return port.kv_checksum(case, device)


@mutant("XV04", "kv_checksum", "missing case", "state indices for a hybrid SWA pool only (F4: 0.5.21-0.5.23)")
def no_block_scale_indices(case: ChecksumCase, device: str) -> ChecksumTrace:
    return _with_indices(case, device, lambda c, got, kv, window, slot: got
                         if c.sliding_window or c.kv_pool != "mha" else None)  # fmt: skip


@mutant("XV05", "kv_checksum", "missing case", "the block scales go undigested (their state indices empty)")
def block_scales_undigested(case: ChecksumCase, device: str) -> ChecksumTrace:
    return _with_indices(case, device, lambda c, got, kv, window, slot: {
        k: v[:0] if k.startswith("block_scale") else v for k, v in got.items()})  # fmt: skip


@mutant("XV06", "kv_checksum", "wrong index space", "every state type digested at the SWA window's pages (F5)")
def one_state_index_vector(case: ChecksumCase, device: str) -> ChecksumTrace:
    return _with_indices(case, device, lambda c, got, kv, window, slot: dict.fromkeys(got, window)
                         if c.sliding_window else got)  # fmt: skip


@mutant("XV07", "kv_checksum", "wrong index space", "every state type of a hybrid linear pool at its Mamba slot (F6)")
def one_mamba_slot_index(case: ChecksumCase, device: str) -> ChecksumTrace:
    return _with_indices(case, device, lambda c, got, kv, window, slot: dict.fromkeys(got, slot)
                         if c.mamba else got)  # fmt: skip


@mutant("XV08", "kv_checksum", "wrong index space", "the Mamba state digested at the request's first KV page")
def mamba_state_by_page(case: ChecksumCase, device: str) -> ChecksumTrace:
    return _with_indices(case, device, lambda c, got, kv, window, slot: {
        k: kv[:1] if k == "mamba" else v for k, v in got.items()})  # fmt: skip


@mutant("XV09", "kv_checksum", "wrong index space", "a compressed indexer's tail digested at the KV pages")
def dsa_tail_by_pages(case: ChecksumCase, device: str) -> ChecksumTrace:
    return _with_indices(case, device, lambda c, got, kv, window, slot: {
        k: kv if k == "dsa_tail" else v for k, v in got.items()})  # fmt: skip


@mutant("XV10", "kv_checksum", "missing case", "a MiniMax sparse pool's state gets no indices (T22: 0.5.21-0.5.22)")
def minimax_without_indices(case: ChecksumCase, device: str) -> ChecksumTrace:
    return _with_indices(case, device, lambda c, got, kv, window, slot: None if c.kv_pool == "minimax" else got)


@mutant("XV11", "kv_checksum", "missing case", "a MiniMax sparse pool's dense-layer KV goes undigested")
def minimax_dense_undigested(case: ChecksumCase, device: str) -> ChecksumTrace:
    return _with_indices(case, device, lambda c, got, kv, window, slot: {
        k: v[:0] if k == "minimax_dense_kv" else v for k, v in got.items()})  # fmt: skip
