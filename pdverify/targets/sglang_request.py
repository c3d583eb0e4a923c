"""SGLang's own request class for the requests the ``sglang`` target's drivers hand to SGLang.

``release_request`` builds the installed release's ``Req`` through its own constructor (``Req(rid, text, prompt,
SamplingParams(...))``, the four leading parameters every release from 0.4.4.post2 to 0.5.23 has), the prompt in
the type the release's tokenizer hands over (a list, an int64 ``array`` from 0.5.13). ``sglang_request`` does so
for ``prepare_for_prebuilt`` with the prompt instrument over it (``layouts.guarded_class``): the layout then places
the position fields. Every scheduler driver (the decode queue and pre-allocation, the prefill exchange, bootstrap
and the function-level sender) builds its requests with it too, in every release: whatever the release's ``Req``
computes itself (``extend_len`` from 0.5.22), its KV bookkeeping (``kv_book``: a ``ReqKvInfo`` from 0.5.19, the
request itself before), its time stats and every default are the release's own.
"""

from __future__ import annotations

import copy
import functools
import inspect
import itertools
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

from pdverify.model.batch import Request
from pdverify.targets.layouts import guarded_class
from pdverify.targets.protocol import ServerRefuses

_RIDS = itertools.count()


def sglang_request(request: Request) -> Any:  # pragma: no cover - conformance venv
    """The installed release's own ``Req`` for ``request``, under the prompt guard (``guarded_class``)."""
    from sglang.srt.managers.schedule_batch import Req

    return release_request(
        f"pdverify-{next(_RIDS)}",
        request.origin_input_ids,
        request_class=guarded_class(Req),
        sampling=request.sampling.keywords(),
        custom_logit_processor=client_logit_processor() if request.sampling.custom_logit_processor else None,
    )


@functools.cache
def client_logit_processor() -> str:  # pragma: no cover - conformance venv
    """A client's custom logit processor as the API takes it: a ``CustomLogitProcessor`` subclass of the client's
    own (defined in its script, so serialized by value), through the release's own ``to_str``."""
    from sglang.srt.sampling.custom_logit_processor import CustomLogitProcessor

    class ClientProcessor(CustomLogitProcessor):  # type: ignore[misc,unused-ignore]  # Any without SGLang
        def __call__(self, logits: Any, custom_param_list: Any = None) -> Any:
            return logits

    text: str = ClientProcessor().to_str()
    return text


def kv_book(req: Any) -> Any:
    """Where a release's ``Req`` keeps its KV bookkeeping (``req_pool_idx``, ``cache_protected_len``, ...): its
    ``ReqKvInfo`` (``req.kv``) where that holds the row (0.5.19 on), else the request itself - also in 0.5.16-0.5.18,
    whose ``req.kv`` is None until allocation and then holds only the allocated and SWA-evicted lengths."""
    kv = getattr(req, "kv", None)
    return kv if kv is not None and hasattr(kv, "req_pool_idx") else req


def release_request(  # pragma: no cover - conformance venv
    rid: str,
    prompt: Sequence[int],
    *,
    max_new_tokens: int = 16,
    request_class: Any = None,
    req_pool_idx: int | None = None,
    scheduled: Mapping[str, Any] | None = None,
    sampling: Mapping[str, Any] | None = None,
    **fields: Any,
) -> Any:
    """The installed release's own ``Req`` (or ``request_class``, a subclass of it) built by its constructor: the
    prompt as the tokenizer hands it over (``_prompt``), ``max_new_tokens`` and ``sampling`` (the other
    ``SamplingParams`` keywords; one the release's class does not take is a request its server refuses:
    ``ServerRefuses``) its sampling parameters, ``fields`` (``bootstrap_room``, ``lora_id``, ...) passed to the
    constructor where it takes them, the release's defaults for the rest. Then, as the scheduler would have by the
    time a driver hands the request over: a field the release's constructor has no parameter for set on the request,
    the row ``req_pool_idx`` written where the release keeps it (``kv_book``), and the ``scheduled`` fields set."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    make = Req if request_class is None else request_class
    params = inspect.signature(Req.__init__).parameters
    taken = {k: v for k, v in fields.items() if k in params}
    unknown = sorted(set(sampling or {}) - set(inspect.signature(SamplingParams).parameters))
    if unknown:
        raise ServerRefuses(
            f"this release's SamplingParams takes no {', '.join(unknown)}: its server refuses the request"
        )
    # a copy: SGLang keeps what it is given (custom_params gets the request under "__req__"), the model must not
    sampling_params = SamplingParams(max_new_tokens=max_new_tokens, **copy.deepcopy(dict(sampling or {})))
    req = make(rid, "", _prompt(params, prompt), sampling_params, **taken)
    if req_pool_idx is not None:
        kv_book(req).req_pool_idx = req_pool_idx
    for name, value in {**{k: v for k, v in fields.items() if k not in taken}, **(scheduled or {})}.items():
        setattr(req, name, value)
    return req


def _prompt(params: Any, prompt: Sequence[int]) -> Any:
    """The prompt as the release's tokenizer hands it to ``Req``: an int64 ``array`` where the constructor is
    annotated to take one (0.5.13 on), else a list."""
    annotation = params["origin_input_ids"].annotation
    return array("q", prompt) if "array" in str(annotation) else list(prompt)
