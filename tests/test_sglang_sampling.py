"""On the ``sglang`` target, ``prepare_for_prebuilt`` builds its sampling info with SGLang's own
``SamplingBatchInfo.from_schedule_batch``, under the server configuration a decode scheduler of the release has
published (``sglang_context.prebuilt_scheduler``), where a recorder returning a sentinel had stood. Its copies are
set aside in B3's ledger and bounded on their own: B3 fails when the release's sampling info is planted to copy the
prompt to the device. Without the published configuration, the releases that read it through a runtime getter
refuse to build it, so the scope is what lets the real call run.

Runs in the conformance environment (``.venv-sglang``, SGLang 0.5.23 or a release on ``PYTHONPATH``); skipped
where SGLang is not installed.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
import torch

from tests.sglang_release import release_target

sampling = pytest.importorskip("sglang.srt.sampling.sampling_batch_info", reason="needs SGLang (the conformance env)")


def _batch() -> Any:
    from pdverify.model.batch import PrebuiltBatch, Request

    prompts = [list(range(40)), list(range(100, 130)), list(range(200, 264))]
    reqs = [Request(i, 8, len(p) - 8, p) for i, p in enumerate(prompts)]
    return PrebuiltBatch(reqs, [list(range(1000 * (i + 1), 1000 * (i + 1) + 64)) for i in range(3)])


def test_the_sampling_info_is_sglangs_own() -> None:
    from pdverify.targets.layouts import run_prepare_for_prebuilt

    out = run_prepare_for_prebuilt(release_target(), _batch(), "cpu", measure=True)
    info = out.fields["sampling_info"]
    assert isinstance(info, sampling.SamplingBatchInfo) and info is out.sampling_info_returned
    top_ks = [r.sampling_params.top_k for r in out.batch_object.reqs]
    assert info.temperatures.shape == (3, 1) and info.top_ks.tolist() == top_ks
    assert out.ledger is not None
    aside = out.ledger.asides["sampling_info"]
    assert aside.h2d_copies >= 4 and all(c.elements == 3 for c in aside.copies), aside.describe()


def test_b3_fails_when_the_sampling_info_copies_the_prompt() -> None:
    from pdverify.runner import load_properties, run_property

    target = release_target()
    info = load_properties()["B3"]
    released_status = run_property(info, target).status
    if released_status == "not applicable":
        pytest.skip(f"B3 is not in sglang {target.release}'s contract (#35070's)")
    assert released_status == "passed"
    released = sampling.SamplingBatchInfo.from_schedule_batch

    def copying(batch: Any, vocab_size: int) -> Any:
        torch.tensor([t for r in batch.reqs for t in list(r.origin_input_ids)], device=batch.device)
        return released(batch, vocab_size)

    with mock.patch.object(sampling.SamplingBatchInfo, "from_schedule_batch", copying):
        run = run_property(info, target)
    assert run.status == "failed" and "the sampling info's H2D budget" in run.message, run.message


def test_the_release_reads_the_published_configuration() -> None:
    """Where the release reads its flags through a runtime getter (0.5.3.post2 on), the real call needs the scope:
    without it the release refuses (nothing published); before, the defaults are there from import."""
    from pdverify.targets.layouts import run_prepare_for_prebuilt

    target = release_target()
    assert target.scheduler_scope is not None
    bare = target.derive("no-scope", scheduler_scope=None)
    source = open(sampling.__file__).read()  # noqa: SIM115 - a read of the release's own module
    if "get_exec()" not in source and "get_global_server_args()" not in source and "get_server_args()" not in source:
        pytest.skip(f"sglang {target.release} reads its defaults from import or off the batch")
    from pdverify.targets.layouts import SamplingInfoRaised

    # the release's own error, raised inside its from_schedule_batch: the adapter reports where (SamplingInfoRaised)
    with pytest.raises(
        SamplingInfoRaised, match=r"raised ValueError at .*(config namespace 'exec' not published|Global server args)"
    ):
        run_prepare_for_prebuilt(bare, _batch(), "cpu")
    run_prepare_for_prebuilt(target, _batch(), "cpu")


def test_the_server_flags_reach_the_release() -> None:
    """The batch's ``--enable-custom-logit-processor`` and ``--enable-deterministic-inference`` are what the release's
    own ``from_schedule_batch`` reads, in each era's publication: off, no seed column and no processor; on, the seeds
    in batch order (42 where none was sent) and the processors on the rows that sent one. A release without
    deterministic inference refuses the flag."""
    import inspect
    from dataclasses import replace

    from sglang.srt.sampling.sampling_params import SamplingParams

    from pdverify.model.batch import PrebuiltBatch, Request, SamplingSettings
    from pdverify.properties.test_prebuilt import processor_rows
    from pdverify.targets.layouts import run_prepare_for_prebuilt
    from pdverify.targets.protocol import ServerRefuses

    target = release_target()
    has_seed = "sampling_seed" in inspect.signature(SamplingParams).parameters
    settings = [
        SamplingSettings(sampling_seed=7 if has_seed else None, custom_logit_processor=True, custom_params={"k": [1]}),
        SamplingSettings(),
        SamplingSettings(custom_logit_processor=True, min_new_tokens=2),
    ]
    reqs = [Request(i, 0, 3, [1, 2, 3], [], sampling=s) for i, s in enumerate(settings)]
    batch = PrebuiltBatch(reqs, [[10 * i + j for j in range(3)] for i in range(3)], eos_token_id=5)

    def info(*, enable_custom_logit_processor: bool = False, enable_deterministic_inference: bool = False) -> Any:
        flagged = replace(
            batch,
            enable_custom_logit_processor=enable_custom_logit_processor,
            enable_deterministic_inference=enable_deterministic_inference,
        )
        return run_prepare_for_prebuilt(target, flagged, "cpu").fields["sampling_info"]

    off = info()
    assert getattr(off, "sampling_seed", None) is None and processor_rows(off) is None
    on = info(enable_custom_logit_processor=True)
    assert processor_rows(on) == [0, 2] and on.custom_params[0]["k"] == [1] and on.custom_params[1] is None
    if has_seed:
        assert info(enable_deterministic_inference=True).sampling_seed.tolist() == [7, 42, 42]
    else:
        with pytest.raises(ServerRefuses, match="no --enable-deterministic-inference"):
            info(enable_deterministic_inference=True)


def test_p27_fails_when_the_flags_are_not_published() -> None:
    """A scheduler scope that publishes the server's sampling flags at their defaults whatever the batch's (its
    tokenizer, its additional stop token and the model eos ids stay the batch's): the release's sampling info runs
    no processor and keeps no seeds, and P27's clauses see it."""
    from types import SimpleNamespace

    from pdverify.runner import load_properties, run_property
    from pdverify.targets.sglang_context import prebuilt_scheduler

    target = release_target()

    def unpublished(batch: Any) -> Any:
        server = batch.pdverify_server
        tokenizer = tuple((k, v) for k, v in server.flags if k == "skip_tokenizer_init")
        batch.pdverify_server = SimpleNamespace(
            flags=tokenizer,
            eos_token_id=server.eos_token_id,
            model_eos_token_ids=server.model_eos_token_ids,
            additional_stop_token_ids=server.additional_stop_token_ids,
        )
        return prebuilt_scheduler(batch)

    info = load_properties()["P27"]
    run = run_property(info, target.derive("unpublished", scheduler_scope=unpublished))
    assert run.status == "failed", run.message
    assert "custom logit processors run on rows None" in run.message or "no seed column" in run.message, run.message


def test_a_server_without_a_tokenizer() -> None:
    """``--skip-tokenizer-init``: each request gets the scheduler's tokenizer, None, and the tokenizer manager's own
    ``normalize(None)`` runs first. A request asking for ``min_new_tokens`` is refused there from 0.5.14 (#27882);
    before, the release's penalizer reads the stop tokens of None (T27). Without ``min_new_tokens`` it is served."""
    from dataclasses import replace

    from sglang.srt.sampling import sampling_params

    from pdverify.model.batch import PrebuiltBatch, Request, SamplingSettings
    from pdverify.targets.layouts import SamplingInfoRaised, run_prepare_for_prebuilt
    from pdverify.targets.protocol import ServerRefuses

    target = release_target()
    plain = PrebuiltBatch([Request(0, 0, 3, [1, 2, 3])], [[4, 5, 6]], skip_tokenizer_init=True)
    out = run_prepare_for_prebuilt(target, plain, "cpu")
    assert [r.tokenizer for r in out.batch_object.reqs] == [None]
    asking = replace(plain, reqs=[Request(0, 0, 3, [1, 2, 3], sampling=SamplingSettings(min_new_tokens=2))])
    if hasattr(sampling_params, "raise_if_tokenizer_required"):
        with pytest.raises(ServerRefuses, match="min_new_tokens=2 is unavailable when skip_tokenizer_init"):
            run_prepare_for_prebuilt(target, asking, "cpu")
    else:
        with pytest.raises(SamplingInfoRaised, match=r"AttributeError at min_new_tokens\.py:\d+: 'NoneType' object"):
            run_prepare_for_prebuilt(target, asking, "cpu")


def test_p19_sees_t27_where_the_release_took_the_request() -> None:
    """With #27882's check planted away (0.5.14 on), the release takes ``min_new_tokens`` on a server without a
    tokenizer, and P19 fails on the penalizer's crash - a new failure there, T27 being recorded only before 0.5.14."""
    from sglang.srt.sampling import sampling_params

    from pdverify.runner import load_properties, run_property

    if not hasattr(sampling_params, "raise_if_tokenizer_required"):
        pytest.skip("the release has no tokenizer check to plant away (T27 is recorded for it)")
    with mock.patch.object(sampling_params, "raise_if_tokenizer_required", lambda *a, **k: None):
        run = run_property(load_properties()["P19"], release_target())
    assert run.status == "failed", run.message
    assert "AttributeError at min_new_tokens.py" in run.message and "'NoneType' object has no attribute" in run.message


def test_p27_sees_a_penalizer_without_the_models_eos_ids() -> None:
    """From 0.5.19 (#31378) the release's ``min_new_tokens`` penalizer holds the request's ``eos_token_ids`` back:
    planted to build its stop set without them (as before), P27's ``min_new_tokens_stops`` clause fails - a new
    failure there, T28 being recorded only before 0.5.19. Where the release is T28's, it shows as recorded."""
    from sglang.srt.sampling.penaltylib import min_new_tokens

    from pdverify.findings import KNOWN
    from pdverify.runner import load_properties, run_property

    target = release_target()
    penalizer = min_new_tokens.BatchedMinNewTokensPenalizer
    released = penalizer._prepare
    if "eos_token_ids" not in open(min_new_tokens.__file__).read():  # noqa: SIM115 - the release's own module
        assert KNOWN["T28"].recorded_for(target, "P27"), f"sglang {target.release} leaves them out and is not T28's"
        pytest.skip(f"sglang {target.release}'s penalizer leaves the model's eos ids out (T28)")

    def without_model_eos(self: Any) -> None:
        reqs = list(self.orchestrator.reqs())
        kept = [r.eos_token_ids for r in reqs]
        for r in reqs:
            r.eos_token_ids = None
        try:
            released(self)
        finally:
            for r, ids in zip(reqs, kept, strict=True):
                r.eos_token_ids = ids

    assert run_property(load_properties()["P27"], target).status == "passed"
    with mock.patch.object(penalizer, "_prepare", without_model_eos):
        run = run_property(load_properties()["P27"], target)
    assert run.status == "failed" and "is held back from tokens" in run.message and "missing [" in run.message, (
        run.message
    )


def test_a_seed_sent_as_a_string() -> None:
    """Under deterministic inference, a seed sent as a string: from 0.5.21 the release's own ``verify`` refuses it;
    before (0.5.3-0.5.20), the release's seed column cannot take it and the sampling info raises (T26)."""
    import inspect

    from sglang.srt.sampling.sampling_params import SamplingParams

    from pdverify.model.batch import PrebuiltBatch, Request, SamplingSettings
    from pdverify.targets.layouts import SamplingInfoRaised, run_prepare_for_prebuilt
    from pdverify.targets.protocol import ServerRefuses

    if "sampling_seed" not in inspect.signature(SamplingParams).parameters:
        pytest.skip("the release takes no sampling seed")
    target = release_target()
    seeds: tuple[int | str, ...] = (7, "42")
    reqs = [Request(i, 0, 3, [1, 2, 3], sampling=SamplingSettings(sampling_seed=s)) for i, s in enumerate(seeds)]
    batch = PrebuiltBatch(reqs, [[4, 5, 6], [7, 8, 9]], enable_deterministic_inference=True)
    if "must be an integer" in open(inspect.getsourcefile(SamplingParams) or "").read():  # noqa: SIM115
        with pytest.raises(ServerRefuses, match="sampling_seed must be an integer"):
            run_prepare_for_prebuilt(target, batch, "cpu")
    else:
        with pytest.raises(SamplingInfoRaised, match=r"at sampling_batch_info\.py:\d+: 'str' object cannot be"):
            run_prepare_for_prebuilt(target, batch, "cpu")


def test_the_release_takes_a_stop_id_past_the_vocabulary() -> None:
    """A stop token id past the vocabulary goes through the release's own ``verify`` (which never checks it, F7) and
    its penalizer scatters it out of bounds once a request of the batch asks for ``min_new_tokens``; with F7's
    candidate check planted into ``verify`` the same batch is refused at admission, and without ``min_new_tokens`` in
    the batch the release serves it."""
    import inspect

    from sglang.srt.sampling.sampling_params import SamplingParams

    from pdverify.model.batch import PrebuiltBatch, Request, SamplingSettings
    from pdverify.targets.layouts import SamplingInfoRaised, run_prepare_for_prebuilt
    from pdverify.targets.protocol import ServerRefuses

    target = release_target()
    stray = Request(1, 0, 1, [0], [], sampling=SamplingSettings(stop_token_ids=[33]))
    asking = Request(0, 0, 1, [0], [], sampling=SamplingSettings(min_new_tokens=1))
    batch = PrebuiltBatch([asking, stray], [[1], [2]], eos_token_id=2)
    with pytest.raises(SamplingInfoRaised, match=r"index 33 is out of bounds for dimension 1 with size 33"):
        run_prepare_for_prebuilt(target, batch, "cpu")
    served = run_prepare_for_prebuilt(target, PrebuiltBatch([stray], [[1], [2]], eos_token_id=2), "cpu")
    assert served.fields["extend_num_tokens"] == 1
    released = SamplingParams.verify

    def verify_with_f7s_fix(self: Any, vocab_size: int) -> None:
        released(self, vocab_size)
        if any(not 0 <= t < vocab_size for t in self.stop_token_ids or ()):
            raise ValueError(f"stop_token_ids must be in [0, {vocab_size - 1}]")

    def verify_without_vocab(self: Any) -> None:  # before 0.5.x verify takes no vocabulary: the batch's is 32
        released(self)
        if any(not 0 <= t < 32 for t in self.stop_token_ids or ()):
            raise ValueError("stop_token_ids must be in [0, 31]")

    planted = verify_with_f7s_fix if len(inspect.signature(released).parameters) > 1 else verify_without_vocab
    refused = pytest.raises(ServerRefuses, match=r"stop_token_ids must be in \[0, 31\]")
    with mock.patch.object(SamplingParams, "verify", planted), refused:
        run_prepare_for_prebuilt(target, batch, "cpu")


def test_the_tokenizers_additional_stop_token_is_the_releases_own() -> None:
    """The tokenizer stand-in holds its additional stop token in its added vocabulary as ``<|eom_id|>``, and the
    release's own ``attach_additional_stop_token_ids`` makes it a stop token; the release's penalizer holds it back
    for a request asking for ``min_new_tokens`` (P27's oracle expects it)."""
    from pdverify.model.batch import PrebuiltBatch, Request, SamplingSettings
    from pdverify.oracle.prebuilt import expected_min_new_tokens_stops
    from pdverify.targets.layouts import run_prepare_for_prebuilt

    req = Request(0, 0, 1, [0], [], sampling=SamplingSettings(min_new_tokens=2))
    batch = PrebuiltBatch([req], [[1]], eos_token_id=2, additional_stop_token_ids=(7,))
    out = run_prepare_for_prebuilt(release_target(), batch, "cpu")
    tokenizer = out.batch_object.reqs[0].tokenizer
    assert tokenizer.get_added_vocab() == {"<|eom_id|>": 7} and tokenizer.additional_stop_token_ids == {7}
    orchestrator = out.sampling_info_returned.penalizer_orchestrator
    penalizer = next(p for p in vars(orchestrator).get("penalizers", {}).values() if hasattr(p, "stop_token_penalties"))
    held = set(torch.isinf(penalizer.stop_token_penalties[0]).nonzero().flatten().tolist())
    assert expected_min_new_tokens_stops(batch) == [held] and held == {2, 7}
