"""Out-of-contract inputs (docs/concepts.md, "Silent hazards"): the production ports behave as the released code does —
loudly where it is loud, silently where it is silent (pinned here so a change is noticed) — while the oracles
and pdverify's entry points reject the same input with a ``ValueError`` naming the argument and the contract."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from pdverify.model.batch import PrebuiltBatch, Request, validate_batch
from pdverify.model.layout import PagedAllocator, PagedRow, build_req_to_token, token_locations
from pdverify.oracle import page_index as oracle
from pdverify.oracle import transfer as oracle_transfer
from pdverify.production import page_index as prod
from pdverify.targets import load_target
from pdverify.targets.layouts import run_prepare_for_prebuilt

ROW = torch.tensor([20, 21, 22, 23, 8, 9, 10, 11, 36, 37], dtype=torch.int32)  # pages 5, 2, 9 (last partial)
TABLE = torch.zeros((2, 16), dtype=torch.int32)
TABLE[1, :10] = ROW

# (description, call, released outcome): an exception class and message pattern, or ("silent", value).
RELEASED: list[tuple[str, Callable[[], Any], Any]] = [
    ("page_size 0", lambda: prod.kv_to_page_indices(ROW, 0), (ValueError, "slice step cannot be zero")),
    ("page_size < 0", lambda: prod.kv_to_page_indices(ROW, -2), (ValueError, "step must be greater than zero")),
    ("float page_size", lambda: prod.kv_to_page_indices(ROW, 4.0), (TypeError, "slice indices must be integers")),  # type: ignore[arg-type]
    ("bool page_size is 1", lambda: prod.kv_to_page_indices(ROW, True).tolist(), ("silent", ROW.tolist())),
    ("numpy input", lambda: prod.kv_to_page_indices(ROW.numpy(), 4), (AttributeError, "has no attribute 'cpu'")),  # type: ignore[arg-type]
    ("float tensor", lambda: prod.kv_to_page_indices(torch.tensor([20.0, 8.0]), 4).tolist(), ("silent", [5.0])),
    ("2-D tensor strides rows", lambda: prod.kv_to_page_indices(TABLE, 4).shape, ("silent", (1, 16))),
    ("misaligned start drops a page", lambda: prod.kv_to_page_indices(ROW[2:6], 4).tolist(), ("silent", [5])),
    ("misaligned prefix", lambda: prod.suffix_page_indices(TABLE, 1, 2, 10, 4).tolist(), ("silent", [5, 2])),
    ("prefix > seq", lambda: prod.suffix_page_indices(TABLE, 1, 8, 4, 4).tolist(), ("silent", [])),
    ("seq past written slots reaches page 0", lambda: prod.suffix_page_indices(TABLE, 1, 4, 16, 4).tolist(), ("silent", [2, 9, 0])),
    ("pool index out of range", lambda: prod.suffix_page_indices(TABLE, 5, 0, 4, 4), (IndexError, "out of (bounds|range)")),
    ("-1 sentinels", lambda: prod.kv_to_page_indices(torch.tensor([-1] * 4), 4).tolist(), ("silent", [-1])),
    ("page_num page_size 0", lambda: prod.kv_to_page_num(3, 0), (ZeroDivisionError, "by zero")),
    ("page_num negative page_size", lambda: prod.kv_to_page_num(3, -4), ("silent", 0)),
    ("page_num negative count", lambda: prod.kv_to_page_num(-5, 4), ("silent", -1)),
    ("page_num float", lambda: prod.kv_to_page_num(10, 4.0), ("silent", 3.0)),  # type: ignore[arg-type]
    ("align page_size 0", lambda: prod.page_align_floor(9, 0), (ZeroDivisionError, "by zero")),
    ("align negative page_size", lambda: prod.page_align_floor(9, -4), ("silent", 12)),
    ("align negative length", lambda: prod.page_align_floor(-1, 4), ("silent", -4)),
    ("minimax misaligned", lambda: prod.minimax_index_transfer_pages(ROW, page_size=4, prefix_len=2), (ValueError, "page-aligned")),
    ("minimax page_size 0", lambda: prod.minimax_index_transfer_pages(ROW, page_size=0, prefix_len=0), (ValueError, "MiniMax")),
]  # fmt: skip


@pytest.mark.parametrize(("what", "call", "outcome"), RELEASED, ids=[r[0] for r in RELEASED])
def test_production_behaves_as_released(what: str, call: Callable[[], Any], outcome: Any) -> None:
    kind, expected = outcome
    if kind == "silent":
        assert call() == expected
    else:
        with pytest.raises(kind, match=expected):
            call()


ORACLE_REJECTS: list[tuple[str, Callable[[], Any], str]] = [
    ("page_size 0", lambda: oracle.strided_pages([1, 2], 0), "page_size must be >= 1"),
    ("page_size bool", lambda: oracle.distinct_pages([1, 2], True), "page_size must be an integer"),
    ("page_size float", lambda: oracle.page_count(3, 4.0), "page_size must be an integer"),  # type: ignore[arg-type]
    ("negative count", lambda: oracle.page_count(-1, 4), "num_kv_indices must be >= 0"),
    ("negative length", lambda: oracle.align_floor(-1, 4), "length must be >= 0"),
    ("float element", lambda: oracle.strided_pages([1.5], 1), r"kv_indices\[0\] must be an integer"),  # type: ignore[list-item]
    ("not a sequence", lambda: oracle.strided_pages(7, 1), "kv_indices must be a sequence"),  # type: ignore[arg-type]
    ("misaligned start", lambda: oracle.distinct_pages([22, 23, 8], 4), "page-aligned paged run"),
    ("revisited page", lambda: oracle.distinct_pages([20, 21, 22, 23, 20], 4), "revisits page 5"),
    ("mid-page jump", lambda: oracle.distinct_pages([20, 9], 4), "mid-page"),
    ("negative location", lambda: oracle.distinct_pages([-1], 4), "not a token location"),
    ("misaligned prefix", lambda: oracle.suffix_pages(ROW.tolist(), 2, 10, 4), "prefix_len must be page-aligned"),
    ("prefix > seq", lambda: oracle.suffix_pages(ROW.tolist(), 8, 4, 4), "prefix_len=8 must be <= seq_len=4"),
    ("seq past slots", lambda: oracle.suffix_pages(ROW.tolist(), 4, 16, 4), "exceeds the row's 10 written slots"),
    ("decode misaligned D", lambda: oracle_transfer.decode_pages(ROW.tolist(), 2, 10, 4), "decode_prefix_len must be page-aligned"),
    ("decode D > L", lambda: oracle_transfer.decode_pages(ROW.tolist(), 8, 4, 4), "must be <= length"),
    ("decode L past slots", lambda: oracle_transfer.decode_pages(ROW.tolist(), 0, 12, 4), "written slots"),
    ("no chunks", lambda: oracle_transfer.prefill_sends(ROW.tolist(), 0, 10, 4, []), "chunk_ends"),
    ("last chunk short", lambda: oracle_transfer.prefill_sends(ROW.tolist(), 0, 10, 4, [8]), "must end at length=10"),
    ("non-last reaches L", lambda: oracle_transfer.prefill_sends(ROW.tolist(), 0, 10, 4, [10, 10]), r"chunk_ends\[0\]=10"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "call", "message"), ORACLE_REJECTS, ids=[r[0] for r in ORACLE_REJECTS])
def test_oracle_rejects_with_named_argument(what: str, call: Callable[[], Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def _req(**kw: Any) -> Request:
    base: dict[str, Any] = {"req_pool_idx": 0, "prefix_len": 2, "extend_len": 3, "origin_input_ids": [0] * 5}
    base.update(kw)
    return Request(**base)


PREBUILT_BAD: list[tuple[str, PrebuiltBatch, str, Any]] = [
    ("prefix + extend past the row", PrebuiltBatch([_req(extend_len=8, output_ids=[1])], [[0] * 5]),
     "exceeds the row width 5", (RuntimeError, "must match the existing size")),
    ("negative extend", PrebuiltBatch([_req(extend_len=-1, output_ids=[1])], [[0] * 5]),
     "extend_len must be >= 0", (RuntimeError, "negative dimension")),
    ("pool index out of range", PrebuiltBatch([_req(req_pool_idx=3)], [[0] * 5]),
     "req_pool_idx=3 out of range", (IndexError, "out of (bounds|range)")),
    ("seq - prefix != extend, empty output", PrebuiltBatch([_req(extend_len=2)], [[0] * 5]),
     "must equal extend_len", (AssertionError, "seq_len=5, pre_len=2")),
]  # fmt: skip


@pytest.mark.parametrize(("what", "batch", "oracle_msg", "released"), PREBUILT_BAD, ids=[r[0] for r in PREBUILT_BAD])
def test_prebuilt_bad_input(what: str, batch: PrebuiltBatch, oracle_msg: str, released: Any) -> None:
    with pytest.raises(
        ValueError, match=r"request 0: .*" + re.escape(oracle_msg) if "range" not in what else oracle_msg
    ):
        validate_batch(batch)
    kind, pattern = released
    with pytest.raises(kind, match=pattern):
        run_prepare_for_prebuilt(load_target("pdverify"), batch, "cpu")


def test_prebuilt_silently_accepts_inconsistent_extend_with_output() -> None:
    """Upstream checks seq_len - prefix == extend only when output_ids is empty: pinned as silent."""
    batch = PrebuiltBatch(
        [_req(prefix_len=4, extend_len=2, origin_input_ids=[0] * 10, output_ids=[1])], [list(range(10))]
    )
    out = run_prepare_for_prebuilt(load_target("pdverify"), batch, "cpu")
    assert out.fields["extend_num_tokens"] == 2 and out.fields["seq_lens"].tolist() == [10]


def test_model_rejects_bad_layouts() -> None:
    with pytest.raises(ValueError, match="page 0"):
        PagedRow((0, 2), 8, 4)
    with pytest.raises(ValueError, match="distinct"):
        PagedRow((2, 2), 8, 4)
    with pytest.raises(ValueError, match="page-aligned"):
        PagedRow((2, 3), 8, 4, prefix_len=2)
    with pytest.raises(ValueError, match="holds 2 pages"):
        PagedRow((2,), 8, 4)
    with pytest.raises(ValueError, match="prefix_len=8 must be <= length=4"):
        PagedRow((2,), 4, 4, prefix_len=8)
    with pytest.raises(ValueError, match="exceeds"):
        token_locations([1], 5, 4)
    with pytest.raises(ValueError, match="table width"):
        build_req_to_token([[1, 2, 3]], 2)
    with pytest.raises(ValueError, match="permutation"):
        PagedAllocator(4, 4, free_order=[0, 1, 2])
    alloc = PagedAllocator(4, 4, free_order=[3, 1, 2])
    assert alloc.alloc(2) == [3, 1] and alloc.free_pages == 1
    with pytest.raises(ValueError, match="only 1 are free"):
        alloc.alloc(2)
    alloc.free([3])
    with pytest.raises(ValueError, match="double free"):
        alloc.free([3])
    assert np.array_equal(build_req_to_token([[5, 6]], 3).numpy(), np.array([[5, 6, 0]], dtype=np.int32))


def test_validate_batch_logprob_and_widths() -> None:
    with pytest.raises(ValueError, match="row 1 has width 2"):
        validate_batch(PrebuiltBatch([], [[0, 0, 0], [0, 0]]))
    req = _req()
    req.logprob = None  # type: ignore[assignment]
    with pytest.raises(ValueError, match="logprob settings are required"):
        validate_batch(PrebuiltBatch([req], [[0] * 5], return_logprob=True))


def test_a_server_without_a_tokenizer_has_no_eos() -> None:
    """``--skip-tokenizer-init`` loads no tokenizer: a batch that also names a tokenizer eos is refused, naming both."""
    with pytest.raises(ValueError, match=r"eos_token_id=3 with skip_tokenizer_init: .*must be None"):
        validate_batch(PrebuiltBatch([], [[0]], eos_token_id=3, skip_tokenizer_init=True))
    assert PrebuiltBatch([], [[0]], skip_tokenizer_init=True).server_flags() == {"skip_tokenizer_init": True}


def test_the_port_refuses_min_new_tokens_without_a_tokenizer() -> None:
    """0.5.23's ``SamplingParams.normalize`` refuses ``min_new_tokens`` on a server without a tokenizer (#27882): the
    port's scheduler scope refuses it alike, and takes the same request where the server has a tokenizer."""
    from pdverify.model.batch import SamplingSettings
    from pdverify.targets.protocol import ServerRefuses

    req = Request(0, 0, 1, [0], [], sampling=SamplingSettings(min_new_tokens=2))
    with pytest.raises(ServerRefuses, match="min_new_tokens=2: unavailable with --skip-tokenizer-init"):
        run_prepare_for_prebuilt(load_target("pdverify"), PrebuiltBatch([req], [[1]], skip_tokenizer_init=True), "cpu")
    out = run_prepare_for_prebuilt(load_target("pdverify"), PrebuiltBatch([req], [[1]], eos_token_id=1), "cpu")
    assert out.fields["extend_num_tokens"] == 1


