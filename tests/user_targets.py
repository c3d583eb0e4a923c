"""Targets a user might point ``pdverify check`` at (``tests.user_targets:NAME``), each with one defect."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import torch

from pdverify.production.page_index import PageIndices
from pdverify.targets import ServerRefuses, Target, load_target
from pdverify.targets.layouts import DuckRequest


def _floor_off_by_page(length: int, page_size: int) -> int:
    return (length // page_size) * page_size - (page_size if length % page_size == 0 and length else 0)


faulty = load_target("pdverify").derive("user-faulty", "page_align_floor one page low when aligned",
                                        page_align_floor=_floor_off_by_page)  # fmt: skip


def _raises(kv_indices: torch.Tensor, page_size: int) -> PageIndices:
    raise RuntimeError("device kernel exploded")


def _hangs(n: int, page_size: int) -> int:
    time.sleep(30)
    return n


def _garbage(kv_indices: torch.Tensor, page_size: int) -> Any:
    return [0] * len(kv_indices)


def _oom(n: int, page_size: int) -> int:
    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def misbehaving() -> Target:
    """One target, three broken functions: it raises, it hangs, it returns garbage — and one OOMs."""
    return load_target("pdverify").derive(
        "misbehaving",
        kv_to_page_indices=_garbage,
        suffix_page_indices=lambda *a: _raises(a[0], a[-1]),
        page_align_floor=_hangs,
        kv_to_page_num=_oom,
    )


page_only = Target("page-only", kv_to_page_indices=load_target("pdverify").kv_to_page_indices)
"""Supplies one function: everything else is not applicable."""

not_a_target = 42


_calls = {"n": 0}


def _sometimes_wrong(length: int, page_size: int) -> int:
    """Wrong on the 40th call only: Hypothesis cannot reproduce the failure when it replays it."""
    _calls["n"] += 1
    right = (length // page_size) * page_size
    return right + page_size if _calls["n"] == 40 else right


flaky = load_target("pdverify").derive("user-flaky", page_align_floor=_sometimes_wrong)


def _decode_hangs_on_long_requests(*args: Any) -> Any:
    """Decode's destination list hangs for a request of 40 tokens or more (mid-run in a state machine)."""
    if args[3] >= 40:
        time.sleep(30)
    return load_target("pdverify").require("decode_page_indices")(*args)


hangs_in_machine = load_target("pdverify").derive(
    "user-hangs-in-m1", decode_page_indices=_decode_hangs_on_long_requests
)


def _rare_fault(kv_indices: torch.Tensor, page_size: int) -> PageIndices:
    """Right except for more than 12 tokens at page size 3: then the last page is dropped. None of P1's explicit
    examples reach it; random generation or a fuzzing campaign must."""
    pages: PageIndices = load_target("pdverify").require("kv_to_page_indices")(kv_indices, page_size)
    return pages[:-1] if page_size == 3 and len(kv_indices) > 12 else pages


rare_fault = load_target("pdverify").derive("user-rare-fault", kv_to_page_indices=_rare_fault)


old_release = load_target("pdverify").derive("user-old-release", "pdverify's ports, checked as sglang 0.5.10",
                                             release="0.5.10")  # fmt: skip


def _asserts_on_long(length: int, page_size: int) -> int:
    """An ``assert`` of the function under test itself (as SGLang's own asserts): fires past 20 tokens."""
    assert length <= 20, f"page_align_floor: length {length} past the table"
    return (length // page_size) * page_size


asserting = load_target("pdverify").derive("user-asserting", page_align_floor=_asserts_on_long)
"""The target's own ``assert`` fails: a target error, not a property failure."""


def _two_faults(length: int, page_size: int) -> int:
    """Two distinct defects: an exception for lengths one past a page, a page too high when aligned."""
    if length > page_size and length % page_size == 1:
        raise ValueError(f"page_align_floor: cannot floor {length}")
    right = (length // page_size) * page_size
    return right + page_size if length and length % page_size == 0 else right


two_faults = load_target("pdverify").derive("user-two-faults", page_align_floor=_two_faults)
"""Hypothesis finds two distinct failures of one property: each is reported."""


def as_release_0_5_23(base: str, name: str) -> Target:
    """``base`` checked as SGLang 0.5.23: the findings recorded for that release apply (``pdverify.findings``)."""
    return load_target(base).derive(name, f"{base}, checked as sglang 0.5.23", package="sglang", release="0.5.23")


f2_as_released = as_release_0_5_23("mutant:XC01", "user-f2-as-released")
"""The port with F2's released behaviour (the checksum digests virtual ids), as 0.5.23: S16 reproduces F2 only."""

f2_and_a_second_defect = as_release_0_5_23("mutant:XC02", "user-f2-second-defect")
"""A different checksum defect (the digest starts at 0, the decode prefix included) on a 0.5.23 target: a new
failure, even though F2 is recorded for S16."""


def _refuses_host_receive(case: Any, device: str) -> Any:
    """The port's decode queue, behind a server that refuses every host-receive threshold below 1 (as every
    transfer backend of SGLang 0.5.21-0.5.23 does)."""
    if case.host_threshold < 1:
        raise ServerRefuses("--disaggregation-decode-host-receive-threshold < 1: no backend supports host destinations")
    return _PORT.require("decode_queue")(case, device)


_PORT = load_target("pdverify")
refusing_host_receive = _PORT.derive("user-refusing-host-receive", decode_queue=_refuses_host_receive)
"""A server whose own validation refuses part of the drawn configurations: those examples are discarded and
counted, never passed or failed."""


def _refuses_everything(case: Any, device: str) -> Any:
    raise ServerRefuses("this server starts with no configuration")


refusing_everything = _PORT.derive("user-refusing-everything", decode_queue=_refuses_everything)
"""A server that refuses every configuration: a property left with no example is not a pass."""


@contextlib.contextmanager
def _refuses_greedy(batch: Any) -> Iterator[None]:
    from pdverify.targets.builtin import port_scheduler

    if any(r.sampling_params.temperature == 0.0 for r in batch.reqs):
        raise ServerRefuses("this server samples every request: temperature 0 refused")
    with port_scheduler(batch):  # and publishes the batch's server flags as the port's own scope does
        yield


refusing_greedy = _PORT.derive("user-refusing-greedy", scheduler_scope=_refuses_greedy)
"""A server whose scheduler setup (``scheduler_scope``) refuses part of the drawn batches: discarded and counted."""


def _refuses_bias(request: Any) -> Any:
    if request.sampling.logit_bias:
        raise ServerRefuses("this server takes no logit bias")
    return DuckRequest()


refusing_bias = _PORT.derive("user-refusing-bias", request_factory=_refuses_bias)
"""A server whose request class (``request_factory``) refuses part of the drawn requests: discarded and counted."""
