"""The ``transfer_queue`` unit on a released SGLang: one pass of decode's own ``DecodeTransferQueue.pop_transferred``
over the queued transfers of a ``TransferQueueCase``, every release with a KV transport (0.4.5.post1 on: before, the
placeholder receiver lands no metadata row).

SGLang's own code on the path:

* prefill: each transferred request's metadata row written by the release's own writer into its own buffers -
  ``MetadataBuffers.set_buf`` on a real ``Req`` holding its first token, that token's logprob (where the request
  asks for logprobs) and its cached prompt tokens (0.4.6.post5 on), or the bootstrap queue's
  ``store_prefill_results`` into the output-id buffer (before, when the metadata buffers were a list of tensors) -
  and sent into decode's slot by the case's transport in the release's form: ``MooncakeKVManager.send_aux`` (one
  buffer and ``transfer_sync``; every buffer and ``batch_transfer_sync``; ``_transfer_data`` from 0.5.1) or
  ``NixlKVManager.send_aux`` (0.4.5.post3 on: its descriptors, an agent's WRITE), over a manager that holds
  prefill's registered buffers;
* decode: the release's ``DecodeTransferQueue`` with its own ``MetadataBuffers`` (or buffer list), real ``Req`` and
  ``DecodeRequest`` entries, the real ``ReqToMetadataIdxAllocator`` holding the queued requests' slots, and
  ``pop_transferred`` - ``poll_and_all_reduce`` over a one-rank gloo group, the metadata gate
  (``_poll_with_metadata_gate``, 0.5.13 on), ``_commit_transfer_to_req`` (0.5.5.post1 on), ``prepare_abort``, the
  one-token finish (``check_finished``).

Stubbed: each request's KV receiver (its ``poll`` reports the drawn state; a failed one's ``failure_exception``
raises the peer's error), the transfer engine and the NIXL agent (a byte copy of each block, what they write), the
decode scheduler's output streamer and metrics (recorded, off) and the KV release of a request that leaves the queue
(``release_kv_cache`` / the tree cache: the pre-allocated pages are not this unit's; nothing is cached here).
"""

from __future__ import annotations

import contextlib
import ctypes
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, cast
from unittest import mock

import torch

from pdverify.model.transfer_queue import PROMPT, VOCAB, Transfer, TransferQueueCase, TransferTrace
from pdverify.targets.sglang_dispatch import raised

HIDDEN_SIZE = 16
"""The metadata buffers' hidden-state width (the speculative path, off here, reads it)."""
_POLL = {"success": "Success", "transferring": "Transferring", "waiting": "WaitingForInput",
         "bootstrapping": "Bootstrapping", "failed": "Failed"}  # fmt: skip


def _metadata_buffers(sg: Any, slots: int) -> Any:  # pragma: no cover - conformance venv
    """One side's metadata buffers as the release's scheduler builds them: ``MetadataBuffers`` (0.4.6.post5 on, the
    arguments its constructor takes), else the one int32 output-id buffer of ``(slots, 16)``."""
    if sg.MetadataBuffers is None:
        return [torch.zeros((slots, 16), dtype=torch.int32, device="cpu")]
    params = inspect.signature(sg.MetadataBuffers.__init__).parameters
    wanted = {"hidden_size": HIDDEN_SIZE, "dtype": torch.bfloat16, "hidden_states_dtype": torch.bfloat16,
              "max_sampling_mask_tokens": 16}  # fmt: skip
    return sg.MetadataBuffers(slots, **{k: v for k, v in wanted.items() if k in params})


def _buffer_infos(rows: Any) -> tuple[list[int], list[int]]:  # pragma: no cover - conformance venv
    """The registered buffers' addresses and row lengths (``kv_args.aux_data_ptrs`` / ``aux_item_lens``)."""
    if isinstance(rows, list):  # the scheduler's registration of the buffer list (PrefillBootstrapQueue)
        return [b.data_ptr() for b in rows], [b[0].nbytes for b in rows]
    ptrs, _, item_lens = rows.get_buf_infos()
    return list(ptrs), list(item_lens)


