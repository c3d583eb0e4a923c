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

import inspect
import itertools
from array import array
from collections.abc import Sequence
from typing import Any

from pdverify.model.batch import Request
from pdverify.targets.layouts import guarded_class

_RIDS = itertools.count()


def sglang_request(request: Request) -> Any:  # pragma: no cover - conformance venv
    """The installed release's own ``Req`` for ``request``, under the prompt guard (``guarded_class``)."""
    from sglang.srt.managers.schedule_batch import Req

    return release_request(f"pdverify-{next(_RIDS)}", request.origin_input_ids, request_class=guarded_class(Req))


def owns_request_layout() -> bool:  # pragma: no cover - conformance venv
    """Whether the installed release's ``Req`` keeps its KV bookkeeping in a ``ReqKvInfo`` and computes
    ``extend_len`` over ``prefix_len`` and ``extend_end`` (0.5.22 on): there a field the layout places must agree with
    the value the request computes."""
    from sglang.srt.managers import schedule_batch

    return hasattr(schedule_batch, "ReqKvInfo") and isinstance(
        inspect.getattr_static(schedule_batch.Req, "extend_len", None), property
    )


def kv_book(req: Any) -> Any:
    """Where a release's ``Req`` keeps its KV bookkeeping (``req_pool_idx``, ``cache_protected_len``, ...): its
    ``ReqKvInfo`` (``req.kv``) where that holds the row (0.5.19 on), else the request itself - also in 0.5.16-0.5.18,
    whose ``req.kv`` is None until allocation and then holds only the allocated and SWA-evicted lengths."""
    kv = getattr(req, "kv", None)
    return kv if kv is not None and hasattr(kv, "req_pool_idx") else req


def release_request(  # pragma: no cover - conformance venv
    rid: str, prompt: Sequence[int], *, max_new_tokens: int = 16, request_class: Any = None, **fields: Any
) -> Any:
    """The installed release's own ``Req`` (or ``request_class``, a subclass of it) built by its constructor: the
    prompt as the tokenizer hands it over (``_prompt``), ``max_new_tokens`` its sampling parameters' one setting,
    ``fields`` (``bootstrap_room``, ``lora_id``, ...) passed to the constructor where it takes them - set on the
    request after it, as the scheduler does, where the release's constructor has no such parameter - the release's
    defaults for the rest."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    make = Req if request_class is None else request_class
    params = inspect.signature(Req.__init__).parameters
    taken = {k: v for k, v in fields.items() if k in params}
    req = make(rid, "", _prompt(params, prompt), SamplingParams(max_new_tokens=max_new_tokens), **taken)
    for name, value in fields.items():
        if name not in taken:
            setattr(req, name, value)
    return req


def _prompt(params: Any, prompt: Sequence[int]) -> Any:
    """The prompt as the release's tokenizer hands it to ``Req``: an int64 ``array`` where the constructor is
    annotated to take one (0.5.13 on), else a list."""
    annotation = params["origin_input_ids"].annotation
    return array("q", prompt) if "array" in str(annotation) else list(prompt)
