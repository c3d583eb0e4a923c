"""Faults in the PD KV checksum end to end: pdverify's port (``production.checksum``) with one range rule replaced,
each a slip SGLang made or could make in ``send_kv_chunk`` / ``_verify_kv_checksums``."""

from __future__ import annotations

from unittest import mock

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


@mutant("XV04", "kv_checksum", "missing case", "no state indices for the block scales (F4: 0.5.21-0.5.23)")
def no_block_scale_indices(case: ChecksumCase, device: str) -> ChecksumTrace:
    with mock.patch.object(port, "state_indices", lambda block_scales, kv_pages: None):
        return port.kv_checksum(case, device)


@mutant("XV05", "kv_checksum", "missing case", "the block scales go undigested (state indices empty)")
def block_scales_undigested(case: ChecksumCase, device: str) -> ChecksumTrace:
    with mock.patch.object(port, "state_indices", lambda block_scales, kv_pages: kv_pages[:0]):
        return port.kv_checksum(case, device)
