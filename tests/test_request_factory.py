"""A target's own request class (``Target.request_factory``): ``prepare_for_prebuilt`` reads requests built by the
implementation's constructor, with the prompt instrument over them (``guarded_class``); what the class computes
itself must agree with the layout, and every alias of the prompt stays guarded."""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from pdverify.model.batch import Request
from pdverify.production.prebuilt import prepare_for_prebuilt
from pdverify.properties.test_prebuilt import seed_batch
from pdverify.runner import load_properties, run_property
from pdverify.targets import TargetError, load_target
from pdverify.targets.layouts import DuckRequest, PromptReadError, guarded_class, run_prepare_for_prebuilt


class ReleaseReq:
    """A request class shaped like SGLang 0.5.23's ``Req``: its constructor keeps the prompt (and an alias of it),
    assigns the fill ids, builds its own KV bookkeeping, and computes ``extend_len``."""

    def __init__(self, rid: str, text: str, prompt: array[int], params: Any) -> None:
        self.rid, self.origin_input_ids, self.origin_input_ids_unpadded = rid, prompt, prompt
        self.full_untruncated_fill_ids = array("q")
        self.kv = SimpleNamespace(req_pool_idx=None, kv_committed_len=0)
        self.logprob = SimpleNamespace(top_logprobs_num=0, token_ids_logprob=None)
        self.prefix_len, self.extend_end = 0, None
        self.sampling_params = params
        self.custom_logit_processor = None  # what the client sent beside its sampling parameters

    @property
    def extend_len(self) -> int:
        assert self.extend_end is not None
        return self.extend_end - self.prefix_len

    def get_fill_ids(self) -> Any:
        return self.full_untruncated_fill_ids[: self.extend_end]


def _own_requests(cls: type = ReleaseReq) -> Any:
    def factory(request: Request) -> Any:
        params = SimpleNamespace(max_new_tokens=16, **vars(request.sampling))
        return guarded_class(cls)("r", "", array("q", request.origin_input_ids), params)

    return load_target("pdverify").derive("own-req", request_factory=factory)


def test_requests_are_the_targets_own_class_and_its_objects() -> None:
    out = run_prepare_for_prebuilt(_own_requests(), seed_batch(), "cpu")
    req = out.batch_object.reqs[0]
    assert isinstance(req, ReleaseReq) and not isinstance(req, DuckRequest)
    assert req.kv.kv_committed_len == 0 and req.kv.req_pool_idx == seed_batch().reqs[0].req_pool_idx  # its own kv
    assert req.extend_len == seed_batch().reqs[0].extend_len  # computed by the class, not placed
    assert out.fields["out_cache_loc"].tolist() == [2, 3, 4] and out.prompt_reads == []


def test_the_prebuilt_properties_hold_on_the_own_class() -> None:
    props = load_properties()
    for pid in ("P19", "P20", "P22", "P22b", "P23", "P26", "P30"):
        result = run_property(props[pid], _own_requests())
        assert result.status == "passed", (pid, result.message)


def test_every_read_of_the_prompt_through_the_own_class_is_seen() -> None:
    """The class's own ``get_fill_ids``, the fill ids its constructor assigned, and an alias of the prompt array
    (``origin_input_ids_unpadded``) are all guarded: P22 / P22b fail on a preparation that reads any of them."""

    def reads_via(how: str) -> Any:
        def prepare(batch: Any) -> None:
            for req in batch.reqs:
                _ = req.get_fill_ids() if how == "get" else req.origin_input_ids_unpadded[0]
            prepare_for_prebuilt(batch)

        return _own_requests().derive(f"reads-{how}", prepare_for_prebuilt=prepare)

    props = load_properties()
    got = run_property(props["P22"], reads_via("get"))
    assert got.status == "failed" and "get_fill_ids()" in got.message
    got = run_property(props["P22b"], reads_via("alias"))
    assert got.status == "failed" and "origin_input_ids_unpadded[0]" in got.message
    with pytest.raises(PromptReadError, match="origin_input_ids_unpadded"):
        run_prepare_for_prebuilt(reads_via("alias"), seed_batch(), "cpu", strict_prompt=True)


