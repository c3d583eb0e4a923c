"""Faster variants of the production functions, verified by the full property suite (target ``fast``).

* ``decode_page_indices``: strides, divides *and narrows to int32* on the device, so the decode wire's int32
  list crosses to the host at half the bytes of an int64 one. A guard refuses page indices that do not fit
  in int32 (or are negative) without an extra synchronisation: the guard's flag travels in the same copy.
* ``prepare_for_prebuilt``: moves its O(batch) metadata to the device in one host-to-device copy and builds
  ``out_cache_loc`` with one gather (a constant number of device launches) instead of one copy per request.
"""

from __future__ import annotations

from typing import Any

import torch

from pdverify.model.batch import ForwardMode
from pdverify.production.prebuilt import SamplingBatchInfo
from pdverify.production.transfer import WireIndices

INT32_MAX = 2**31 - 1


def kv_to_page_indices_int32(kv_indices: torch.Tensor, page_size: int) -> WireIndices:
    """``kv_to_page_indices(kv, ps).astype(np.int32)`` with the narrowing done on the device."""
    pages = kv_indices[::page_size] // page_size
    if pages.dtype == torch.int32:
        host: WireIndices = pages.cpu().numpy()
        return host
    bad = ((pages < 0) | (pages > INT32_MAX)).any().to(torch.int32).reshape(1)
    both = torch.cat([pages.to(torch.int32), bad]).cpu().numpy()
    if both[-1]:
        raise ValueError(f"kv_indices holds page indices outside int32 [0, {INT32_MAX}]: cannot narrow for the wire")
    result: WireIndices = both[:-1]
    return result


def decode_page_indices(
    req_to_token: torch.Tensor,
    req_pool_idx: int,
    decode_prefix_len: int,
    origin_input_len: int,
    page_size: int,
) -> WireIndices:
    return kv_to_page_indices_int32(req_to_token[req_pool_idx][decode_prefix_len:origin_input_len], page_size)


def prepare_for_prebuilt(self: Any) -> None:
    """Same contract as ``pdverify.production.prebuilt.prepare_for_prebuilt`` (0.5.23 names)."""
    self.forward_mode = ForwardMode.PREBUILT
    reqs = self.reqs
    pools, prefixes, extends, seq_lens = [], [], [], []
    for req in reqs:
        pre_len, extend_len = req.prefix_len, req.extend_len
        seq_len = len(req.origin_input_ids) + max(0, len(req.output_ids) - 1)
        if len(req.output_ids) == 0:
            assert seq_len - pre_len == extend_len, f"seq_len={seq_len}, pre_len={pre_len}, extend_len={extend_len}"
        pools.append(req.kv.req_pool_idx)
        prefixes.append(pre_len)
        extends.append(extend_len)
        seq_lens.append(seq_len)
        if not req.retracted_stain:
            delta = max(0, pre_len - req.already_computed)
            req.cached_tokens += delta
            req.cached_tokens_device += delta
            req.already_computed = seq_len
        req.is_retracted = False
        if getattr(req, "pd_rebootstrap_in_progress", False):
            req.pd_rebootstrap_in_progress = False
    if any(e < 0 for e in extends):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(extends)}")

    total = sum(extends)
    device = self.device
    pin = torch.device(device).type == "cuda"
    # int32 metadata (context lengths and pool rows fit): the one host-to-device copy, 16 bytes a request.
    meta = torch.tensor([pools, prefixes, extends, seq_lens], dtype=torch.int32, pin_memory=pin)
    meta = meta.reshape(4, len(reqs)).to(device, non_blocking=pin)
    pools_d, prefix_d, extend_d, seq_d = meta[0], meta[1], meta[2], meta[3]
    table = self.req_to_token_pool.req_to_token
    if total:
        owner = torch.repeat_interleave(torch.arange(len(reqs), device=device), extend_d, output_size=total)
        first = torch.cumsum(extend_d, 0) - extend_d
        position = torch.arange(total, device=device) - first[owner] + prefix_d[owner]
        out_cache_loc = table[pools_d[owner], position].to(torch.int64)
    else:
        out_cache_loc = torch.empty(0, dtype=torch.int64, device=device)

    self.input_ids = None
    self.req_pool_indices = pools_d.to(torch.int64)
    self.req_pool_indices_cpu = torch.tensor(pools, dtype=torch.int64)
    self.seq_lens = seq_d.to(torch.int64)
    self.seq_lens_cpu = torch.tensor(seq_lens, dtype=torch.int64)
    self.orig_seq_lens = seq_d.clone()
    self.out_cache_loc = out_cache_loc
    self.seq_lens_sum = sum(seq_lens)
    if self.return_logprob:
        self.top_logprobs_nums = [r.logprob.top_logprobs_num for r in reqs]
        self.token_ids_logprobs = [r.logprob.token_ids_logprob for r in reqs]
    self.extend_num_tokens = total
    self.prefix_lens = prefixes
    self.extend_lens = extends
    self.extend_logprob_start_lens = None
    self.extend_input_logprob_token_ids = None
    self.multimodal_inputs = [r.multimodal_inputs for r in reqs]
    self.sampling_info = SamplingBatchInfo.from_schedule_batch(self, self.model_config.vocab_size)


__all__ = ["decode_page_indices", "kv_to_page_indices_int32", "prepare_for_prebuilt"]
