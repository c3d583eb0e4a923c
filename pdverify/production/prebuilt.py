"""Port of ``ScheduleBatchDisaggregationDecodeMixin.prepare_for_prebuilt`` (sglang 0.5.23, after #35070).

PREBUILT batches never enter a model forward: the prompt is not read, ``input_ids`` stays ``None`` and
``extend_num_tokens`` is the sum of extend lengths; ``out_cache_loc``, ``seq_lens``, ``req_pool_indices``,
the cached-token bookkeeping and the flags are filled from metadata. Attribute names are 0.5.23's
(``req.kv.req_pool_idx``, ``req.prefix_len``, ``req.extend_len``). Upstream behaviour on bad input is kept:
assertions, torch errors, and silent acceptance where upstream is silent (see ``tests/test_error_inputs.py``).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from pdverify.model.batch import ForwardMode

DEFAULT_SAMPLING_SEED = 42
"""The seed of a request that sent none, under deterministic inference (``SamplingBatchInfo.from_schedule_batch``)."""

SERVER_FLAGS: contextvars.ContextVar[tuple[tuple[str, Any], ...]] = contextvars.ContextVar(
    "pdverify_server_flags", default=()
)
"""The decode server's configuration as its scheduler publishes it (SGLang 0.5.23's ``get_exec()``): the flags set
(``enable_custom_logit_processor``, ``enable_deterministic_inference``), set by ``published``."""


@contextmanager
def published(flags: Sequence[tuple[str, Any]]) -> Iterator[None]:
    """``flags`` (server argument, value) published for the block, as a decode scheduler publishes its
    configuration before it prepares a batch."""
    token = SERVER_FLAGS.set(tuple(flags))
    try:
        yield
    finally:
        SERVER_FLAGS.reset(token)


@dataclass(frozen=True)
class ProcessorEntry:
    """The requests (``rows``, batch indices) one custom logit processor runs on, as SGLang merges them."""

    processor: str
    rows: list[int]


@dataclass(frozen=True)
class MinNewTokensPenalizer:
    """SGLang's ``BatchedMinNewTokensPenalizer`` once prepared: each request's minimum (an ``(n, 1)`` int32 column)
    and, row i, ``-inf`` at every token request i finishes on (its ``stop_token_ids``, the model configuration's
    ``eos_token_ids``, the tokenizer's additional stop tokens and its eos), 0 elsewhere (``(n, vocab)`` float32)."""

    min_new_tokens: torch.Tensor
    stop_token_penalties: torch.Tensor

    @classmethod
    def prepared(cls, reqs: Sequence[Any], vocab_size: int, device: Any) -> MinNewTokensPenalizer | None:
        """The penalizer over ``reqs``, None where no request asks for ``min_new_tokens`` (SGLang prepares none)."""
        if not any(r.sampling_params.min_new_tokens > 0 for r in reqs):
            return None
        minimum = torch.tensor([r.sampling_params.min_new_tokens for r in reqs], dtype=torch.int32)
        stops = []
        for r in reqs:
            # a request built outside a scheduler's scope (P28's reference) was handed neither
            tokenizer = getattr(r, "tokenizer", None)
            ids = set(r.sampling_params.stop_token_ids or ()) | set(getattr(r, "eos_token_ids", None) or ())
            if tokenizer is not None:
                ids |= set(tokenizer.additional_stop_token_ids or ()) | {tokenizer.eos_token_id}
            stops.append(torch.tensor(sorted(i for i in ids if i is not None), dtype=torch.int64))
        padded = torch.nn.utils.rnn.pad_sequence(stops, batch_first=True, padding_value=vocab_size).to(device)
        penalties = torch.zeros((len(reqs), vocab_size + 1), dtype=torch.float32, device=device).scatter_add_(
            1, padded, torch.full_like(padded, float("-inf"), dtype=torch.float32)
        )[:, :vocab_size]
        return cls(minimum.to(device).unsqueeze_(1), penalties)


@dataclass(frozen=True)
class SamplingBatchInfo:
    """Stand-in for sglang's ``SamplingBatchInfo``: what it was built from, and the per-request rows SGLang's
    keeps (``temperatures`` as an ``(n, 1)`` float32 column, ``top_ps`` and ``min_ps`` float32, ``top_ks`` int32,
    ``sampling_seed`` int64 under deterministic inference, else None), copied to the batch's device as SGLang copies
    them, and the custom logit processors (the same processor merged over its rows; with the per-request
    ``custom_params``) where the server enables them and a request sent one, else None, and the ``min_new_tokens``
    penalizer where a request asks for it; the other penalizers and logit bias are not modelled."""

    vocab_size: int
    batch_size: int
    temperatures: torch.Tensor
    top_ps: torch.Tensor
    top_ks: torch.Tensor
    min_ps: torch.Tensor
    sampling_seed: torch.Tensor | None = None
    custom_logit_processor: dict[int, ProcessorEntry] | None = None
    custom_params: list[Any] | None = None
    min_new_tokens_penalizer: MinNewTokensPenalizer | None = None

    @classmethod
    def from_schedule_batch(cls, batch: Any, vocab_size: int) -> SamplingBatchInfo:
        reqs = batch.reqs
        params = [r.sampling_params for r in reqs]
        flags = dict(SERVER_FLAGS.get())

        def column(values: list[Any], dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype).to(batch.device)

        seeds = None
        if flags.get("enable_deterministic_inference"):
            chosen = [DEFAULT_SAMPLING_SEED if p.sampling_seed is None else p.sampling_seed for p in params]
            seeds = column(chosen, torch.int64)
        merged, custom = None, None
        if flags.get("enable_custom_logit_processor") and any(r.custom_logit_processor for r in reqs):
            rows: dict[str, list[int]] = {}
            for i, r in enumerate(reqs):
                if r.custom_logit_processor is not None:
                    rows.setdefault(r.custom_logit_processor, []).append(i)
            merged = {hash(text): ProcessorEntry(text, found) for text, found in rows.items()}
            custom = [p.custom_params for p in params]
        return cls(
            vocab_size,
            len(reqs),
            column([p.temperature for p in params], torch.float32).view(-1, 1),
            column([p.top_p for p in params], torch.float32),
            column([p.top_k for p in params], torch.int32),
            column([p.min_p for p in params], torch.float32),
            seeds,
            merged,
            custom,
            MinNewTokensPenalizer.prepared(reqs, vocab_size, batch.device),
        )


def async_h2d(args: Sequence[int], dtype: torch.dtype, device: str | torch.device) -> torch.Tensor:
    """``sglang.srt.utils.common.async_h2d``: pinned non-blocking copy when the device can pin."""
    pin = torch.device(device).type == "cuda"
    return torch.tensor(args, dtype=dtype, pin_memory=pin).to(device, non_blocking=pin)


def prepare_for_prebuilt(self: Any) -> None:
    self.forward_mode = ForwardMode.PREBUILT
    reqs = self.reqs
    seq_lens = []
    pre_lens = []
    req_pool_indices = []

    total_size = sum(req.extend_len for req in reqs)
    extend_num_tokens = total_size
    out_cache_loc = torch.empty(total_size, dtype=torch.int64, device=self.device)

    offset = 0
    for req in reqs:
        req_pool_indices.append(req.kv.req_pool_idx)
        pre_len = req.prefix_len

        chunk = self.req_to_token_pool.req_to_token[req.kv.req_pool_idx][pre_len : pre_len + req.extend_len]
        assert offset + req.extend_len <= total_size, (
            f"Exceeds total size: offset={offset}, req.extend_len={req.extend_len}, total_size={total_size}"
        )
        out_cache_loc[offset : offset + req.extend_len] = chunk
        offset += req.extend_len

        seq_len = len(req.origin_input_ids) + max(0, len(req.output_ids) - 1)
        seq_lens.append(seq_len)
        if len(req.output_ids) == 0:
            assert seq_len - pre_len == req.extend_len, (
                f"seq_len={seq_len}, pre_len={pre_len}, req.extend_len={req.extend_len}"
            )

        if not req.retracted_stain:
            # Clamp: already_computed is seeded from the prefill-reported cached_tokens, so a decode-side
            # prefix shorter than that report must not subtract from cached_tokens.
            delta = max(0, pre_len - req.already_computed)
            req.cached_tokens += delta
            req.cached_tokens_device += delta
            req.already_computed = seq_len
        req.is_retracted = False
        if getattr(req, "pd_rebootstrap_in_progress", False):
            req.pd_rebootstrap_in_progress = False
        pre_lens.append(pre_len)

    # The first decode input is seeded by process_prebuilt through FutureMap: no prompt tensor here.
    self.input_ids = None
    self.req_pool_indices = async_h2d(req_pool_indices, dtype=torch.int64, device=self.device)
    self.req_pool_indices_cpu = torch.tensor(req_pool_indices, dtype=torch.int64)
    self.seq_lens = async_h2d(seq_lens, dtype=torch.int64, device=self.device)
    self.seq_lens_cpu = torch.tensor(seq_lens, dtype=torch.int64)
    self.orig_seq_lens = async_h2d(seq_lens, dtype=torch.int32, device=self.device)
    self.out_cache_loc = out_cache_loc
    self.seq_lens_sum = sum(seq_lens)

    if self.return_logprob:
        self.top_logprobs_nums = [r.logprob.top_logprobs_num for r in reqs]
        self.token_ids_logprobs = [r.logprob.token_ids_logprob for r in reqs]

    self.extend_num_tokens = extend_num_tokens
    self.prefix_lens = [r.prefix_len for r in reqs]
    self.extend_lens = [r.extend_len for r in reqs]
    self.extend_logprob_start_lens = None
    self.extend_input_logprob_token_ids = None
    self.multimodal_inputs = [r.multimodal_inputs for r in reqs]

    self.sampling_info = SamplingBatchInfo.from_schedule_batch(self, self.model_config.vocab_size)


class _SeedEraNames:
    """Presents a seed-era request (#35070: ``req_pool_idx``, ``prefix_indices``, ``extend_range``) under
    0.5.23's names; every other attribute, read or written, goes to the request itself."""

    def __init__(self, req: Any) -> None:
        object.__setattr__(self, "_req", req)

    @property
    def kv(self) -> Any:
        return _PoolSlot(self._req.req_pool_idx)

    @property
    def prefix_len(self) -> int:
        return len(self._req.prefix_indices)

    @property
    def extend_len(self) -> int:
        return int(self._req.extend_range.length)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._req, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._req, name, value)


@dataclass(frozen=True)
class _PoolSlot:
    req_pool_idx: int


def prepare_for_prebuilt_seed_names(self: Any) -> None:
    """The #35070 function as it stood in the seed (PR-era request names); upstream it differs from 0.5.23
    only in those names, which ``_SeedEraNames`` maps."""
    reqs = self.reqs
    self.reqs = [_SeedEraNames(r) for r in reqs]
    try:
        prepare_for_prebuilt(self)
    finally:
        self.reqs = reqs
