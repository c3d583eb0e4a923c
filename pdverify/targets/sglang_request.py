"""SGLang's own request class for the requests the ``sglang`` target's drivers hand to SGLang.

``sglang_request(model_request)`` (``prepare_for_prebuilt``, every release) builds the installed release's ``Req``
through its own constructor (``Req(rid, text, prompt, SamplingParams(...))``, the four leading parameters every
release from 0.4.4.post2 to 0.5.23 has), with the prompt instrument over it (``layouts.guarded_class``). The layout
then places the position fields; whatever the release's ``Req`` computes itself (``extend_len`` from 0.5.22, its
``ReqKvInfo``, its ``ReqLogprob``, every default the batch preparation may read) is the release's own.
``release_request`` builds one for the scheduler drivers where the release's ``Req`` has the layout they fill
(``owns_request_layout``: 0.5.22 on).
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
    """Whether the installed release's ``Req`` is of the layout the scheduler drivers fill field by field: its KV
    bookkeeping in a ``ReqKvInfo`` and ``extend_len`` a property over ``prefix_len`` and ``extend_end`` (0.5.22 on).
    Before, the drivers keep a namespace of the fields each era reads."""
    from sglang.srt.managers import schedule_batch

    return hasattr(schedule_batch, "ReqKvInfo") and isinstance(
        inspect.getattr_static(schedule_batch.Req, "extend_len", None), property
    )


def release_request(  # pragma: no cover - conformance venv
    rid: str, prompt: Sequence[int], *, max_new_tokens: int = 16, request_class: Any = None, **fields: Any
) -> Any:
    """The installed release's own ``Req`` (or ``request_class``, a subclass of it) built by its constructor: the
    prompt an int64 array (as the tokenizer hands it over), ``max_new_tokens`` its sampling parameters' one setting,
    ``fields`` (``bootstrap_room``, ``lora_id``, ...) passed to the constructor, the release's defaults for the rest."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    make = Req if request_class is None else request_class
    return make(rid, "", array("q", prompt), SamplingParams(max_new_tokens=max_new_tokens), **fields)
