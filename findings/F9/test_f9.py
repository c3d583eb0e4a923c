"""PD admission of a request asking for more top logprobs than the metadata row holds.

Prefill sends the first output token's top logprobs to decode in a metadata
row of PD_MAX_TOP_LOGPROBS_NUM (128) entries. A request asking for more used
to be admitted, and prefill's MetadataBuffers.set_buf raised inside the
scheduler's event loop, taking the prefill server down. The tokenizer manager
now refuses such a request on a PD server; a request within the row, and any
request on a server without disaggregation, is admitted as before.

Upstream location: test/registered/unit/managers/test_pd_top_logprobs_admission.py.
"""

import unittest
from array import array
from types import SimpleNamespace

import torch

from sglang.srt.disaggregation.utils import MetadataBuffers
from sglang.srt.managers.io_struct import GenerateReqInput
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.managers.tokenizer_manager import TokenizerManager
from sglang.srt.runtime_context import create_context, use_context
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=3, suite="base-a-test-cpu")

ROW = 128
PROMPT = list(range(1, 33))


def _manager():
    manager = TokenizerManager.__new__(TokenizerManager)
    manager.context_len = manager.max_req_input_len = 8192
    manager.num_reserved_tokens = 0
    manager.allow_auto_truncate = False
    manager.validate_total_tokens = True
    manager.is_generation = True
    manager.model_config = SimpleNamespace(
        joint_head_config=None, pointer_head=None, vocab_size=128256
    )
    return manager


def _admit(top_logprobs_num, mode="prefill", return_logprob=True):
    obj = GenerateReqInput(
        input_ids=list(PROMPT),
        sampling_params={"max_new_tokens": 16},
        return_logprob=return_logprob,
        top_logprobs_num=top_logprobs_num,
    )
    obj.normalize_batch_and_arguments()
    args = ServerArgs(model_path="dummy", device="cpu", disaggregation_mode=mode)
    with use_context(create_context(args, role="tokenizer")):
        _manager()._validate_one_request(obj, list(PROMPT))


class TestPDTopLogprobsAdmission(unittest.TestCase):
    def test_refuses_more_top_logprobs_than_the_row_on_pd(self):
        for mode in ("prefill", "decode"):
            for top in (ROW + 1, 200):
                with self.subTest(mode=mode, top=top):
                    with self.assertRaisesRegex(ValueError, "top_logprobs_num"):
                        _admit(top, mode=mode)

    def test_admits_within_the_row_and_without_pd(self):
        for top in (0, 1, 20, ROW):
            _admit(top)
        _admit(ROW + 1, mode="null")  # no metadata row without disaggregation
        _admit(ROW + 1, return_logprob=False)  # no logprobs asked: nothing sent

    def test_the_row_carries_what_admission_lets_through(self):
        buffers = MetadataBuffers(
            4, hidden_size=16, hidden_states_dtype=torch.bfloat16, max_sampling_mask_tokens=16
        )
        req = Req(
            "rid-0",
            "",
            array("q", PROMPT),
            SamplingParams(max_new_tokens=16),
            return_logprob=True,
            top_logprobs_num=ROW,
        )
        values = [-0.5 * (k + 1) for k in range(ROW)]
        req.output_ids = [7]
        req.metadata_buffer_index = 2
        req.logprob.output_token_logprobs_val = [values[0]]
        req.logprob.output_token_logprobs_idx = [7]
        req.logprob.output_top_logprobs_val = [values]
        req.logprob.output_top_logprobs_idx = [list(range(ROW))]
        buffers.set_buf(req)
        row = buffers.get_buf(2)
        self.assertEqual(row[4][:ROW].tolist(), values)
        self.assertEqual(row[5][:ROW].tolist(), list(range(ROW)))


if __name__ == "__main__":
    unittest.main()
