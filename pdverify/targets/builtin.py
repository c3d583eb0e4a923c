"""The built-in targets: ``pdverify`` (the production ports), ``legacy``, ``pr35070`` (the seed's names),
``fast`` (the verified faster variants) and ``sglang`` (the installed release)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from pdverify.legacy import page_index as legacy_pages
from pdverify.legacy import prebuilt as legacy_prebuilt
from pdverify.legacy import transfer as legacy_transfer
from pdverify.production import (
    checksum,
    decode_prealloc,
    decode_queue,
    dispatch,
    fast,
    page_index,
    prebuilt,
    prefill_sender,
    sender,
    transfer,
    transfer_queue,
    translate,
    wire,
)
from pdverify.targets.protocol import ServerRefuses, Target
from pdverify.targets.sglang_context import model_eos_token_ids, server_tokenizer

_PDV_SAMPLING = "pdverify.production.prebuilt.SamplingBatchInfo.from_schedule_batch"


def pdverify_target() -> Target:
    return Target(
        name="pdverify",
        description="pdverify's ports of the released (sglang 0.5.23) functions",
        kv_to_page_indices=page_index.kv_to_page_indices,
        suffix_page_indices=page_index.suffix_page_indices,
        kv_to_page_num=page_index.kv_to_page_num,
        page_align_floor=page_index.page_align_floor,
        minimax_index_transfer_pages=page_index.minimax_index_transfer_pages,
        translate_token_ids=translate.translate_token_ids,
        send_kv_chunk=transfer.send_kv_chunk,
        decode_page_indices=transfer.decode_page_indices,
        prepare_for_prebuilt=prebuilt.prepare_for_prebuilt,
        prefill_exchange=prefill_sender.prefill_exchange,
        kv_sender=sender.kv_sender,
        bootstrap=sender.bootstrap,
        decode_prealloc=decode_prealloc.decode_prealloc,
        decode_queue=decode_queue.decode_queue,
        transfer_queue=transfer_queue.transfer_queue,
        generate_dispatch=dispatch.generate_dispatch,
        wire_roundtrip=wire.wire_roundtrip,
        kv_checksum=checksum.kv_checksum,
        layout="sglang-0.5.23",
        sampling_info_path=_PDV_SAMPLING,
        scheduler_scope=port_scheduler,
    )


SEED_RANGE = (-(2**63), 2**63 - 1)
"""The sampling seeds 0.5.23's ``SamplingParams.verify`` admits (a signed 64-bit integer)."""


def stop_ids_outside(stop_token_ids: Iterable[int] | None, vocab_size: int) -> list[int]:
    """The stop token ids outside ``[0, vocab_size)``, sorted: what F7's candidate fix refuses in ``verify`` (the
    ``min_new_tokens`` penalizer's table has no column past ``vocab_size``)."""
    return sorted(t for t in stop_token_ids or () if not 0 <= t < vocab_size)