def aux_transfer(
    sg: Any, transport: str, prefill_rows: Any, decode_rows: Any, source: int, destination: int
) -> None:  # pragma: no cover
    """Prefill's aux transfer of a request's row by ``transport``: the release's own ``MooncakeKVManager.send_aux``
    or ``NixlKVManager.send_aux`` on a manager holding prefill's registered buffers; the engine (the NIXL agent)
    copies each block byte for byte."""
    ptrs, item_lens = _buffer_infos(prefill_rows)
    dst_ptrs, _ = _buffer_infos(decode_rows)
    if transport == "nixl":
        _nixl_send_aux(sg, ptrs, item_lens, dst_ptrs, source, destination)
        return

    def blocks(session: Any, src: list[int], dst: list[int], lengths: list[int]) -> int:
        for s, d, n in zip(src, dst, lengths, strict=True):
            ctypes.memmove(d, s, n)
        return 0

    engine = SimpleNamespace(transfer_sync=lambda session, s, d, n: blocks(session, [s], [d], [n]),
                             batch_transfer_sync=blocks)  # fmt: skip
    manager = SimpleNamespace(
        kv_args=SimpleNamespace(aux_data_ptrs=ptrs, aux_item_lens=item_lens),
        engine=engine,
        enable_custom_mem_pool=False,
        custom_mem_pool_type=None,
        _transfer_data=lambda session, triples: blocks(session, *map(list, zip(*triples, strict=True))),
    )
    params = list(inspect.signature(inspect.unwrap(sg.MooncakeKVManager.send_aux)).parameters)
    if params[1] == "req":  # 0.5.1 on: (req: TransferInfo, prefill_aux_index, dst_aux_ptrs)
        info = SimpleNamespace(dst_aux_index=destination, mooncake_session_id="pdverify-session")
        status = sg.MooncakeKVManager.send_aux(manager, info, source, dst_ptrs)
    else:  # (mooncake_session_id, prefill_aux_index, dst_aux_ptrs, dst_aux_index)
        status = sg.MooncakeKVManager.send_aux(manager, "pdverify-session", source, dst_ptrs, destination)
    if status != 0:
        raise AssertionError(f"the aux transfer failed (status {status})")


def _nixl_send_aux(  # pragma: no cover - conformance venv
    sg: Any, ptrs: list[int], item_lens: list[int], dst_ptrs: list[int], source: int, destination: int
) -> None:
    """NIXL's aux transfer: the release's own ``NixlKVManager.send_aux`` (its descriptors: ``(address, length,
    device)`` per block) over an agent whose WRITE copies each source block to its destination block."""

    def transfer(handle: Any) -> str:
        src, dst = handle
        for (s, n, _), (d, m, _) in zip(src, dst, strict=True):
            if n != m:
                raise AssertionError(f"a NIXL WRITE of {n} bytes into a block of {m}")
            ctypes.memmove(d, s, n)
        return "DONE"

    agent = SimpleNamespace(get_xfer_descs=lambda addrs, *a, **kw: list(addrs),
                            initialize_xfer=lambda op, src, dst, *a, **kw: (src, dst), transfer=transfer)  # fmt: skip
    manager = SimpleNamespace(kv_args=SimpleNamespace(aux_data_ptrs=ptrs, aux_item_lens=item_lens), agent=agent)
    if hasattr(sg.NixlKVManager, "_post_xfer"):  # 0.5.23 posts through its own error-raising helper
        manager._post_xfer = lambda handle, message: sg.NixlKVManager._post_xfer(manager, handle, message)
    params = inspect.signature(inspect.unwrap(sg.NixlKVManager.send_aux)).parameters
    extra = ["pdverify-notif"] if "notif" in params else []  # 0.5.23 sends no notification with the aux
    sg.NixlKVManager.send_aux(manager, "pdverify-peer", source, dst_ptrs, destination, *extra)


