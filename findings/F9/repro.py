"""F9: a PD request asking for more top logprobs than decode's metadata row holds takes the prefill server down.

Standalone: imports only SGLang, torch and the standard library. Runs on CPU; needs no GPU, model or peer.

A client of a prefill/decode deployment asks for the first token's top logprobs with ``top_logprobs_num`` (the native
API) or ``top_logprobs`` (the OpenAI API). Prefill sends the first token's logprobs to decode in its metadata row,
whose top-logprob buffers hold 128 entries (``MetadataBuffers(max_top_logprobs_num=128)``). SGLang states the rule
itself: ``# TODO: abort top_logprobs_num > 128 in PD``. Nothing does: the tokenizer manager admits the request, and
when its KV transfer completes prefill's ``MetadataBuffers.set_buf`` raises ``RuntimeError`` inside the prefill
scheduler's event loop. Nothing on that path catches it, so ``run_scheduler_process`` logs "Scheduler hit an
exception" and sends SIGQUIT to the server: the prefill server dies with every request in flight.

Each case runs, as the server does:
  1. admission: SGLang's own ``GenerateReqInput.normalize_batch_and_arguments`` and
     ``TokenizerManager._validate_one_request``, under the context a prefill server publishes;
  2. prefill's write of the request's metadata row: SGLang's own ``MetadataBuffers`` (built as the scheduler builds
     them) and ``set_buf`` on SGLang's own ``Req``, holding the first token and its top logprobs;
  3. decode's read of the row (``get_buf``), as ``_commit_transfer_to_req`` slices it.

Cases: (1) production-shaped - an OpenAI chat request to a Llama-3.1-8B-Instruct PD deployment with
``logprobs=true, top_logprobs=200``; (2) shrunk - ``top_logprobs_num=129``, one past the row. Controls: 20 and 128
top logprobs, which must be admitted and reach decode intact.

Exit 1 while a request past the row is admitted and prefill's write raises; 0 when every such request is refused at
admission (and the controls pass); 2 when a control fails (inconclusive).
"""

from __future__ import annotations

import sys
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

VOCAB = 128256  # Llama 3.1's vocabulary
CONTEXT_LEN = 8192
SLOTS = 64  # metadata rows
PROMPT = [128000] + [(7 * i + 11) % 30000 for i in range(899)]  # a 900-token prompt
FIRST_TOKEN = 9906
ROW, PREFILL_SLOT = 23, 23


def admit(top_logprobs_num: int) -> str | None:
    """The prefill server's admission of the request: None when admitted, else the error the client gets."""
    obj = GenerateReqInput(
        input_ids=list(PROMPT),
        sampling_params={"max_new_tokens": 256, "temperature": 0.7},
        return_logprob=True,
        top_logprobs_num=top_logprobs_num,
    )
    obj.normalize_batch_and_arguments()
    manager = TokenizerManager.__new__(TokenizerManager)  # what _validate_one_request reads of it
    manager.context_len = manager.max_req_input_len = CONTEXT_LEN
    manager.num_reserved_tokens = 0
    manager.allow_auto_truncate = False
    manager.validate_total_tokens = True
    manager.is_generation = True
    manager.model_config = SimpleNamespace(joint_head_config=None, pointer_head=None, vocab_size=VOCAB)
    args = ServerArgs(model_path="dummy", device="cpu", disaggregation_mode="prefill")
    with use_context(create_context(args, role="tokenizer")):
        try:
            manager._validate_one_request(obj, list(PROMPT))
        except ValueError as e:
            return str(e)
    return None


def write_and_read(top_logprobs_num: int) -> list[tuple[float, int]]:
    """Prefill's write of the request's row (``set_buf``) and decode's read of it: the first token's top logprobs
    decode commits. Raises what ``set_buf`` raises."""
    prefill = MetadataBuffers(SLOTS, hidden_size=4096, hidden_states_dtype=torch.bfloat16, max_sampling_mask_tokens=16)
    req = Req(
        "chatcmpl-f9",
        "",
        array("q", PROMPT),
        SamplingParams(max_new_tokens=256, temperature=0.7),
        return_logprob=True,
        top_logprobs_num=top_logprobs_num,
        bootstrap_host="10.0.0.1",
        bootstrap_port=8998,
        bootstrap_room=2**31 - 2,
    )
    values = [-0.0625 * (k + 1) for k in range(top_logprobs_num)]
    ids = [(FIRST_TOKEN + 97 * k) % VOCAB for k in range(top_logprobs_num)]
    req.output_ids = [FIRST_TOKEN]
    req.metadata_buffer_index = PREFILL_SLOT
    req.logprob.output_token_logprobs_val, req.logprob.output_token_logprobs_idx = [values[0]], [FIRST_TOKEN]
    req.logprob.output_top_logprobs_val, req.logprob.output_top_logprobs_idx = [values], [ids]
    prefill.set_buf(req)
    row = prefill.get_buf(PREFILL_SLOT)
    top_val, top_idx = row[4][:top_logprobs_num].tolist(), row[5][:top_logprobs_num].tolist()
    got = list(zip(top_val, top_idx, strict=True))
    want = list(zip(values, ids, strict=True))
    if got != want:
        raise AssertionError(f"decode reads top logprobs {got[:3]}..., prefill computed {want[:3]}...")
    return got


def case(name: str, top_logprobs_num: int) -> str:
    """``"refused: <why>"``, ``"ok"`` (admitted, row intact) or ``"raised: <error>"`` (admitted, prefill's write
    raised: the scheduler dies)."""
    refused = admit(top_logprobs_num)
    if refused is not None:
        return f"refused: {refused}"
    try:
        write_and_read(top_logprobs_num)
    except Exception as e:  # what prefill's event loop would see
        return f"raised: {type(e).__name__}: {e}"
    return "ok"


def main() -> int:
    import sglang

    controls = {"control, top_logprobs=20": 20, "control, top_logprobs=128 (the row)": 128}
    for name, k in controls.items():
        outcome = case(name, k)
        print(f"{name}: {outcome}")
        if outcome != "ok":
            print("INCONCLUSIVE: a request within the metadata row did not reach decode intact")
            return 2
    bad = []
    for name, k in {"(1) production: OpenAI chat, logprobs=true, top_logprobs=200": 200,
                    "(2) shrunk: top_logprobs_num=129": 129}.items():  # fmt: skip
        outcome = case(name, k)
        print(f"{name}: {outcome}")
        if not outcome.startswith("refused"):
            bad.append((name, outcome))
    if bad:
        print(
            f"\nF9 REPRODUCED on SGLang {sglang.__version__}: a request asking for more top logprobs than the "
            f"{SLOTS}-row PD metadata buffer's 128 per row is admitted by the tokenizer manager (no release bounds "
            "top_logprobs_num), and when its KV transfer completes prefill's MetadataBuffers.set_buf raises "
            f"({bad[0][1].removeprefix('raised: ')}). set_buf runs in the prefill scheduler's event loop "
            "(SchedulerDisaggregationPrefillMixin.send_kv_chunk on the last chunk), where nothing catches it: "
            "run_scheduler_process logs 'Scheduler hit an exception' and sends SIGQUIT, and the prefill server dies "
            "with every request in flight. One client request takes the deployment's prefill down. SGLang's own "
            "comment states the rule it breaks: 'TODO: abort top_logprobs_num > 128 in PD'."
        )
        return 1
    print(f"\nF9 not reproduced on SGLang {sglang.__version__}: every request past the row is refused at admission.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