@contextmanager
def port_scheduler(batch: Any) -> Iterator[None]:
    """What the port's decode scheduler has published when it prepares ``batch``: the batch's server flags
    (``pdverify_server``, set by the layout adapter). A request 0.5.23's ``SamplingParams.verify`` refuses (a seed
    outside a signed 64-bit integer, or not an integer), or its ``SamplingParams.normalize`` (``min_new_tokens`` on a
    server started with ``--skip-tokenizer-init``: no tokenizer to hold stop tokens back with), never reaches it:
    ``ServerRefuses``. So does a stop token id outside the vocabulary, which 0.5.23 takes (F7) and F7's candidate fix
    refuses in ``verify``, as it refuses a logit bias outside it."""
    server = getattr(batch, "pdverify_server", None)
    tokenizer = None if server is None else server_tokenizer(server)
    no_tokenizer = server is not None and tokenizer is None
    if server is not None:  # what the port's scheduler hands each request on receipt, as SGLang's does
        eos_ids = model_eos_token_ids(server)
        for req in batch.reqs:
            req.tokenizer, req.eos_token_ids = tokenizer, eos_ids
    vocab = batch.model_config.vocab_size
    for req in batch.reqs:
        seed = getattr(req.sampling_params, "sampling_seed", None)
        if seed is not None and not isinstance(seed, int):
            raise ServerRefuses(f"SamplingParams.verify refuses sampling_seed {seed!r}: not an integer")
        if seed is not None and not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
            raise ServerRefuses(f"SamplingParams.verify refuses sampling_seed {seed}: outside [-2**63, 2**63 - 1]")
        stray = stop_ids_outside(getattr(req.sampling_params, "stop_token_ids", None), vocab)
        if stray:
            raise ServerRefuses(
                f"SamplingParams.verify refuses stop_token_ids {stray}: outside [0, {vocab}) (the candidate fix of F7)"
            )
        wanted = getattr(req.sampling_params, "min_new_tokens", 0)
        if no_tokenizer and wanted > 0:
            raise ServerRefuses(
                f"SamplingParams.normalize refuses min_new_tokens={wanted}: unavailable with --skip-tokenizer-init"
            )
    with prebuilt.published(server.flags if server is not None else ()):
        yield


def legacy_target() -> Target:
    return pdverify_target().derive(
        "legacy",
        "the functions before #31173 (host-side stride) and #35070 (prompt copied to the device)",
        kv_to_page_indices=legacy_pages.kv_to_page_indices,
        suffix_page_indices=legacy_pages.suffix_page_indices,
        minimax_index_transfer_pages=None,
        translate_token_ids=None,
        send_kv_chunk=legacy_transfer.send_kv_chunk,
        decode_page_indices=legacy_transfer.decode_page_indices,
        prepare_for_prebuilt=legacy_prebuilt.prepare_for_prebuilt,
        prefill_exchange=None,
        kv_sender=None,
        bootstrap=None,
        decode_prealloc=None,
        decode_queue=None,
        transfer_queue=None,
        generate_dispatch=None,
        wire_roundtrip=None,
        kv_checksum=None,
        layout="sglang-pr35070",
    )


def pr35070_target() -> Target:
    return pdverify_target().derive(
        "pr35070",
        "the released prepare_for_prebuilt in the seed's (PR #35070) request names",
        prepare_for_prebuilt=prebuilt.prepare_for_prebuilt_seed_names,
        layout="sglang-pr35070",
    )


def fast_target() -> Target:
    return pdverify_target().derive(
        "fast",
        "faster variants: int32 narrowing on the device for the decode wire; a constant-launch prebuilt",
        decode_page_indices=fast.decode_page_indices,
        prepare_for_prebuilt=fast.prepare_for_prebuilt,
    )


def sglang_target() -> Target:  # pragma: no cover - runs in the SGLang conformance venv (ci/conformance.sh)
    """The installed SGLang release's own functions, each unit resolved to that release's code
    (``pdverify.targets.sglang_release``; patching only ``SamplingBatchInfo.from_schedule_batch``).

    On 0.5.23 every unit is SGLang's own code: ``prefill_exchange``, ``decode_prealloc`` and ``wire_roundtrip``
    drive its scheduler methods, KV sender, pre-allocation and wire (``pdverify.targets.sglang_prefill``,
    ``sglang_decode``, ``sglang_wire``); the function-level ``send_kv_chunk`` (P9-P14, M1) is one call of its
    ``_send_kv_chunk`` with a real ``CommonKVSender``, and ``decode_page_indices`` its ``_transfer_page_indices``.
    """
    from pdverify.targets.sglang_release import sglang_release_target

    return sglang_release_target()


BUILTIN = {
    "pdverify": pdverify_target,
    "legacy": legacy_target,
    "pr35070": pr35070_target,
    "fast": fast_target,
    "sglang": sglang_target,
}