def _write_row(sg: Any, rows: Any, req: Any, slot: int, token: int) -> None:  # pragma: no cover - conformance venv
    """Prefill's write of the request's metadata row: ``set_buf`` on the request holding its first token, or the
    bootstrap queue's ``store_prefill_results`` where the buffers are a list (before 0.4.6.post5)."""
    if isinstance(rows, list):
        sg.PrefillBootstrapQueue.store_prefill_results(SimpleNamespace(metadata_buffers=rows), slot, token)
        return
    req.metadata_buffer_index = slot
    rows.set_buf(req)


def _model_eos_ids(case: TransferQueueCase) -> Any:  # pragma: no cover - conformance venv
    """What the release's scheduler gives each request as ``eos_token_ids``: its ``ModelConfig``'s eos ids read from a
    configuration whose ``eos_token_id`` is the case's (the release's own reader - ``get_hf_eos_token_id`` or
    ``_get_hf_eos_token_id`` - on it, no generation config), so a model that names none gets what the release makes
    of that (an empty set, or None where a release keeps None)."""
    from sglang.srt.configs.model_config import ModelConfig

    named = None if case.eos_token_ids is None else list(case.eos_token_ids)
    read = getattr(ModelConfig, "_get_hf_eos_token_id", None) or getattr(ModelConfig, "get_hf_eos_token_id", None)
    if read is None:
        return None if named is None else set(named)
    return read(SimpleNamespace(hf_config=SimpleNamespace(eos_token_id=named), hf_generation_config=None))


def _logprob_lists(req: Any) -> Any:  # pragma: no cover - conformance venv
    """Where the release's ``Req`` keeps its logprob lists: ``req.logprob`` (a ``ReqLogprob``, 0.5.22 on), or the
    request itself."""
    held = getattr(req, "logprob", None)
    return held if held is not None and hasattr(held, "output_token_logprobs_val") else req


def _prefill_outputs(req: Any, t: Transfer) -> None:  # pragma: no cover - conformance venv
    """What prefill's request holds when ``set_buf`` writes its row: the first token, its logprob and top logprobs
    (prefill's logprob processing: the value and the token id, the top ``top_logprobs_num`` pairs in rank order, the
    named ids' logprobs - here -1.0 each - where it named some) and the prefix-cache hit."""
    req.output_ids = [t.first_token]
    req.cached_tokens = t.cached_tokens
    if t.logprob is not None:
        lists = _logprob_lists(req)
        lists.output_token_logprobs_val, lists.output_token_logprobs_idx = [t.logprob], [t.first_token]
        lists.output_top_logprobs_val = [[v for v, _ in t.top_logprobs]]
        lists.output_top_logprobs_idx = [[i for _, i in t.top_logprobs]]
        if t.token_ids_logprob is not None:
            lists.output_token_ids_logprobs_val = [[-1.0 for _ in t.token_ids_logprob]]
            lists.output_token_ids_logprobs_idx = [list(t.token_ids_logprob)]


def _logprob_fields(t: Transfer) -> dict[str, Any]:
    """What the request asks of logprobs, as the API carries it: ``return_logprob`` with ``top_logprobs_num`` and the
    named ids (``token_ids_logprob``) where drawn; nothing for a request asking for none."""
    if t.logprob is None:
        return {}
    fields: dict[str, Any] = {"return_logprob": True, "top_logprobs_num": len(t.top_logprobs)}
    if t.token_ids_logprob is not None:
        fields["token_ids_logprob"] = list(t.token_ids_logprob)
    return fields