def test_model_eos_ids_are_token_ids_of_the_vocabulary() -> None:
    """A model configuration's eos id is a token of the model's vocabulary: one past it is refused, naming it."""
    with pytest.raises(ValueError, match=r"model_eos_token_ids: 32 is not a token id .*vocab_size=32"):
        validate_batch(PrebuiltBatch([], [[0]], model_eos_token_ids=(2, 32)))
    with pytest.raises(ValueError, match="model_eos_token_ids"):
        validate_batch(PrebuiltBatch([], [[0]], model_eos_token_ids=(-1,)))


def test_the_port_refuses_a_seed_that_is_no_integer() -> None:
    """0.5.23's ``SamplingParams.verify`` refuses a seed sent as a string (0.5.3-0.5.20 crash on it, T26): the port's
    scheduler scope refuses it alike, deterministic inference or not."""
    from pdverify.model.batch import SamplingSettings
    from pdverify.targets.protocol import ServerRefuses

    req = Request(0, 0, 1, [0], [], sampling=SamplingSettings(sampling_seed="42"))
    for deterministic in (False, True):
        batch = PrebuiltBatch([req], [[1]], enable_deterministic_inference=deterministic)
        with pytest.raises(ServerRefuses, match="sampling_seed '42': not an integer"):
            run_prepare_for_prebuilt(load_target("pdverify"), batch, "cpu")


