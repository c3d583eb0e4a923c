"""Requests and the decode-side schedule batch that ``prepare_for_prebuilt`` works on.

This is pdverify's own model, independent of any SGLang version's attribute names: the layout adapters
(``pdverify.targets.layouts``) turn it into the duck-typed objects a target's code reads.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from pdverify.validation import require_int


class ForwardMode(enum.IntEnum):
    """The forward modes ``prepare_for_prebuilt`` can see (values as in sglang's ``ForwardMode``)."""

    EXTEND = 1
    DECODE = 2
    PREBUILT = 7


@dataclass
class LogprobSettings:
    top_logprobs_num: int = 0
    token_ids_logprob: list[int] | None = None


@dataclass(frozen=True)
class SamplingSettings:
    """A request's sampling parameters as the client sent them (SGLang's ``SamplingParams`` keywords): what the
    ``SamplingBatchInfo`` that ``prepare_for_prebuilt`` builds reads, row by row. The defaults are SGLang's own;
    ``logit_bias`` maps a token id (as a string, as the API takes it) to its bias. ``min_new_tokens`` holds the stop
    tokens (``stop_token_ids``, the tokenizer's) back for that many tokens; ``sampling_seed`` None is a request that
    sent none (the server's default seed, read with deterministic inference on), a string one a client that sends its
    numbers as strings (the native API passes it through; 0.5.21 on refuses a non-integer); ``custom_logit_processor``
    says the client sent a processor of its own (a serialized ``CustomLogitProcessor``, run where the server enables
    custom logit processors), ``custom_params`` its per-request parameters."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[str, float] | None = None
    min_new_tokens: int = 0
    stop_token_ids: list[int] | None = None
    sampling_seed: int | str | None = None
    custom_params: dict[str, Any] | None = None
    custom_logit_processor: bool = False

    REQUEST_FIELDS = ("custom_logit_processor",)
    """Settings the client sends beside ``SamplingParams`` (a ``Req`` constructor keyword, not a sampling one)."""

    def keywords(self) -> dict[str, Any]:
        """The settings that differ from SGLang's defaults, as ``SamplingParams`` keywords."""
        default = SamplingSettings()
        return {
            k: v for k, v in vars(self).items() if v != getattr(default, k) and k not in SamplingSettings.REQUEST_FIELDS
        }


@dataclass
class Request:
    """One transferred request as decode holds it when the PREBUILT batch is built.

    ``prefix_len`` is decode's cached prefix in the row, ``extend_len`` the tokens written after it
    (``extend_end - prefix_len``); ``origin_input_ids`` is the prompt, ``output_ids`` the tokens generated
    so far. ``extra`` carries fields added through ``pdverify.strategies.fields`` (name -> value).
    """

    req_pool_idx: int
    prefix_len: int
    extend_len: int
    origin_input_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    retracted_stain: bool = False
    already_computed: int = 0
    cached_tokens: int = 0
    cached_tokens_device: int = 0
    is_retracted: bool = False
    pd_rebootstrap_in_progress: bool | None = False
    """``None``: the request object has no such attribute (upstream reads it with ``getattr(..., False)``)."""
    logprob: LogprobSettings = field(default_factory=LogprobSettings)
    multimodal_inputs: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)

    @property
    def seq_len(self) -> int:
        """``len(origin_input_ids) + max(0, len(output_ids) - 1)``: the KV decode holds."""
        return len(self.origin_input_ids) + max(0, len(self.output_ids) - 1)

    @property
    def extend_end(self) -> int:
        return self.prefix_len + self.extend_len


@dataclass
class PrebuiltBatch:
    """A PREBUILT batch before ``prepare_for_prebuilt``: its requests and the request-to-token table.

    ``req_to_token`` holds the table's rows as host lists (int32 values, as ``ReqToTokenPool`` stores them).
    The decode server's configuration the sampling info reads: ``--enable-custom-logit-processor``,
    ``--enable-deterministic-inference``, and its tokenizer's end-of-sequence token (``eos_token_id``, None for a
    tokenizer that has none), which ``min_new_tokens`` holds back. ``skip_tokenizer_init`` is
    ``--skip-tokenizer-init``: the server loads no tokenizer (its scheduler hands each request None), so
    ``eos_token_id`` must be None with it. ``model_eos_token_ids`` are the model configuration's end-of-sequence
    ids (``ModelConfig.hf_eos_token_id``, from the model's config and generation config; e.g. Llama-3.1-Instruct's
    three), which the scheduler gives each request as its ``eos_token_ids``: finish detection ends a request on any
    of them, with or without a tokenizer. ``additional_stop_token_ids`` are the tokenizer's own stop tokens besides
    its eos (``attach_additional_stop_token_ids``: Llama 3's ``<|eom_id|>``, which tool calls end on; None - here
    empty - for most tokenizers), which finish detection and the ``min_new_tokens`` penalizer read off the tokenizer:
    a server without a tokenizer has none.
    """

    reqs: list[Request]
    req_to_token: list[list[int]]
    return_logprob: bool = False
    vocab_size: int = 32
    enable_custom_logit_processor: bool = False
    enable_deterministic_inference: bool = False
    eos_token_id: int | None = None
    skip_tokenizer_init: bool = False
    model_eos_token_ids: tuple[int, ...] = ()
    additional_stop_token_ids: tuple[int, ...] = ()

    def server_flags(self) -> dict[str, bool]:
        """The server flags set (``ServerArgs`` field -> True): what a release without the flag refuses."""
        flags = {
            "enable_custom_logit_processor": self.enable_custom_logit_processor,
            "enable_deterministic_inference": self.enable_deterministic_inference,
            "skip_tokenizer_init": self.skip_tokenizer_init,
        }
        return {k: v for k, v in flags.items() if v}

    @property
    def width(self) -> int:
        return len(self.req_to_token[0]) if self.req_to_token else 0


