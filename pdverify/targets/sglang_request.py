"""SGLang's own request class for the requests ``prepare_for_prebuilt`` reads on the ``sglang`` target.

``sglang_request(model_request)`` builds the installed release's ``Req`` through its own constructor
(``Req(rid, text, prompt, SamplingParams(...))``, the four leading parameters every release from 0.4.4.post2 to
0.5.23 has), with the prompt instrument over it (``pdverify.targets.layouts.guarded_class``). The layout then places
the position fields; whatever the release's ``Req`` computes itself (``extend_len`` from 0.5.22, its ``ReqKvInfo``,
its ``ReqLogprob``, every default the batch preparation may read) is the release's own.
"""

from __future__ import annotations

import itertools
from array import array
from typing import Any

from pdverify.model.batch import Request
from pdverify.targets.layouts import guarded_class

_RIDS = itertools.count()


def sglang_request(request: Request) -> Any:  # pragma: no cover - conformance venv
    """The installed release's own ``Req`` for ``request``: its prompt an int64 array (as the tokenizer hands it
    over), its sampling parameters the release's own defaults."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    prompt = array("q", request.origin_input_ids)
    return guarded_class(Req)(f"pdverify-{next(_RIDS)}", "", prompt, SamplingParams(max_new_tokens=16))
