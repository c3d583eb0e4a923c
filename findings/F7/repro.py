"""F7: a stop token id outside the vocabulary, in a batch where some request asks for min_new_tokens, crashes the
decode scheduler's PREBUILT step (every SGLang release through 0.5.23).

Standalone: imports only sglang, torch and the standard library. Runs on CPU.

The tokenizer manager admits a request only after ``SamplingParams.normalize`` and ``SamplingParams.verify(vocab)``
(tokenizer_manager.py:1566-1567). ``verify`` range-checks ``logit_bias`` keys against the vocabulary
(sampling_params.py:295-301) but not ``stop_token_ids``, which ``__init__`` only coerces to ints
(sampling_params.py:201-205). When a request of the batch asks for ``min_new_tokens`` (the API's ``min_tokens``),
``SamplingBatchInfo.from_schedule_batch`` - which decode's ``prepare_for_prebuilt`` calls for every PREBUILT batch
(decode_schedule_batch_mixin.py:106-109) - prepares the min-new-tokens penalizer, which pads *every* request's stop ids
into a tensor and ``scatter_add_``s it into a ``(n, vocab_size + 1)`` table (min_new_tokens.py:32-73). An id past
``vocab_size``, or a negative one, is an out-of-bounds scatter index: a ``RuntimeError`` on CPU, a device-side assert
on a GPU. The exception leaves the scheduler's event loop, so the decode server - every request on it - dies.

The scenario, as a decode server sees it (``--disaggregation-mode decode --page-size 64``, DeepSeek-V3: vocabulary
129280, eos 1): two clients' requests transferred from prefill and batched together. Client A sends a 900-token prompt
with ``min_tokens=8``; client B, written for a Qwen model, sends a 300-token prompt with ``stop_token_ids=[151645]``
(Qwen's ``<|im_end|>``). The same two requests then reach an aggregated server (no PD, ``--page-size 64``) and its
prefill step, ``prepare_for_extend``, which builds the same sampling info (schedule_batch.py:3132); and client B's
request alone, asking for ``min_tokens`` itself. The shrunk cases follow: a vocabulary of 32, one request with
``min_new_tokens=1`` and another with the stop id 33, or -1.

Runs SGLang's own ``SamplingParams`` (``normalize``, ``verify``), ``Req``, ``ReqToTokenPool``, ``ScheduleBatch`` and
its ``prepare_for_prebuilt`` (with ``SamplingBatchInfo.from_schedule_batch`` and the penalizers) under the release's
own runtime context for a decode scheduler; for the aggregated server, ``ScheduleBatch.init_new`` and
``prepare_for_extend`` over SGLang's own ``MHATokenToKVPool``, ``PagedTokenToKVPoolAllocator`` and
``UnifiedRadixCache`` (the default tree), under a plain server's context. Stubbed: the tokenizer (an object with the
model's eos and no additional stop ids, what ``get_tokenizer`` attaches for DeepSeek-V3) and the model configuration
(its vocabulary size only); on the aggregated server the scheduler's admission is stood in for by what its
``PrefillAdder`` sets on a request admitted whole (``extend_end``, schedule_policy.py:1342).

Exit 1 while the defect is present (the request is admitted and the PREBUILT step raises), 0 on a fixed SGLang (the
request is refused at admission, or the step survives).
"""

from __future__ import annotations

import sys
from array import array
from types import SimpleNamespace

import torch

import sglang
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from sglang.srt.mem_cache.unified_cache.components import ComponentType
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from sglang.srt.runtime_context import create_context, use_context
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

PAGE = 64


def admitted(params: SamplingParams, tokenizer: object, vocab_size: int) -> str | None:
    """What the tokenizer manager runs before a scheduler sees the request: None if admitted, else the refusal."""
    try:
        params.normalize(tokenizer)
        params.verify(vocab_size)
    except ValueError as exc:
        return str(exc)
    return None