@dataclass(frozen=True)
class RequestAfter:
    """The request fields ``prepare_for_prebuilt`` may write, read back after the call."""

    cached_tokens: int
    cached_tokens_device: int
    already_computed: int
    is_retracted: bool
    pd_rebootstrap_in_progress: bool
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class PrebuiltOutcome:
    """Everything a target's ``prepare_for_prebuilt`` produced, mapped back to pdverify's model.

    ``fields`` holds the batch attributes after the call (tensors as they are, on their device);
    ``untouched`` lists the batch attributes the call did not set. ``prompt_reads`` records every access to
    the prompt (``get_fill_ids``, ``fill_ids``, prompt elements); ``sampling_info_calls`` the arguments of
    each ``from_schedule_batch`` call.
    """

    fields: dict[str, Any]
    untouched: set[str]
    reqs_after: list[RequestAfter]
    sampling_info_calls: list[tuple[Any, Any]]
    sampling_info_returned: Any
    prompt_reads: list[str]
    req_to_token_before: Any
    req_to_token_after: Any
    batch_object: Any = None
    ledger: Any = None
    """The ``TransferLedger`` of the target call, when measured."""
    request_objects: list[Any] = field(default_factory=list)
    """The request objects handed to the target, in batch order (``batch_object.reqs`` as it was before the call)."""


def validate_batch(batch: PrebuiltBatch) -> None:
    """The contract of a batch ``prepare_for_prebuilt`` is defined on; ``ValueError`` names request and field."""
    if batch.skip_tokenizer_init and batch.eos_token_id is not None:
        raise ValueError(
            f"eos_token_id={batch.eos_token_id} with skip_tokenizer_init: a server started with --skip-tokenizer-init "
            "has no tokenizer, so no tokenizer end-of-sequence token (eos_token_id must be None)"
        )
    if batch.skip_tokenizer_init and batch.additional_stop_token_ids:
        raise ValueError(
            f"additional_stop_token_ids={batch.additional_stop_token_ids} with skip_tokenizer_init: a server started "
            "with --skip-tokenizer-init has no tokenizer, so no tokenizer stop tokens (they must be empty)"
        )
    for name in ("model_eos_token_ids", "additional_stop_token_ids"):
        for token in getattr(batch, name):
            require_int(name, token, minimum=0)
            if token >= batch.vocab_size:
                raise ValueError(f"{name}: {token} is not a token id of the vocabulary (vocab_size={batch.vocab_size})")
    rows = batch.req_to_token
    width = len(rows[0]) if rows else 0
    for r, row in enumerate(rows):
        if len(row) != width:
            raise ValueError(f"req_to_token row {r} has width {len(row)}, expected {width}")
    for i, req in enumerate(batch.reqs):
        where = f"request {i}"
        require_int(f"{where}: prefix_len", req.prefix_len, minimum=0)
        require_int(f"{where}: extend_len", req.extend_len, minimum=0)
        require_int(f"{where}: req_pool_idx", req.req_pool_idx, minimum=0)
        if req.req_pool_idx >= len(rows):
            raise ValueError(f"{where}: req_pool_idx={req.req_pool_idx} out of range (table has {len(rows)} rows)")
        if req.extend_end > width:
            raise ValueError(f"{where}: prefix_len + extend_len = {req.extend_end} exceeds the row width {width}")
        if not req.output_ids and req.seq_len - req.prefix_len != req.extend_len:
            raise ValueError(
                f"{where}: with empty output_ids, seq_len - prefix_len ({req.seq_len} - {req.prefix_len}) "
                f"must equal extend_len ({req.extend_len})"
            )
        if batch.return_logprob and req.logprob is None:
            raise ValueError(f"{where}: logprob settings are required when return_logprob is set")
