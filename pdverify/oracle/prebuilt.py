"""Oracle of ``prepare_for_prebuilt``: every field it must produce, computed in plain Python from the model."""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pdverify.model.batch import PrebuiltBatch, RequestAfter, validate_batch


@dataclass(frozen=True)
class ExpectedPrebuilt:
    forward_mode: str
    out_cache_loc: list[int]
    extend_num_tokens: int
    prefix_lens: list[int]
    extend_lens: list[int]
    seq_lens: list[int]
    seq_lens_sum: int
    req_pool_indices: list[int]
    top_logprobs_nums: list[int] | None
    """``None`` when ``return_logprob`` is off: the batch attribute must then be left untouched."""
    token_ids_logprobs: list[Any] | None
    multimodal_inputs: list[Any]
    reqs_after: list[RequestAfter]


def expected_prebuilt(
    batch: PrebuiltBatch, effects: Mapping[str, Callable[[Any], Any]] | None = None
) -> ExpectedPrebuilt:
    """What decode's PREBUILT batch must hold after preparation (spec properties P19-P27).

    ``effects`` maps each registered extra request field to the value it must hold afterwards.
    """
    validate_batch(batch)
    effects = effects or {}
    for i, req in enumerate(batch.reqs):
        unknown = sorted(set(req.extra) - set(effects))
        if unknown:
            raise ValueError(f"request {i}: extra field(s) {', '.join(unknown)} have no expected effect")
    out_cache_loc: list[int] = []
    seq_lens: list[int] = []
    after: list[RequestAfter] = []
    for req in batch.reqs:
        row = batch.req_to_token[req.req_pool_idx]
        for position in range(req.prefix_len, req.prefix_len + req.extend_len):
            out_cache_loc.append(row[position])
        generated = len(req.output_ids)
        seq_len = len(req.origin_input_ids) + (generated - 1 if generated > 0 else 0)
        seq_lens.append(seq_len)
        if req.retracted_stain:
            cached, cached_device, computed = (
                req.cached_tokens,
                req.cached_tokens_device,
                req.already_computed,
            )
        else:
            newly_cached = req.prefix_len - req.already_computed if req.prefix_len > req.already_computed else 0
            cached = req.cached_tokens + newly_cached
            cached_device = req.cached_tokens_device + newly_cached
            computed = seq_len
        extra = {name: effects[name](value) for name, value in req.extra.items()}
        after.append(RequestAfter(cached, cached_device, computed, False, False, extra))
    return ExpectedPrebuilt(
        forward_mode="PREBUILT",
        out_cache_loc=out_cache_loc,
        extend_num_tokens=len(out_cache_loc),
        prefix_lens=[r.prefix_len for r in batch.reqs],
        extend_lens=[r.extend_len for r in batch.reqs],
        seq_lens=seq_lens,
        seq_lens_sum=sum(seq_lens),
        req_pool_indices=[r.req_pool_idx for r in batch.reqs],
        top_logprobs_nums=[r.logprob.top_logprobs_num for r in batch.reqs] if batch.return_logprob else None,
        token_ids_logprobs=[r.logprob.token_ids_logprob for r in batch.reqs] if batch.return_logprob else None,
        multimodal_inputs=[r.multimodal_inputs for r in batch.reqs],
        reqs_after=after,
    )


def _float32(x: float) -> float:
    """``x`` as a float32 holds it (what a float32 tensor built from ``x`` reads back as)."""
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def expected_sampling_seeds(params: list[Any], deterministic: bool) -> list[int] | None:
    """The sampling info's seed column over requests whose sampling parameters are ``params`` (in batch order):
    none without deterministic inference; with it, each request's seed, 42 where it sent none (SGLang's default)."""
    if not deterministic:
        return None
    return [42 if p.sampling_seed is None else int(p.sampling_seed) for p in params]


def expected_min_new_tokens_stops(batch: PrebuiltBatch) -> list[set[int] | None] | None:
    """The tokens the ``min_new_tokens`` penalizer holds back, row by row: None where no request asks for
    ``min_new_tokens`` (no penalizer); else, for a request that asks, every token it finishes on - its own stop
    tokens, the model configuration's eos ids, the tokenizer's eos and its additional stop tokens (a server without a
    tokenizer has neither) - and None for a request that does not ask (whatever its row holds never applies)."""
    if not any(r.sampling.min_new_tokens > 0 for r in batch.reqs):
        return None
    rows: list[set[int] | None] = []
    for r in batch.reqs:
        if r.sampling.min_new_tokens <= 0:
            rows.append(None)
            continue
        stops = set(r.sampling.stop_token_ids or []) | set(batch.model_eos_token_ids)
        stops |= set(batch.additional_stop_token_ids)
        if batch.eos_token_id is not None:  # None without a tokenizer (validate_batch)
            stops.add(batch.eos_token_id)
        rows.append({t for t in stops if 0 <= t < batch.vocab_size})
    return rows


def expected_processor_rows(processors: list[Any], enabled: bool) -> list[int] | None:
    """The rows custom logit processors run on, over requests whose processors are ``processors`` (in batch order,
    None where a request sent none): none unless the server enables them and a request sent one; else every row
    that sent one, ascending."""
    rows = [i for i, processor in enumerate(processors) if processor is not None]
    return rows if enabled and rows else None


def expected_sampling_rows(params: list[Any]) -> list[tuple[float, float, int, float]]:
    """The per-request rows of the sampling info built over requests whose sampling parameters are ``params`` (in
    batch order): ``(temperature, top_p, top_k, min_p)``, the floats as float32 holds them."""
    return [(_float32(p.temperature), _float32(p.top_p), int(p.top_k), _float32(p.min_p)) for p in params]