def test_a_computed_field_that_disagrees_with_the_layout_is_an_error() -> None:
    class OffByOne(ReleaseReq):
        @property
        def extend_len(self) -> int:
            return super().extend_len + 1

    with pytest.raises(TargetError, match=r"GuardedOffByOne.extend_len computes 4 where the layout places 3"):
        run_prepare_for_prebuilt(_own_requests(OffByOne), seed_batch(), "cpu")


def test_a_factory_must_build_a_guarded_object() -> None:
    target = load_target("pdverify").derive("bare", request_factory=lambda request: SimpleNamespace())
    with pytest.raises(TargetError, match="not a guarded_class"):
        run_prepare_for_prebuilt(target, seed_batch(), "cpu")


def test_the_guard_is_silent_while_the_constructor_runs() -> None:
    class ReadsItsFill(ReleaseReq):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.seen = list(self.full_untruncated_fill_ids)  # its own refresh, before the guard is armed

    out = run_prepare_for_prebuilt(_own_requests(ReadsItsFill), seed_batch(), "cpu", strict_prompt=True)
    assert out.batch_object.reqs[0].seen == [] and out.prompt_reads == []


def test_the_kv_book_follows_the_release_era() -> None:
    """A release's ``Req`` keeps its KV bookkeeping in a ``ReqKvInfo`` from 0.5.19 (``req.kv``), on itself before:
    the drivers write the row there and read it back from there."""
    from pdverify.targets.sglang_request import kv_book

    info = SimpleNamespace(req_pool_idx=None)
    assert kv_book(SimpleNamespace(kv=info, req_pool_idx=None)) is info
    older = SimpleNamespace(req_pool_idx=None)
    assert kv_book(older) is older
    # 0.5.16-0.5.18: no ReqKvInfo before allocation, one without the row after it
    assert kv_book(unallocated := SimpleNamespace(kv=None, req_pool_idx=None)) is unallocated
    allocated = SimpleNamespace(kv=SimpleNamespace(kv_allocated_len=8, swa_evicted_seqlen=0), req_pool_idx=3)
    assert kv_book(allocated) is allocated


@dataclass(slots=True, kw_only=True)
class ReqKvInfo:
    """0.5.16-0.5.18's ``ReqKvInfo``: built at allocation, the allocated lengths only (the row is on the request)."""

    kv_allocated_len: int
    swa_evicted_seqlen: int


class UnallocatedReq(ReleaseReq):
    """0.5.16-0.5.18's ``Req``: ``kv`` is None until pre-allocation builds the module's ``ReqKvInfo``."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.kv: ReqKvInfo | None = None  # type: ignore[assignment]


class BookOnItselfReq(ReleaseReq):
    """A ``Req`` to 0.5.15: no ``kv`` at all, the KV bookkeeping on the request itself."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        del self.kv


def _built(cls: type, layout: str) -> Any:
    from pdverify.targets.layouts import build_request

    request = seed_batch().reqs[0]
    row = torch.arange(16, dtype=torch.int64)
    return build_request(request, layout, row, [], False, lambda r: guarded_class(cls)("r", "", array("q"), None))


def test_the_kv_book_is_placed_as_the_release_keeps_it() -> None:
    request = seed_batch().reqs[0]
    # 0.5.16-0.5.18: the release's own ReqKvInfo, as pre-allocation leaves it; the row on the request
    unallocated = _built(UnallocatedReq, "sglang-any")
    assert unallocated.kv == ReqKvInfo(kv_allocated_len=request.extend_end, swa_evicted_seqlen=0)
    assert type(unallocated.kv) is ReqKvInfo and unallocated.req_pool_idx == request.req_pool_idx
    # to 0.5.15: no kv is invented
    older = _built(BookOnItselfReq, "sglang-any")
    assert not hasattr(older, "kv") and older.req_pool_idx == request.req_pool_idx
    # 0.5.19 on: the row in the release's ReqKvInfo, under either layout
    assert _built(ReleaseReq, "sglang-any").kv.req_pool_idx == request.req_pool_idx
    assert _built(ReleaseReq, "sglang-0.5.23").kv.req_pool_idx == request.req_pool_idx


@pytest.mark.parametrize("cls", [UnallocatedReq, BookOnItselfReq])
def test_the_0_5_23_layout_refuses_a_request_that_keeps_the_row_elsewhere(cls: type) -> None:
    with pytest.raises(TargetError, match=r"req\.kv\.req_pool_idx.*sglang-any"):
        _built(cls, "sglang-0.5.23")