def prebuilt_step(case: SimpleNamespace) -> tuple[list[str], str | None]:
    """Decode's PREBUILT step for ``case.requests`` (prompt length, sampling keywords): the refusals at admission,
    and what ``prepare_for_prebuilt`` raised (None if it returned)."""
    tokenizer = SimpleNamespace(eos_token_id=case.eos, additional_stop_token_ids=None)
    refused, reqs = [], []
    width = -(-max(n for n, _ in case.requests) // PAGE) * PAGE
    pool = ReqToTokenPool(size=8, max_context_len=width, device="cpu", enable_memory_saver=False)
    for i, (n, sampling) in enumerate(case.requests):
        params = SamplingParams(max_new_tokens=64, **sampling)
        why = admitted(params, tokenizer, case.vocab)
        if why is not None:
            refused.append(f"request {i} refused: {why}")
            continue
        req = Req(f"client-{i}", "", [(7 * i + t) % case.vocab for t in range(n)], params, eos_token_ids={case.eos})
        req.tokenizer = tokenizer  # the scheduler hands each request its tokenizer on receipt
        row = 3 + 4 * i  # decode's pre-allocated rows; the KV pages prefill wrote into them
        req.kv.req_pool_idx = row
        pool.req_to_token[row, :n] = torch.arange(n, dtype=torch.int32) + (i + 1) * width
        req.prefix_len, req.extend_end = 0, n
        req.output_ids = [case.first_token]  # prefill's first token, arrived with the KV
        reqs.append(req)
    if not reqs:
        return refused, None
    batch = ScheduleBatch(
        reqs=reqs,
        req_to_token_pool=pool,
        model_config=SimpleNamespace(vocab_size=case.vocab),
        device="cpu",
        return_logprob=False,
    )
    args = ServerArgs(model_path="dummy", device="cpu", disaggregation_mode="decode", page_size=PAGE)
    try:
        with use_context(create_context(args, role="scheduler")):
            batch.prepare_for_prebuilt()
    except Exception as exc:  # what the decode scheduler's event loop does not catch either
        return refused, f"{type(exc).__name__}: {exc}"
    return refused, None


def extend_step(case: SimpleNamespace) -> tuple[list[str], str | None]:
    """An aggregated server's prefill step for ``case.requests``: the refusals at admission, and what
    ``prepare_for_extend`` raised (None if it returned)."""
    tokenizer = SimpleNamespace(eos_token_id=case.eos, additional_stop_token_ids=None)
    args = ServerArgs(model_path="dummy", device="cpu", page_size=PAGE)
    with use_context(create_context(args, role="scheduler")):
        tokens = 64 * PAGE
        kv = MHATokenToKVPool(size=tokens, page_size=PAGE, dtype=torch.bfloat16, head_num=1, head_dim=8,
                              layer_num=1, device="cpu", enable_memory_saver=False)  # fmt: skip
        allocator = PagedTokenToKVPoolAllocator(tokens, PAGE, torch.bfloat16, "cpu", kvcache=kv, need_sort=False)
        pool = ReqToTokenPool(size=8, max_context_len=2048, device="cpu", enable_memory_saver=False)
        tree = UnifiedRadixCache(CacheInitParams(disable=False, req_to_token_pool=pool,
                                                 token_to_kv_pool_allocator=allocator, page_size=PAGE,
                                                 tree_components=(ComponentType.FULL,)))  # fmt: skip
        refused, reqs = [], []
        for i, (n, sampling) in enumerate(case.requests):
            params = SamplingParams(max_new_tokens=64, **sampling)
            why = admitted(params, tokenizer, case.vocab)
            if why is not None:
                refused.append(f"request {i} refused: {why}")
                continue
            prompt = array("q", [(7 * i + t) % case.vocab for t in range(n)])
            req = Req(f"client-{i}", "", prompt, params, eos_token_ids={case.eos})
            req.tokenizer = tokenizer
            req.init_next_round_input(tree)  # the radix match (nothing cached)
            req.extend_end = len(req.full_untruncated_fill_ids)  # admitted whole (PrefillAdder)
            reqs.append(req)
        if not reqs:
            return refused, None
        model_config = SimpleNamespace(vocab_size=case.vocab, is_encoder_decoder=False)
        batch = ScheduleBatch.init_new(reqs, pool, allocator, tree, model_config, False, SpeculativeAlgorithm.NONE)
        try:
            batch.prepare_for_extend()
        except Exception as exc:  # what the scheduler's event loop does not catch either
            return refused, f"{type(exc).__name__}: {exc}"
    return refused, None


CASES = (
    SimpleNamespace(
        name="DeepSeek-V3 decode server, a Qwen client's <|im_end|> beside a min_tokens request",
        step=prebuilt_step,
        vocab=129280,
        eos=1,
        first_token=4,
        requests=((900, {"min_new_tokens": 8}), (300, {"stop_token_ids": [151645]})),
    ),
    SimpleNamespace(
        name="DeepSeek-V3 aggregated server (no PD), the same two requests, prefill step",
        step=extend_step,
        vocab=129280,
        eos=1,
        requests=((900, {"min_new_tokens": 8}), (300, {"stop_token_ids": [151645]})),
    ),
    SimpleNamespace(
        name="DeepSeek-V3 aggregated server, the Qwen client alone asking for min_tokens=8",
        step=extend_step,
        vocab=129280,
        eos=1,
        requests=((300, {"min_new_tokens": 8, "stop_token_ids": [151645]}),),
    ),
    SimpleNamespace(
        name="shrunk: vocabulary 32, stop id 33",
        step=prebuilt_step,
        vocab=32,
        eos=2,
        first_token=0,
        requests=((1, {"min_new_tokens": 1}), (1, {"stop_token_ids": [33]})),
    ),
    SimpleNamespace(
        name="shrunk: vocabulary 32, stop id -1",
        step=prebuilt_step,
        vocab=32,
        eos=2,
        first_token=0,
        requests=((1, {"min_new_tokens": 1}), (1, {"stop_token_ids": [-1]})),
    ),
)


def main() -> int:
    crashed = []
    lines = []
    for case in CASES:
        refused, raised = case.step(case)
        outcome = raised if raised is not None else f"{case.step.__name__} returned"
        lines.append(f"  {case.name}: {'; '.join(refused) or 'every request admitted'}; {outcome}")
        if raised is not None:
            crashed.append(case.name)
    if crashed:
        print(
            f"F7 REPRODUCED on SGLang {sglang.__version__}: SamplingParams.verify admits stop_token_ids outside the "
            "vocabulary (it checks logit_bias, not stop_token_ids), and decode's prepare_for_prebuilt - through "
            "SamplingBatchInfo.from_schedule_batch and the min_new_tokens penalizer, which scatters every request's "
            "stop ids into an (n, vocab_size + 1) table once any request asks for min_new_tokens - raises, taking the "
            "decode scheduler down with every request on it (on a GPU: a device-side assert); an aggregated server's "
            "prepare_for_extend builds the same sampling info and raises alike. Cases:"
        )
        print("\n".join(lines))
        return 1
    print(f"F7 not reproduced on SGLang {sglang.__version__}: every case refused at admission or survived.")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
