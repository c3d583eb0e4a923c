"""Bootstrap rooms of the parallel samples of a PD generate request.

Prefill and decode pair a request's KV transfer by its bootstrap room. A
request asking for n > 1 parallel samples is expanded by the tokenizer manager
into n requests per prompt; they used to be sent as copies of the prompt's
first expanded request, so every sample carried one room and all but one of
their transfers could never pair. Each sample now carries the room of its own
expanded request: room + k for one room, room[i] + s for a room per prompt,
and its own room where the router named one per sample.

Upstream location: test/registered/unit/managers/test_pd_parallel_sample_rooms.py.
"""

import asyncio
import unittest
from types import SimpleNamespace

import sglang.srt.managers.tokenizer_manager as tm
from sglang.srt.managers.io_struct import GenerateReqInput
from sglang.srt.runtime_context import create_context, use_context
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=5, suite="base-a-test-cpu")

HOST, PORT = "10.0.0.1", 8998


class _Socket:
    def __init__(self):
        self.sent = []

    def send_pyobj(self, obj, *args, **kwargs):
        self.sent.extend(getattr(obj, "batch", None) or [obj])


class _NoFeatures:
    async def prepare_for_dispatch_async(self, *args, **kwargs):
        return []

    def prepare_for_dispatch(self, *args, **kwargs):
        return []

    def cancel_for_dispatch(self, *args, **kwargs):
        return None


def _manager(server_args, socket):
    manager = tm.TokenizerManager.__new__(tm.TokenizerManager)
    model_config = SimpleNamespace(
        joint_head_config=None,
        pointer_head=None,
        vocab_size=128256,
        is_matryoshka=False,
        context_len=8192,
        is_multimodal=False,
        is_generation=True,
        hf_config=SimpleNamespace(architectures=["LlamaForCausalLM"]),
    )
    fields = dict(
        server_args=server_args,
        model_config=model_config,
        context_len=8192,
        max_req_input_len=8192,
        num_reserved_tokens=0,
        reserve_input_token_num=0,
        allow_auto_truncate=False,
        validate_total_tokens=True,
        is_generation=True,
        is_image_gen=False,
        disaggregation_mode=server_args.disaggregation_mode,
        preferred_sampling_params=None,
        sampling_params_class=SamplingParams,
        tokenizer_worker_num=1,
        tokenizer_ipc_name=None,
        tokenizer=None,
        processor=None,
        mm_processor=None,
        enable_trace=False,
        enable_metrics=False,
        log_requests=False,
        enable_priority_scheduling=False,
        enable_lora=False,
        lora_registry=None,
        rid_to_state={},
        encoder_dispatch_ready={},
        logical_rid_to_child_rids={},
        child_rid_to_logical_rid={},
        model_update_lock=tm.RWLock(),
        is_pause=False,
        is_pause_cond=asyncio.Condition(),
        send_to_scheduler=socket,
        request_logger=SimpleNamespace(log_received_request=lambda *a, **k: None),
        cuda_vmm_feature_transport=_NoFeatures(),
        positional_embeds_transport=_NoFeatures(),
    )
    for name, value in fields.items():
        setattr(manager, name, value)

    async def wait_one_response(obj, *args, **kwargs):
        yield {"text": "", "meta_info": {"id": obj.rid, "finish_reason": None}}

    manager._wait_one_response = wait_one_response
    manager.auto_create_handle_loop = lambda: None
    return manager


class TestPDParallelSampleRooms(unittest.TestCase):
    def setUp(self):
        self.server_args = ServerArgs(
            model_path="dummy", device="cpu", disaggregation_mode="prefill"
        )

    def _sample_rooms(self, **body):
        socket = _Socket()
        manager = _manager(self.server_args, socket)

        async def run():
            async for _ in tm.TokenizerManager.generate_request(
                manager, GenerateReqInput(**body), None
            ):
                pass

        with use_context(create_context(self.server_args, role="tokenizer")):
            asyncio.run(run())
        return [
            (list(t.input_ids), t.bootstrap_room)
            for t in socket.sent
            if t.sampling_params.max_new_tokens > 0
        ]

    def test_one_room_gives_each_sample_its_own(self):
        sent = self._sample_rooms(
            input_ids=[128000, 9906],
            sampling_params={"n": 4, "max_new_tokens": 8},
            bootstrap_host=HOST,
            bootstrap_port=PORT,
            bootstrap_room=7428370592110385201,
        )
        rooms = [room for _, room in sent]
        self.assertEqual(len(rooms), 4)
        self.assertEqual(len(set(rooms)), 4, rooms)
        self.assertEqual(rooms[0], 7428370592110385201)

    def test_a_room_per_prompt_gives_each_sample_its_own(self):
        sent = self._sample_rooms(
            input_ids=[[791, 1217], [9906, 11]],
            sampling_params={"n": 2, "max_new_tokens": 8},
            bootstrap_host=[HOST, HOST],
            bootstrap_port=[PORT, PORT],
            bootstrap_room=[4242, 2**31 - 2],
        )
        self.assertEqual(
            sent,
            [
                ([791, 1217], 4242),
                ([791, 1217], 4243),
                ([9906, 11], 2**31 - 2),
                ([9906, 11], 2**31 - 1),
            ],
        )

    def test_a_room_per_sample_is_kept(self):
        rooms = [7428370592110385201, 4242, 2**31 - 2]
        sent = self._sample_rooms(
            input_ids=[128000, 9906],
            sampling_params={"n": 3, "max_new_tokens": 8},
            bootstrap_host=[HOST] * 3,
            bootstrap_port=[PORT] * 3,
            bootstrap_room=rooms,
        )
        self.assertEqual([room for _, room in sent], rooms)

    def test_without_parallel_sampling_the_rooms_are_the_routers(self):
        sent = self._sample_rooms(
            input_ids=[[791, 1217], [9906, 11]],
            sampling_params={"max_new_tokens": 8},
            bootstrap_host=[HOST, HOST],
            bootstrap_port=[PORT, PORT],
            bootstrap_room=[4242, 0],
        )
        self.assertEqual(sent, [([791, 1217], 4242), ([9906, 11], 0)])


if __name__ == "__main__":
    unittest.main()