def _admission(sg: Any, prompt: list[int]) -> Callable[[Transfer], str]:  # pragma: no cover - conformance venv
    """The server's admission of each request: the release's own ``TokenizerManager._validate_one_request`` (0.4.9
    on; ``_validate_token_len`` from 0.4.6; before, the checks are inline in ``_tokenize_one_request`` and read no
    logprob field: admitted) on the request as ``GenerateReqInput`` - normalised by its own
    ``normalize_batch_and_arguments`` - run on a tokenizer manager holding the model's vocabulary and context length
    (built once per pass), under the prefill server's published configuration (``server_published``). Each call
    gives ``"admitted"``, or ``"refused: <its error>"`` (what the client gets back)."""
    from sglang.srt.managers.io_struct import GenerateReqInput

    from pdverify.targets.sglang_context import server_published
    from pdverify.targets.sglang_dispatch import tokenizer_manager_shell

    validate = getattr(sg.TokenizerManager, "_validate_one_request", None)
    if validate is None and not hasattr(sg.TokenizerManager, "_validate_token_len"):
        # to 0.4.5.post3 the checks are inline in _tokenize_one_request (it needs a tokenizer): they read the prompt's
        # length and max_new_tokens, no logprob field, and admit every drawn request (24 tokens, at most 16 new)
        return lambda t: "admitted"
    manager = tokenizer_manager_shell(sg.TokenizerManager)
    check = validate if validate is not None else type(manager)._validate_token_len

    def admit(t: Transfer) -> str:
        fields = {"input_ids": list(prompt), "sampling_params": {"max_new_tokens": t.max_new_tokens},
                  **_logprob_fields(t)}  # fmt: skip
        scope = server_published("prefill")
        try:
            with scope if scope is not None else contextlib.nullcontext():
                obj = GenerateReqInput(**fields)
                obj.normalize_batch_and_arguments()
                check(manager, obj, list(prompt))
        except ValueError as e:
            return f"refused: {e}"
        return "admitted"

    return admit


def _receiver(sg: Any, state: str) -> Any:  # pragma: no cover - conformance venv
    def failure_exception() -> None:
        raise RuntimeError("the prefill peer reported the KV transfer failed")

    poll = getattr(sg.KVPoll, _POLL[state])
    return SimpleNamespace(poll=lambda: poll, clear=lambda: None, failure_exception=failure_exception)


@contextmanager
def released(sg: Any) -> Iterator[None]:  # pragma: no cover - conformance venv
    """A request that leaves the queue gives its pre-allocated KV back (``release_kv_cache``, where the module has
    it): not this unit's pages, recorded as nothing."""
    with mock.patch.object(sg.decode, "release_kv_cache", lambda *a, **kw: None, create=True):
        yield


def decode_transfer_queue(  # pragma: no cover - conformance venv
    sg: Any, scheduler: Any, rows: Any, entries: list[Any], slots: int, tree_cache: Any
) -> Any:
    """Decode's ``DecodeTransferQueue`` holding ``entries`` over its own metadata ``rows`` (``slots`` of them), with
    what ``pop_transferred`` and ``_commit_transfer_to_req`` read: the scheduler, a one-rank gloo group, staging, host
    receive and deferred release off, and SGLang's own ``ReqToMetadataIdxAllocator`` with every entry's slot held
    (state injection: the allocator hands slots out in order)."""
    from pdverify.targets.sglang_group import one_rank_gloo

    queue = sg.DecodeTransferQueue.__new__(sg.DecodeTransferQueue)
    queue.queue = list(entries)
    queue.gloo_group = one_rank_gloo()
    queue.metadata_buffers = rows
    queue.scheduler = scheduler
    queue.tree_cache = tree_cache
    queue.tp_rank = 0
    queue.spec_algorithm = scheduler.spec_algorithm
    queue.enable_staging = queue.enable_host_receive = queue.enable_deferred_kv_release = False
    queue._skipped_checksum_signatures = set()
    allocator = sg.ReqToMetadataIdxAllocator(slots)
    held = {e.metadata_buffer_index for e in entries}
    allocator.free_slots = type(allocator.free_slots)(i for i in range(slots) if i not in held)
    queue.req_to_metadata_buffer_idx_allocator = allocator
    return queue