def test_the_port_refuses_a_stop_id_outside_the_vocabulary() -> None:
    """A stop token id outside ``[0, vocab_size)`` - the padding id ``vocab_size`` itself, one past it, a far one, a
    negative one - is refused by the port's scheduler scope, naming the ids and the range (F7's candidate fix refuses
    it in ``verify``; 0.5.23 takes it and crashes in the penalizer). Ids inside the vocabulary are served."""
    from pdverify.model.batch import SamplingSettings
    from pdverify.targets.protocol import ServerRefuses

    port = load_target("pdverify")
    for stray in (32, 33, 151645, -1):
        req = Request(0, 0, 1, [0], [], sampling=SamplingSettings(stop_token_ids=[5, stray]))
        with pytest.raises(ServerRefuses, match=rf"stop_token_ids \[{stray}\]: outside \[0, 32\)"):
            run_prepare_for_prebuilt(port, PrebuiltBatch([req], [[1]], eos_token_id=2), "cpu")
    kept = Request(0, 0, 1, [0], [], sampling=SamplingSettings(min_new_tokens=1, stop_token_ids=[0, 31]))
    out = run_prepare_for_prebuilt(port, PrebuiltBatch([kept], [[1]], eos_token_id=2), "cpu")
    assert out.fields["extend_num_tokens"] == 1


