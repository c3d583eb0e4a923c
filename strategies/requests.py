"""Strategies for transferred requests and PREBUILT batches.

Slot values are distinct across the whole request-to-token table (every row comes from one paged allocator
with a shuffled free list), so a slice taken at the wrong offset or from the wrong row cannot hide.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from pdverify.model.batch import LogprobSettings, PrebuiltBatch, Request, SamplingSettings
from pdverify.model.layout import token_locations
from pdverify.properties.releases import DOMAIN
from pdverify.strategies._choices import Choices
from pdverify.strategies._validate import check_int
from pdverify.strategies.fields import draw_fields
from pdverify.strategies.layouts import page_size_list


def requests(
    req_pool_idx: int,
    *,
    max_prompt: int = 64,
    max_output: int = 4,
    page_size: int = 1,
) -> st.SearchStrategy[Request]:
    """One request at row ``req_pool_idx``: a prompt of 1..``max_prompt`` tokens (SGLang refuses an empty one; none
    only where ``max_prompt`` is 0), 0..``max_output`` output tokens, a decode prefix anywhere in ``0..extend_end``
    (page-aligned half of the time), extend length ``extend_end - prefix`` (0 included), where ``extend_end`` is the
    KV decode committed (one more during a PD rebootstrap); stained or not, ``already_computed`` above and below the
    prefix, logprob settings, multimodal inputs, sampling parameters (``sampling_settings``), the rebootstrap flag
    set, clear or absent, and every registered extra field."""
    check_int("req_pool_idx", req_pool_idx)
    check_int("max_prompt", max_prompt)
    check_int("max_output", max_output)
    check_int("page_size", page_size, minimum=1)
    return _requests(req_pool_idx=req_pool_idx, max_prompt=max_prompt, max_output=max_output, page_size=page_size)


@st.composite
def _requests(draw: st.DrawFn, /, req_pool_idx: int, **kw: Any) -> Request:
    return draw_request(Choices(draw), req_pool_idx, **kw)


def draw_request(
    c: Choices,
    req_pool_idx: int,
    *,
    max_prompt: int = 64,
    max_output: int = 4,
    page_size: int = 1,
) -> Request:
    """``requests``' example, drawn from ``c`` (arguments already validated)."""
    # Four choices per request: the lengths and the prefix (what every output depends on) are drawn and shrink
    # on their own; the bookkeeping, flags, logprob and multimodal settings come from one ``detail`` seed
    # (``request_details``), which shrinks to 0: every switch off and every counter 0.
    n_prompt = c.integer(min(1, max_prompt), max_prompt)  # SGLang refuses an empty prompt (io_struct)
    n_output = c.integer(0, max_output)
    detail = c.seed()
    rng = random.Random(detail)
    rebootstrap = n_output > 0 and detail != 0 and rng.random() < 0.25 and DOMAIN.rebootstrap
    seq_len = n_prompt + max(0, n_output - 1)
    extend_end = seq_len + (1 if rebootstrap else 0)
    if not DOMAIN.decode_prefix:  # a release before decode-side prefixes: decode's prefix is always 0
        prefix = 0
    elif detail == 0 or rng.random() < 0.5:
        prefix = c.integer(0, extend_end // page_size) * page_size
    else:
        prefix = c.integer(0, extend_end)
    tokens = [(detail + 7919 * i) % 50_001 for i in range(n_prompt + n_output)]
    return Request(
        req_pool_idx=req_pool_idx,
        prefix_len=prefix,
        extend_len=extend_end - prefix,
        origin_input_ids=tokens[:n_prompt],
        output_ids=tokens[n_prompt:],
        extra=draw_fields(c),
        **request_details(
            detail, rng, n_prompt=n_prompt, prefix=prefix, extend_end=extend_end, rebootstrap=rebootstrap
        ),
    )


def request_details(
    detail: int, rng: random.Random, *, n_prompt: int, prefix: int, extend_end: int, rebootstrap: bool
) -> dict[str, Any]:
    """A request's bookkeeping, flags, logprob and multimodal settings from the seed ``detail`` (``rng`` is
    seeded with it): 0 gives the plain request (nothing stained, retracted or cached, no logprob token ids, no
    multimodal inputs); any other seed draws each setting, the counters biased to the boundaries around the
    prefix where the clamp ``max(0, prefix - already_computed)`` turns."""
    if detail == 0:
        return {"pd_rebootstrap_in_progress": False}

    def near(*anchors: int, high: int) -> int:
        value = rng.choice([*anchors, rng.randint(0, max(0, high))])
        return min(max(0, value), max(0, high))

    cached = near(0, prefix, n_prompt, high=n_prompt)
    stained = rng.random() < 0.5
    computed = near(0, prefix - 1, prefix, prefix + 1, extend_end, high=extend_end + 4)
    if not (stained or DOMAIN.seeded_computed):  # before #25973 nothing seeds it: 0 at prepare_for_prebuilt
        computed = 0
    return {
        "retracted_stain": stained,
        "already_computed": computed,
        "cached_tokens": cached,
        "cached_tokens_device": near(0, cached, high=cached),
        "is_retracted": rng.random() < 0.5,
        "pd_rebootstrap_in_progress": True if rebootstrap else rng.choice([False, True, None]),
        "logprob": LogprobSettings(
            rng.randint(0, 5), None if rng.random() < 0.5 else [rng.randint(0, 100) for _ in range(rng.randint(0, 3))]
        ),
        "multimodal_inputs": None if rng.random() < 0.5 else {"mm": rng.randint(0, 9)},
        "sampling": sampling_settings(rng),
    }


SEEDS: tuple[Callable[[random.Random], int], ...] = (
    lambda rng: rng.choice([0, 42]),
    lambda rng: rng.randint(-(2**31), 2**31 - 1),
    lambda rng: rng.randint(-(2**63), 2**63 - 1),
    lambda rng: rng.choice([2**63, -(2**63) - 1, 10**20]),
)
"""How a client's sampling seed is drawn: small, 32-bit, 64-bit, or (one in eight) past 64 bits (the API takes any
JSON integer; the release's own ``verify`` decides what it refuses)."""


def sampling_settings(rng: random.Random, vocab_size: int = 32) -> SamplingSettings:
    """Sampling parameters a client may send, half of the time SGLang's defaults: greedy (temperature 0) and
    sampled temperatures, top-p, top-k (all, greedy 1 or a cut), min-p, the three penalties (each on or off), a
    logit bias of 1-3 tokens below ``vocab_size``, ``min_new_tokens`` with or without stop tokens of its own, a
    sampling seed (or none sent; from deterministic inference on, 0.5.3; one in eight sent as a string) and a custom
    logit processor with or without parameters. One stop-token list in eight also names an id outside
    ``[0, vocab_size)`` (``vocab_size`` itself, one past it, a far one or -1), which no release's ``verify`` checks.
    The ``sglang`` target asks the release's own ``verify`` and refuses what it refuses (a seed on a release that
    takes none included)."""
    if rng.random() < 0.5:
        return SamplingSettings()

    def either(default: float, low: float, high: float) -> float:
        return default if rng.random() < 0.5 else round(rng.uniform(low, high), 3)

    settings = SamplingSettings(
        temperature=rng.choice([0.0, 0.7, 1.0, round(rng.uniform(0.01, 2.0), 3)]),
        top_p=either(1.0, 0.05, 1.0),
        top_k=rng.choice([-1, 1, rng.randint(2, vocab_size)]),
        min_p=either(0.0, 0.0, 1.0),
        frequency_penalty=either(0.0, -2.0, 2.0),
        presence_penalty=either(0.0, -2.0, 2.0),
        repetition_penalty=either(1.0, 0.05, 2.0),
        logit_bias=None
        if rng.random() < 0.5
        else {str(rng.randrange(vocab_size)): round(rng.uniform(-100, 100), 2) for _ in range(rng.randint(1, 3))},
        min_new_tokens=0 if rng.random() < 0.5 else rng.randint(1, 16),
        stop_token_ids=None if rng.random() < 0.5 else [rng.randrange(vocab_size) for _ in range(rng.randint(1, 3))],
        sampling_seed=None
        if rng.random() < 0.5 or not DOMAIN.has("deterministic_inference")
        else rng.choices(SEEDS, weights=(3, 2, 2, 1))[0](rng),
        custom_logit_processor=(processor := rng.random() < 0.5),
        custom_params=None if not processor or rng.random() < 0.5 else {"token_ids": [rng.randrange(vocab_size)]},
    )
    # drawn last, so that the draws above stay what they were: one seed in eight as a client that stringifies its
    # numbers sends it (the native API passes sampling_params through untyped; 0.5.21's verify refuses a non-integer)
    if settings.sampling_seed is not None and rng.random() < 0.125:
        settings = replace(settings, sampling_seed=str(settings.sampling_seed))
    # drawn after that, for the same reason: one stop list in eight also names an id outside the vocabulary - the
    # padding id ``vocab_size`` itself, one past it, another model's id (Qwen's <|im_end|> sent to a smaller
    # vocabulary) or a negative one. The API takes any integer list; SGLang's own verify decides what it refuses.
    if settings.stop_token_ids is not None and rng.random() < 0.125:
        stray = rng.choice([vocab_size, vocab_size + 1, rng.randint(vocab_size + 2, 200_000), -1])
        settings = replace(settings, stop_token_ids=[*settings.stop_token_ids, stray])
    return settings


def batches(
    *,
    min_requests: int = 0,
    max_requests: int = 6,
    max_prompt: int = 64,
    spare_rows: int = 2,
) -> st.SearchStrategy[PrebuiltBatch]:
    """A PREBUILT batch of ``min_requests..max_requests`` requests on distinct, shuffled rows of an int32
    request-to-token table (plus ``spare_rows`` unused rows); rows are paged with distinct slot values
    across the table; ``return_logprob`` on or off; the decode server's sampling configuration (custom logit
    processors, deterministic inference, its tokenizer's eos or none, one server in eight of all - a quarter of
    the laid-out ones - started with ``--skip-tokenizer-init``, so no tokenizer at all - the tokenizer's additional
    stop token, one tokenizer in four, and its model configuration's eos ids: none, the tokenizer's, or ids of their
    own). With ``min_requests`` 0 an
    empty batch is a rarity (one in 16): decode never prepares one, and the simplest example is a batch of one
    request."""
    check_int("min_requests", min_requests)
    check_int("max_requests", max_requests)
    check_int("max_prompt", max_prompt)
    check_int("spare_rows", spare_rows)
    if min_requests > max_requests:
        from hypothesis.errors import InvalidArgument

        raise InvalidArgument(f"min_requests={min_requests} must be <= max_requests={max_requests}")
    return _batches(min_requests=min_requests, max_requests=max_requests, max_prompt=max_prompt, spare_rows=spare_rows)


BATCH_PAGE_SIZES = page_size_list(16)


@st.composite
def _batches(
    draw: st.DrawFn,
    *,
    min_requests: int = 0,
    max_requests: int = 6,
    max_prompt: int = 64,
    spare_rows: int = 2,
) -> PrebuiltBatch:
    return draw_batch(
        Choices(draw),
        min_requests=min_requests,
        max_requests=max_requests,
        max_prompt=max_prompt,
        spare_rows=spare_rows,
    )


def draw_batch(c: Choices, *, min_requests: int, max_requests: int, max_prompt: int, spare_rows: int) -> PrebuiltBatch:
    """``batches``' example, drawn from ``c`` (arguments already validated)."""
    ps = c.pick(BATCH_PAGE_SIZES)
    # decode prepares a PREBUILT batch only with requests in it: an empty batch is drawn as a rarity (one in 16,
    # it shrinks to not empty) so that the simplest example is one request, not nothing to check
    empty = min_requests == 0 and c.integer(0, 15) == 15
    n = 0 if empty else c.integer(max(1, min_requests) if max_requests else 0, max_requests)
    rows = n + spare_rows
    # one seed places the batch: which rows the requests sit on, the spare width, the physical page order
    # and return_logprob (seed 0: rows and pages in order, no spare width, no logprob)
    layout = c.seed()
    rng = random.Random(layout)
    pool_of = list(range(rows))
    if layout:
        rng.shuffle(pool_of)
    reqs = [draw_request(c, pool_of[i], max_prompt=max_prompt, page_size=ps) for i in range(n)]
    width = max([r.extend_end for r in reqs], default=0) + (rng.randint(0, 3) if layout else 0)
    per_row = -(-width // ps) if width else 0
    order = list(range(1, rows * per_row + 1))
    if layout:
        rng.shuffle(order)
    table = [token_locations(order[r * per_row : (r + 1) * per_row], width, ps) for r in range(rows)]
    # the server's sampling configuration, from the same seed (seed 0: every flag off, a tokenizer without eos)
    logprob = bool(layout) and rng.random() < 0.5
    custom = bool(layout) and rng.random() < 0.5
    deterministic = bool(layout) and rng.random() < 0.5 and DOMAIN.has("deterministic_inference")
    eos = None if not layout or rng.random() < 0.25 else rng.randrange(32)
    # drawn last, so that the draws above stay what they were: one server in four loads no tokenizer (and so has
    # no eos); SGLang's own validation decides which requests such a server takes
    skip_tokenizer = bool(layout) and rng.random() < 0.25
    # the model configuration's eos ids (drawn after the rest, for the same reason): none a third of the time, the
    # tokenizer's own a third, else one to three ids of their own with the tokenizer's among them half the time
    # (Llama-3.1-Instruct: the tokenizer's <|eot_id|> and two more)
    model_eos: set[int] = set()
    if layout and (r := rng.random()) >= 1 / 3:
        if r < 2 / 3 and eos is not None:
            model_eos = {eos}
        else:
            model_eos = {rng.randrange(32) for _ in range(rng.randint(1, 3))}
            model_eos |= {eos} if eos is not None and rng.random() < 0.5 else set()
    # the tokenizer's own stop token besides its eos (drawn after the rest, for the same reason): one tokenizer in
    # four has one (Llama 3's <|eom_id|>, which attach_additional_stop_token_ids finds in its added vocabulary)
    additional = (rng.randrange(32),) if layout and not skip_tokenizer and rng.random() < 0.25 else ()
    return PrebuiltBatch(
        reqs,
        table,
        return_logprob=logprob,
        enable_custom_logit_processor=custom,
        enable_deterministic_inference=deterministic,
        eos_token_id=None if skip_tokenizer else eos,
        skip_tokenizer_init=skip_tokenizer,
        model_eos_token_ids=tuple(sorted(model_eos)),
        additional_stop_token_ids=additional,
    )