def _committed_logprob(req: Any, asked: float | None) -> tuple[float, int] | None:  # pragma: no cover
    """The first token's ``(logprob, token id)`` decode committed for a request that asked for logprobs (the last of
    its lists; ``(nan, -1)`` when the lists are empty), None for one that did not."""
    if asked is None:
        return None
    lists = _logprob_lists(req)
    vals, idxs = lists.output_token_logprobs_val or [], lists.output_token_logprobs_idx or []
    return (float(vals[-1]), int(idxs[-1])) if vals and idxs else (float("nan"), -1)


def _committed_top(req: Any, t: Transfer) -> tuple[tuple[float, int], ...] | None:  # pragma: no cover
    """The first token's top logprobs decode committed, ``(logprob, token id)`` pairs (the last row of its top
    lists; empty when the lists are), None for a request that asked for none."""
    if not t.top_logprobs:  # top logprobs come with logprob only (the model refuses them alone)
        return None
    lists = _logprob_lists(req)
    vals, idxs = lists.output_top_logprobs_val or [], lists.output_top_logprobs_idx or []
    if not vals or not idxs:
        return ()
    return tuple((float(v), int(i)) for v, i in zip(vals[-1], idxs[-1], strict=False))


def _committed_rows(req: Any, t: Transfer) -> tuple[int, int | None, int | None] | None:  # pragma: no cover
    """The rows each output logprob list the request asked for holds after the commit (None for a list it did not
    ask for; None for a request asking for no logprobs): the lists the output streamer slices with one offset."""
    if t.logprob is None:
        return None
    lists = _logprob_lists(req)

    def count(name: str) -> int:
        return len(getattr(lists, name, None) or [])

    top = count("output_top_logprobs_val") if t.top_logprobs else None
    ids = None if t.token_ids_logprob is None else count("output_token_ids_logprobs_val")
    return (count("output_token_logprobs_val"), top, ids)


def _token(req: Any) -> int | None:  # pragma: no cover - conformance venv
    """The first output token decode holds for ``req``: its last output id, or before 0.4.6.post5 the id the queue
    set aside for the batch (``transferred_output_id``)."""
    if req.output_ids:
        return int(req.output_ids[-1])
    held = getattr(req, "transferred_output_id", None)
    return None if held is None else int(held)


def pp_transfer_step(queue: Any, good: list[str], bad: list[str]) -> list[Any]:  # pragma: no cover - conformance
    """A pipeline-parallel decode stage's transfer step: the release's own ``SchedulerPPMixin
    .process_decode_transfer_queue`` (the decode PP event loop's, 0.5.7 on) on a scheduler holding ``queue``, given
    what the stages agreed - the transfers that succeeded on every stage (``good``) and failed on some (``bad``) - in
    the release's form: where the pass takes ``pp_good_rids`` (F11's fix) the two lists; in every release, the one
    list the PP loop builds, the rids every stage finished, succeeded or failed alike
    (``_pp_pd_get_decode_transferred_ids``: good + bad). Returns the requests the step released to the waiting queue
    (checked against the rids it returns)."""
    from sglang.srt.managers.scheduler_pp_mixin import SchedulerPPMixin

    waiting: list[Any] = []
    # the scheduler is a stand-in (a SimpleNamespace where ``Scheduler`` is annotated)
    stage = cast(Any, SimpleNamespace(disagg_decode_transfer_queue=queue, waiting_queue=waiting, enable_hisparse=False))
    if not hasattr(queue, "_deferred_releases"):  # 0.5.22 on: the step first resolves held deferred releases
        queue._deferred_releases = []
    lists = "pp_good_rids" in inspect.signature(queue.pop_transferred).parameters
    result = SchedulerPPMixin.process_decode_transfer_queue(stage, cast(Any, [good, bad] if lists else good + bad))
    released_rids = result[0] if lists and result is not None else result
    if released_rids is None or list(released_rids) != [r.rid for r in waiting]:
        raise AssertionError(f"process_decode_transfer_queue returned {result!r}, released {[r.rid for r in waiting]}")
    return waiting