def test_p19_sees_a_port_that_admits_a_stop_id_past_the_vocabulary() -> None:
    """The port's refusal planted away (``stop_ids_outside`` finding none), its penalizer scatters a stray stop id
    past its table and P19 fails on the crash - the generator reaches F7's input on the port as on SGLang."""
    from unittest import mock

    from pdverify.runner import load_properties, run_property
    from pdverify.targets import builtin

    with mock.patch.object(builtin, "stop_ids_outside", lambda ids, vocab: []):
        run = run_property(load_properties()["P19"], load_target("pdverify"))
    assert run.status in ("failed", "error"), run.message
    assert "is out of bounds for dimension 1 with size 33" in run.message, run.message


def test_a_tokenizers_additional_stop_tokens_are_its_own() -> None:
    """A tokenizer's additional stop tokens (Llama 3's ``<|eom_id|>``) are token ids of the vocabulary, and a server
    without a tokenizer has none: both refused, naming the field."""
    with pytest.raises(ValueError, match=r"additional_stop_token_ids=\(5,\) with skip_tokenizer_init: .*must be empty"):
        validate_batch(PrebuiltBatch([], [[0]], skip_tokenizer_init=True, additional_stop_token_ids=(5,)))
    with pytest.raises(ValueError, match=r"additional_stop_token_ids: 32 is not a token id .*vocab_size=32"):
        validate_batch(PrebuiltBatch([], [[0]], additional_stop_token_ids=(32,)))
    validate_batch(PrebuiltBatch([], [[0]], additional_stop_token_ids=(31,)))
