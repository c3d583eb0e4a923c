"""The process group SGLang's PD queues reduce their receivers' and senders' polls over, for one rank.

A server's decode pre-allocation queue reduces every poll over its attention-TP gloo group (``gloo_group``) and
prefill's bootstrap queue over the attention TP and CP groups (``poll_and_all_reduce`` and, from 0.5.10,
``poll_and_all_reduce_attn_cp_tp_group``; ``all_reduce_flags`` from 0.5.23): a MIN all-reduce, so that no rank
commits a request ahead of its peers. pdverify drives one rank, so it hands those functions a real gloo process
group of one rank - the reduction runs (0.5.22 and earlier call ``dist.all_reduce`` on it; 0.5.23's
``all_reduce_flags`` returns the flags unchanged for a world of one, its own rule) - built without initialising
``torch.distributed``'s default group, which would change what every other SGLang module sees.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def one_rank_gloo() -> Any:  # pragma: no cover - conformance venv
    """A ``ProcessGroup`` whose only rank is this process, with a gloo backend for the CPU (over an in-memory store):
    what SGLang's annotations ask for (``gloo_group: dist.ProcessGroup``), built as ``torch.distributed`` builds a
    group, with no default group set."""
    from datetime import timedelta

    import torch
    from torch._C._distributed_c10d import HashStore, ProcessGroup, ProcessGroupGloo

    store = HashStore()
    group = ProcessGroup(store, 0, 1)
    group._set_default_backend(ProcessGroup.BackendType.GLOO)
    group._register_backend(
        torch.device("cpu"), ProcessGroup.BackendType.GLOO, ProcessGroupGloo(store, 0, 1, timedelta(seconds=60))
    )
    return group