def sglang_transfer_queue(case: TransferQueueCase, device: str) -> TransferTrace:  # pragma: no cover - conformance
    """One ``pop_transferred`` pass of the installed release over ``case`` (host-side: ``device`` is not read)."""
    from pdverify.targets.sglang_request import release_request

    sg = _modules()
    prefill_rows, decode_rows = _metadata_buffers(sg, case.slots), _metadata_buffers(sg, case.slots)
    prompt = [(7 * t + 11) % 30000 for t in range(PROMPT)]
    eos = _model_eos_ids(case)
    entries, requests, queued_at = [], [], []
    outcomes: list[str] = []
    admit = _admission(sg, prompt)
    for i, t in enumerate(case.transfers):
        outcomes.append(admit(t))
        if outcomes[-1] != "admitted":  # turned away at the door: never queued on either side
            continue
        fields: dict[str, Any] = {
            "bootstrap_host": "10.0.0.1",
            "bootstrap_port": 8998,
            "bootstrap_room": t.room,
            "eos_token_ids": eos,
            "vocab_size": VOCAB,
        }
        fields.update(_logprob_fields(t))  # its logprobs, top logprobs and named ids' where drawn
        if t.poll == "success":  # the receiver reports success once every chunk and prefill's row have landed
            preq = release_request(f"pdverify-tq-{i}", prompt, max_new_tokens=t.max_new_tokens, **fields)
            _prefill_outputs(preq, t)
            try:
                _write_row(sg, prefill_rows, preq, t.prefill_slot, t.first_token)
            except Exception as e:  # raised in prefill's scheduler loop, which nothing catches: prefill dies
                outcomes[-1] = f"raised: {raised(e)}"
            else:
                aux_transfer(sg, case.transport, prefill_rows, decode_rows, t.prefill_slot, t.decode_slot)
        req = release_request(f"pdverify-tq-{i}", prompt, max_new_tokens=t.max_new_tokens, **fields)
        req.sampling_params.normalize(None)  # as the tokenizer manager hands it over (stop strings made lists)
        requests.append(req)
        queued_at.append(i)
        entries.append(
            sg.DecodeRequest(req=req, kv_receiver=_receiver(sg, t.poll), metadata_buffer_index=t.decode_slot)
        )

    streamed: list[str] = []
    stream = SimpleNamespace(stream_output=lambda reqs, *a, **kw: streamed.extend(r.rid for r in reqs))
    tree_cache = SimpleNamespace(cache_finished_req=lambda *a, **kw: None, unlock=lambda *a, **kw: None,
                                 finish=lambda *a, **kw: None)  # fmt: skip
    scheduler = SimpleNamespace(
        stream_output=stream.stream_output,
        output_streamer=stream,
        enable_metrics=False,
        tp_rank=0,
        metrics_reporter=SimpleNamespace(enable_metrics=False),
        enable_decode_hicache=False,
        enable_hisparse=False,
        kv_checksum_computer=None,
        spec_algorithm=SimpleNamespace(is_none=lambda: True),
        batch_result_processor=SimpleNamespace(_maybe_update_reasoning_tokens=lambda *a, **kw: None),
        # the decode server's arguments (0.5.9-0.5.18's commit asks whether the transfer is the fake backend)
        server_args=SimpleNamespace(disaggregation_transfer_backend="mooncake", disaggregation_mode="decode"),
        tree_cache=tree_cache,
    )
    queue = decode_transfer_queue(sg, scheduler, decode_rows, entries, case.slots, tree_cache)
    allocator = queue.req_to_metadata_buffer_idx_allocator
    before = list(allocator.free_slots)

    failure = ""
    returned: list[Any] = []
    try:
        with released(sg):
            if case.pp_step:  # a PP stage: its scheduler's own step, given what the stages agreed (in queue order)
                agreed = [(f"pdverify-tq-{i}", case.transfers[i].consensus) for i in queued_at]
                returned = pp_transfer_step(queue, good=[r for r, c in agreed if c == "good"],
                                            bad=[r for r, c in agreed if c == "bad"])  # fmt: skip
            else:
                returned = list(queue.pop_transferred())
    except Exception as e:  # the pass raising takes the scheduler down: a verdict, reported
        failure = raised(e)
    left = {id(e.req) for e in queue.queue}
    # 0.4.6-0.4.6.post4 return the DecodeRequest entries (their caller takes each entry's req), the rest the Req
    returned_ids = {id(r.req if isinstance(r, sg.DecodeRequest) else r) for r in returned}
    committed, tokens, aborted = [], [], []
    logprobs: list[tuple[float, int] | None] = []
    cached: list[int] = []
    top: list[tuple[tuple[float, int], ...] | None] = []
    rows: list[tuple[int, int | None, int | None] | None] = []
    for i, req in zip(queued_at, requests, strict=True):  # i: the case's index of each queued request
        if id(req) in left:
            continue
        reason = req.finished_reason
        if isinstance(reason, sg.FINISH_ABORT):
            aborted.append(i)
            continue
        token = _token(req)
        # committed: handed to the running batch, or finished by its first token (and so streamed)
        if token is not None and (id(req) in returned_ids or (reason is not None and req.rid in streamed)):
            committed.append(i)
            tokens.append(token)
            logprobs.append(_committed_logprob(req, case.transfers[i].logprob))
            cached.append(int(getattr(req, "cached_tokens", 0) or 0))
            top.append(_committed_top(req, case.transfers[i]))
            rows.append(_committed_rows(req, case.transfers[i]))
    freed = sorted(set(allocator.free_slots) - set(before))
    index = {id(r): i for i, r in zip(queued_at, requests, strict=True)}
    queue_order = [index[id(e.req)] for e in queue.queue]
    if queue_order != sorted(queue_order):
        failure = failure or f"the queue after the pass is out of order: {queue_order}"
    return TransferTrace(committed=tuple(committed), tokens=tuple(tokens), aborted=tuple(aborted),
                         queued=tuple(queue_order), freed=tuple(freed), raised=failure, logprobs=tuple(logprobs),
                         cached=tuple(cached), top=tuple(top), rows=tuple(rows),
                         prefill=tuple(outcomes))  # fmt: skip


