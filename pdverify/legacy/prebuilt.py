"""``prepare_for_prebuilt`` before #35070 (seed-era names: ``req.req_pool_idx``, ``req.prefix_indices``,
``req.extend_range.length``): it read every request's fill ids, flattened them and copied them to the device
as ``input_ids``, although a PREBUILT batch never enters a model forward."""

from __future__ import annotations

from array import array
from typing import Any

import torch

from pdverify.model.batch import ForwardMode
from pdverify.production.prebuilt import SamplingBatchInfo


def prepare_for_prebuilt(self: Any) -> None:
    self.forward_mode = ForwardMode.PREBUILT
    reqs = self.reqs
    input_ids = [r.get_fill_ids()[len(r.prefix_indices) :] for r in reqs]
    extend_num_tokens = sum(len(ids) for ids in input_ids)
    seq_lens = []
    pre_lens = []
    req_pool_indices = []

    total_size = sum(req.extend_range.length for req in reqs)
    out_cache_loc = torch.empty(total_size, dtype=torch.int64, device=self.device)

    offset = 0
    for req in reqs:
        req_pool_indices.append(req.req_pool_idx)
        pre_len = len(req.prefix_indices)
        chunk = self.req_to_token_pool.req_to_token[req.req_pool_idx][pre_len : pre_len + req.extend_range.length]
        assert offset + req.extend_range.length <= total_size
        out_cache_loc[offset : offset + req.extend_range.length] = chunk
        offset += req.extend_range.length

        seq_len = len(req.origin_input_ids) + max(0, len(req.output_ids) - 1)
        seq_lens.append(seq_len)
        if len(req.output_ids) == 0:
            assert seq_len - pre_len == req.extend_range.length

        if not req.retracted_stain:
            delta = max(0, pre_len - req.already_computed)
            req.cached_tokens += delta
            req.cached_tokens_device += delta
            req.already_computed = seq_len
        req.is_retracted = False
        if getattr(req, "pd_rebootstrap_in_progress", False):
            req.pd_rebootstrap_in_progress = False
        pre_lens.append(pre_len)

    self.input_ids = torch.tensor(sum(input_ids, array("q")), dtype=torch.int32, device=self.device)
    self.req_pool_indices = torch.tensor(req_pool_indices, dtype=torch.int64, device=self.device)
    self.req_pool_indices_cpu = torch.tensor(req_pool_indices, dtype=torch.int64)
    self.seq_lens = torch.tensor(seq_lens, dtype=torch.int64, device=self.device)
    self.seq_lens_cpu = torch.tensor(seq_lens, dtype=torch.int64)
    self.orig_seq_lens = torch.tensor(seq_lens, dtype=torch.int32, device=self.device)
    self.out_cache_loc = out_cache_loc
    self.seq_lens_sum = sum(seq_lens)

    if self.return_logprob:
        self.top_logprobs_nums = [r.logprob.top_logprobs_num for r in reqs]
        self.token_ids_logprobs = [r.logprob.token_ids_logprob for r in reqs]

    self.extend_num_tokens = extend_num_tokens
    self.prefix_lens = [len(r.prefix_indices) for r in reqs]
    self.extend_lens = [r.extend_range.length for r in reqs]
    self.extend_logprob_start_lens = None
    self.extend_input_logprob_token_ids = None
    self.multimodal_inputs = [r.multimodal_inputs for r in reqs]

    self.sampling_info = SamplingBatchInfo.from_schedule_batch(self, self.model_config.vocab_size)
