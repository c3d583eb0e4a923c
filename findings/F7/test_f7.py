"""SamplingParams.verify and stop token ids outside the vocabulary.

`verify` range-checks `logit_bias` keys against the model's vocabulary but
not `stop_token_ids`. Once any request of a batch asks for `min_new_tokens`,
`SamplingBatchInfo.from_schedule_batch` prepares the min-new-tokens penalizer,
which scatters every request's stop ids into an `(n, vocab_size + 1)` table:
an id past the vocabulary (or a negative one) is an out-of-bounds index that
takes the scheduler down. Decode's `prepare_for_prebuilt` builds that sampling
info for every PREBUILT batch.

Upstream location: test/registered/unit/sampling/test_sampling_params.py.
"""

import unittest
from types import SimpleNamespace

import torch

from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
from sglang.srt.runtime_context import create_context, use_context
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=3, suite="base-a-test-cpu")

VOCAB_SIZE = 32
EOS = 2


class TestStopTokenIdsVocabRange(unittest.TestCase):
    def test_out_of_vocab_stop_token_ids_are_refused(self):
        for token_id in (VOCAB_SIZE, VOCAB_SIZE + 1, 151645, -1):
            with self.subTest(token_id=token_id):
                params = SamplingParams(stop_token_ids=[5, token_id])
                with self.assertRaisesRegex(ValueError, "stop_token_ids"):
                    params.verify(VOCAB_SIZE)

    def test_in_vocab_stop_token_ids_are_accepted(self):
        SamplingParams(stop_token_ids=[0, VOCAB_SIZE - 1], min_new_tokens=1).verify(
            VOCAB_SIZE
        )

    def test_prebuilt_batch_of_admitted_requests_survives(self):
        """Decode's PREBUILT step on every request verify admits: a request
        asking for min_new_tokens beside others with stop ids at and past the
        vocabulary's edge."""
        tokenizer = SimpleNamespace(eos_token_id=EOS, additional_stop_token_ids=None)
        candidates = [
            {"min_new_tokens": 4},
            {"stop_token_ids": [VOCAB_SIZE - 1]},
            {"stop_token_ids": [VOCAB_SIZE]},
            {"stop_token_ids": [VOCAB_SIZE + 1]},
            {"stop_token_ids": [-1]},
        ]
        pool = ReqToTokenPool(
            size=8, max_context_len=16, device="cpu", enable_memory_saver=False
        )
        reqs = []
        for i, sampling in enumerate(candidates):
            params = SamplingParams(max_new_tokens=16, **sampling)
            params.normalize(tokenizer)
            try:
                params.verify(VOCAB_SIZE)
            except ValueError:
                continue  # refused at admission: never reaches a scheduler
            req = Req(f"r{i}", "", [1, 2, 3], params, eos_token_ids={EOS})
            req.tokenizer = tokenizer
            req.kv.req_pool_idx = i
            pool.req_to_token[i, :3] = torch.arange(3, dtype=torch.int32) + 4 * i
            req.prefix_len, req.extend_end = 0, 3
            req.output_ids = [0]
            reqs.append(req)
        batch = ScheduleBatch(
            reqs=reqs,
            req_to_token_pool=pool,
            model_config=SimpleNamespace(vocab_size=VOCAB_SIZE),
            device="cpu",
            return_logprob=False,
        )
        server_args = ServerArgs(
            model_path="dummy", device="cpu", disaggregation_mode="decode"
        )
        with use_context(create_context(server_args, role="scheduler")):
            batch.prepare_for_prebuilt()

        orchestrator = batch.sampling_info.penalizer_orchestrator
        self.assertTrue(orchestrator.is_required)
        self.assertEqual(batch.seq_lens.tolist(), [3] * len(reqs))
        for row, req in enumerate(reqs):
            stops = req.sampling_params.stop_token_ids or set()
            penalizer = next(
                p
                for p in orchestrator.penalizers.values()
                if hasattr(p, "stop_token_penalties")
            )
            held = penalizer.stop_token_penalties[row].isinf().nonzero().flatten()
            self.assertEqual(set(held.tolist()), set(stops) | {EOS})


if __name__ == "__main__":
    unittest.main()