def _modules() -> Any:  # pragma: no cover - conformance venv
    from sglang.srt.disaggregation import decode, prefill
    from sglang.srt.disaggregation import utils as dutils
    from sglang.srt.disaggregation.base.conn import KVPoll
    from sglang.srt.disaggregation.mooncake.conn import MooncakeKVManager
    from sglang.srt.managers.schedule_batch import FINISH_ABORT
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    nixl: Any = None  # before 0.4.5.post3 (#5477) no NIXL transport: never drawn there
    try:
        from sglang.srt.disaggregation.nixl.conn import NixlKVManager

        nixl = NixlKVManager
    except ImportError:
        pass
    return SimpleNamespace(
        decode=decode,
        DecodeRequest=decode.DecodeRequest,
        DecodeTransferQueue=decode.DecodeTransferQueue,
        PrefillBootstrapQueue=prefill.PrefillBootstrapQueue,
        MetadataBuffers=getattr(dutils, "MetadataBuffers", None),
        ReqToMetadataIdxAllocator=dutils.ReqToMetadataIdxAllocator,
        KVPoll=KVPoll,
        MooncakeKVManager=MooncakeKVManager,
        NixlKVManager=nixl,
        FINISH_ABORT=FINISH_ABORT,
        TokenizerManager=TokenizerManager,
    )
