"""Faults in ``prepare_for_prebuilt``: each mutant is the 0.5.23 port with exactly one fault switched on."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch

from pdverify.model.batch import ForwardMode
from pdverify.mutants.catalogue import mutant
from pdverify.production import prebuilt as port


def _prepare(self: Any, fault: str) -> None:
    """The released function with the single fault ``fault`` (one of the ids below) switched on."""
    self.forward_mode = ForwardMode.PREBUILT
    reqs = list(reversed(self.reqs)) if fault == "PB08" else self.reqs
    seq_lens, req_pool_indices = [], []
    if fault == "PB15":
        _ = [r.get_fill_ids() for r in reqs]
    total_size = sum(req.extend_len for req in reqs)
    out_dtype = torch.int32 if fault == "PB09" else torch.int64
    out_cache_loc = torch.empty(total_size, dtype=out_dtype, device=self.device)
    offset = 0
    for req in reqs:
        req_pool_indices.append(req.kv.req_pool_idx)
        pre_len = 0 if fault == "PB07" else req.prefix_len
        row = self.req_to_token_pool.req_to_token[req.kv.req_pool_idx]
        out_cache_loc[offset : offset + req.extend_len] = row[pre_len : pre_len + req.extend_len]
        if fault == "PB14":
            row[req.prefix_len : req.prefix_len + req.extend_len] = 0
        offset += req.extend_len
        if fault == "PB01":
            seq_len = len(req.origin_input_ids) + len(req.output_ids)
        else:
            seq_len = len(req.origin_input_ids) + max(0, len(req.output_ids) - 1)
        seq_lens.append(seq_len)
        if not req.retracted_stain or fault == "PB06":
            delta = (
                req.prefix_len - req.already_computed
                if fault == "PB05"
                else max(0, req.prefix_len - req.already_computed)
            )
            req.cached_tokens += delta
            if fault != "PB13":
                req.cached_tokens_device += delta
            if fault != "PB04":
                req.already_computed = seq_len
        if fault != "PB11":
            req.is_retracted = False
        if getattr(req, "pd_rebootstrap_in_progress", False) and fault != "PB12":
            req.pd_rebootstrap_in_progress = False
    self.input_ids = None
    pools = list(reversed(req_pool_indices)) if fault == "PB02" else req_pool_indices
    self.req_pool_indices = port.async_h2d(pools, dtype=torch.int64, device=self.device)
    self.req_pool_indices_cpu = torch.tensor(req_pool_indices, dtype=torch.int64)
    self.seq_lens = port.async_h2d(seq_lens, dtype=torch.int64, device=self.device)
    self.seq_lens_cpu = torch.tensor(seq_lens, dtype=torch.int64)
    orig_dtype = torch.int64 if fault == "PB03" else torch.int32
    self.orig_seq_lens = port.async_h2d(seq_lens, dtype=orig_dtype, device=self.device)
    self.out_cache_loc = out_cache_loc
    self.seq_lens_sum = total_size if fault == "PB16" else sum(seq_lens)
    if self.return_logprob or fault == "PB17":
        self.top_logprobs_nums = [r.logprob.top_logprobs_num for r in reqs]
        if fault == "PB10":
            self.token_ids_logprobs = [r.logprob.top_logprobs_num for r in reqs]
        else:
            self.token_ids_logprobs = [r.logprob.token_ids_logprob for r in reqs]
    self.extend_num_tokens = sum(seq_lens) if fault == "PB18" else total_size
    self.prefix_lens = [r.prefix_len for r in reqs]
    self.extend_lens = [r.extend_len for r in reqs]
    self.extend_logprob_start_lens = None
    self.extend_input_logprob_token_ids = None
    self.multimodal_inputs = [None for _ in reqs] if fault == "PB19" else [r.multimodal_inputs for r in reqs]
    if fault == "PB21":  # the batch sorted for the sampling info's build and put back after
        self.reqs = sorted(reqs, key=lambda r: -len(r.origin_input_ids))
    held = [(r, r.custom_logit_processor, r.sampling_params, getattr(r, "eos_token_ids", None)) for r in reqs]
    tokenizers = [getattr(r, "tokenizer", None) for r in reqs]
    for r in reqs:
        if fault == "PB22":  # the requests rebuilt from decode's metadata, without the client's processor
            r.custom_logit_processor = None
        if fault == "PB23":  # the sampling parameters rebuilt from decode's metadata, without the client's seed
            r.sampling_params = SimpleNamespace(**{**vars(r.sampling_params), "sampling_seed": None})
        if fault == "PB24":  # the penalizer's stop set without the model configuration's eos ids (#31378 undone)
            r.eos_token_ids = None
        if fault == "PB25" and getattr(r, "tokenizer", None) is not None:  # ... without the tokenizer's added ones
            r.tokenizer = SimpleNamespace(**{**vars(r.tokenizer), "additional_stop_token_ids": None})
    self.sampling_info = port.SamplingBatchInfo.from_schedule_batch(self, self.model_config.vocab_size)
    for (r, processor, params, eos_ids), tokenizer in zip(held, tokenizers, strict=True):
        r.custom_logit_processor, r.sampling_params = processor, params
        if fault == "PB24":
            r.eos_token_ids = eos_ids
        if fault == "PB25":
            r.tokenizer = tokenizer
    self.reqs = reqs if fault == "PB21" else self.reqs
    if fault == "PB20":
        self.sampling_info = port.SamplingBatchInfo.from_schedule_batch(self, self.model_config.vocab_size)


FAULTS = {
    "PB01": ("dropped clamp", "seq_lens without the clamp on output_ids (len(origin) + len(output))"),
    "PB02": ("reordered batch", "req_pool_indices in reverse order"),
    "PB03": ("wrong dtype", "orig_seq_lens int64 instead of int32"),
    "PB04": ("field left unset", "already_computed left unchanged"),
    "PB05": ("dropped clamp", "cached-token delta not clamped at 0 (cached_tokens can decrease)"),
    "PB06": ("dropped guard", "stained requests also update the bookkeeping"),
    "PB07": ("off-by-one slice", "out_cache_loc sliced from 0 instead of from the prefix"),
    "PB08": ("reordered batch", "requests processed in reverse order"),
    "PB09": ("wrong dtype", "out_cache_loc int32 instead of int64"),
    "PB10": ("wrong source", "token_ids_logprobs taken from top_logprobs_num"),
    "PB11": ("field left unset", "is_retracted not reset"),
    "PB12": ("field left unset", "pd_rebootstrap_in_progress not cleared"),
    "PB13": ("field left unset", "cached_tokens_device not updated"),
    "PB14": ("aliasing write", "zeroes the request's consumed table slots"),
    "PB15": ("transfer not removed", "still reads every prompt through get_fill_ids (result unused)"),
    "PB16": ("wrong source", "seq_lens_sum from extend lengths"),
    "PB17": ("dropped guard", "logprob lists written even with return_logprob off"),
    "PB18": ("wrong source", "extend_num_tokens from seq_lens"),
    "PB19": ("wrong source", "multimodal_inputs dropped (all None)"),
    "PB20": ("duplicated call", "sampling info built twice"),
    "PB21": ("reordered batch", "sampling info built over the requests sorted by prompt length, rows misaligned"),
    "PB22": ("wrong source", "sampling info built over the requests without their custom logit processors"),
    "PB23": ("wrong source", "sampling info built over sampling parameters without the client's seed"),
    "PB24": ("missing term", "min_new_tokens penalizer without the model configuration's eos ids (#31378 undone)"),
    "PB25": ("missing term", "min_new_tokens penalizer without the tokenizer's additional stop tokens (<|eom_id|>)"),
}


def _make(fault: str) -> Callable[[Any], None]:
    def prepare_for_prebuilt(self: Any) -> None:
        _prepare(self, fault)

    prepare_for_prebuilt.__qualname__ = f"prepare_for_prebuilt[{fault}]"
    return prepare_for_prebuilt


for _id, (_cls, _desc) in FAULTS.items():
    mutant(_id, "prepare_for_prebuilt", _cls, _desc)(_make(_id))
