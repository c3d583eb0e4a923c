"""The ``sglang`` target for whichever SGLang release is installed: each unit resolved to that release's own code.

Releases moved and renamed the units under test (read from the released wheels, 0.4.4.post2 to 0.5.23):

* ``kv_to_page_indices`` / ``kv_to_page_num``: ``disaggregation/utils.py`` until 0.5.10, ``mem_cache/common.py``
  from 0.5.11. Until 0.5.15 it takes the host numpy array its call sites made with ``.cpu().numpy()``; the
  target makes the same conversion before the call (the release's own call-site code), so its result is what
  the release's sender saw. From 0.5.16 (#31173) it takes the tensor itself.
* ``page_align_floor`` from 0.5.11; ``suffix_page_indices``, ``minimax_index_transfer_pages`` and
  ``translate_token_ids`` (``sglang/kernels/ops/memory/virtual_slot.py``) in 0.5.23.
* ``prepare_for_prebuilt_extend`` (in ``disaggregation/decode.py`` to 0.4.6.post4, in its own mixin module from
  0.4.6.post5, to 0.5.5) then ``prepare_for_prebuilt`` (0.5.6 on), over requests
  whose names changed four times (``pdverify.targets.layouts``: ``sglang-0.5.23`` from 0.5.22, ``sglang-any``
  before, whose requests carry every era's names, consistent with one another).
* The function-level sender units (``send_kv_chunk``, ``decode_page_indices``: P9-P14, M1) are one call of the
  release's ``_send_kv_chunk`` with its real KV sender (``CommonKVSender``; Mooncake's on 0.5.21 and 0.5.22, whose
  ``CommonKVSender.send`` is a placeholder the transports override) and its ``_transfer_page_indices``, from 0.5.21;
  from 0.4.5.post2 to 0.5.20, where the same steps are inline, one call of its ``send_kv_chunk`` and one pass of its
  ``pop_preallocated`` (``sglang_inline_units``).
* The scheduler-level units (``prefill_exchange``, ``kv_sender``, ``bootstrap``, ``decode_prealloc``,
  ``decode_queue``, ``transfer_queue``, ``wire_roundtrip``) are driven through SGLang's own methods by drivers written
  against the 0.5.23 form (``CommonKVManager.prepare_send_state_indices``, ``build_receiver_metadata_message``, which
  0.5.22 lacks).
  Earlier releases have these paths in other forms; for them the unit is not supplied and ``unit_sources`` says
  why, so the report shows "not applicable (... no driver for this release's form)", never a pass. The
  ``pop_preallocated`` driver (``decode_queue``) runs on every release (``DECODE_QUEUE_DRIVER_FROM``), the
  ``pop_transferred`` driver (``transfer_queue``) on every release with a KV transport (``TRANSFER_QUEUE_DRIVER_FROM``),
  the KV sender's
  from 0.4.5.post1 (``KV_SENDER_DRIVER_FROM``) and bootstrap finalisation's from 0.4.5.post1
  (``BOOTSTRAP_DRIVER_FROM``). The tokenizer manager's ``generate_request`` (``generate_dispatch``) is driven on every
  release whose requests carry a bootstrap room (``GENERATE_DISPATCH_DRIVER_FROM``).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from typing import Any

import torch
from packaging.version import Version

from pdverify.targets.calls import recording
from pdverify.targets.protocol import SCHEDULER_UNITS, Target, TargetError
from pdverify.targets.sglang_allocator import sglang_pages
from pdverify.targets.sglang_context import prebuilt_scheduler
from pdverify.targets.sglang_request import sglang_request

SCHEDULER_DRIVERS_FROM = "0.4.5.post1"
"""The first release the prefill exchange driver runs on: the first with a KV transport (``KV_TRANSPORT_FROM``; the
decode pre-allocation driver's gate is ``DECODE_PREALLOC_DRIVER_FROM``). The driver runs the release's own bootstrap
queue (``pop_bootstrapped``), early send and ``send_kv_chunk`` with its real KV sender, and meets each form:

* 0.4.5.post1-0.4.6.post4: ``send_kv_chunk(req, token_id)`` (the last chunk is the one called with the first output
  token, which goes to the metadata buffer through the bootstrap queue's ``store_prefill_results``; #6019), the queue
  named ``disagg_prefill_pending_queue`` to 0.4.5.post3, token units at page size 1 on 0.4.5.post1 (#5561);
* to 0.4.7 no ``common/conn.py``: Mooncake's sender and manager stand alone; to 0.5.9 the poll's all-reduce is over
  the queue's ``gloo_group``, a failed request is aborted by the queue and streamed out (``stream_output``), and the
  request's stage latency is recorded (``add_latency``); to 0.5.1 no ``environ`` module and no ``utils.common.Range``;
* the chunk's end as ``fill_ids`` (to 0.5.12), ``fill_len`` (0.5.13, 0.5.14), ``extend_range`` / ``extend_end``
  after; to 0.5.13 no runtime context (every parallel leaf is read from the manager's ``server_args``);
* 0.5.15 and 0.5.16 read the server-argument leaves (``enable_dsa_cache_layer_split``, the DP width and balance
  method) from the KV manager's own ``server_args``, their Mooncake sender forwards no token count (``num_kv_tokens``,
  #32837: the driver reads each send's count off the release's ``req.start_send_idx``), their staging has no grid
  (S12's grid clause, ``FROM_STAGING_GRID``, #31217), an early-send prefix off the page is prefill-side DCP's
  (``dcp_prefill``, #32837) and the router's DP placement is not passed to the sender in 0.5.15 (#27546: T13);
* 0.5.17-0.5.20: the parallel context refuses to override a server-argument leaf (``_parallel_override``), 0.5.19's
  unified allocator lives in ``mem_cache/multi_ended_allocator.py``, 0.5.17's send reads no staging grid (T12);
* 0.5.21 on: ``_send_kv_chunk`` / ``_transfer_page_indices`` split out (0.5.21's chunk as ``extend_range``, 0.5.22's
  ``set_kv_checksum(req, digest)``, 0.5.23's hooks called where they exist).

Inputs of later features are outside an earlier release's domain (``PrefillCase.input_features``): the early send
(#29316, 0.5.15), attention-DP rank registration (#19168) and attention CP (#19504, #19765, 0.5.10), the staging buffer
(#19890, 0.5.10), decode-side prefixes (0.5.11), pages (#5561), the per-type state lists (#24932, 0.5.12): to 0.5.11 one
state payload (#10912, 0.5.3.post3), SWA's or DSA's, picked by the KV pool's class (``_payload_pool_class``)."""
DECODE_PREALLOC_DRIVER_FROM = "0.4.4.post2"
"""The first release the decode pre-allocation driver runs on: every release (``pop_preallocated`` and ``_pre_alloc``
are decode's from the first PD release). The forms it meets: to 0.5.18 the request's KV bookkeeping is on the request,
``disable_radix_cache`` in ``server_args``, eviction by ``tree_cache.evict``; to 0.5.16 no ``get_disagg``, the C128
ring's speculative setting from the global server arguments; 0.5.13 and 0.5.14 record the chunk with
``set_extend_input_len``; DeepSeek-V4's request state through ``get_dsv4_c128_state_indices`` /
``clear_c128_req_state`` (``request_state_transfer_indices`` from 0.5.21) and, in 0.5.18 and 0.5.19, named
``C128_STATE`` (``sglang_decode.STATE_TYPE_NAMES``) with the SWA translation ``translate_loc_from_full_to_swa``;
0.5.11 and 0.5.12 match the decode prefix as ``(indices, length)`` (``DecodePrefixMatch`` and decode HiCache from
0.5.13, #26227: the ``decode_hicache`` input feature), 0.5.12 names DSA ``NSA``; to 0.5.11 one state payload chosen by
the KV pool's type (``isinstance`` of ``SWAKVPool`` / ``NSATokenToKVPool``: the driver builds the pool's class; one
list per ``StateType`` from 0.5.12, #24932: the ``state_lists`` input feature), the budget named
``_allocatable_tokens``; to 0.5.10 no decode prefix (``decode_prefixes``, 0.5.11: D3, D4 and D1's announced-prefix
clause are not applicable) and the receiver's ``init`` for ``send_metadata``; to 0.5.7 the hybrid SWA allocator is
token-granular (``swa_paged_pool``, #16296, 0.5.8); to 0.5.3.post3 no state payload (``state_payloads``, #10912) and
``pop_preallocated`` returns the admitted list alone; to 0.5.1 the Triton ``alloc_extend_kernel`` also returns its
page count (``AllocExtendKernel`` meets both); to 0.4.10 the allocator takes no ``need_sort``, to 0.4.7.post1 it lives
in ``mem_cache/paged_allocator.py``; to 0.4.6.post5 decode's rows are a plain ``ReqToTokenPool``; to 0.4.7 the page list
is int64 (``FROM_INT32_WIRE``: D1's int32 clause); to 0.4.5.post1 token slots (``paged_transfer``, #5561: page size 1
only) and to 0.4.4.post4 the token-level ``TokenToKVPoolAllocator``."""
WIRE_DRIVER_FROM = "0.4.5.post1"
"""The first release the wire driver runs on: the first with a metadata wire (``KV_TRANSPORT_FROM``). The driver
records the frames the Mooncake receiver sends its prefill peer - the one peer of ``bootstrap_info`` with the
buffers' addresses in every message (0.4.5.post1-0.4.6.post4), each of ``bootstrap_infos`` after; through
``_connect`` (to 0.4.9.post3), ``_connect_to_bootstrap_server`` (0.4.9.post4 on); ``init``, then ``send_metadata``
from 0.5.10; ``build_receiver_metadata_message`` in 0.5.23 - and W2 draws the page list in the dtype the release's
decode sends (int64 before #7214, 0.4.7.post1: the ``int32_wire`` input feature)."""
KV_TRANSPORT_FROM = "0.4.5.post1"
"""The first release with a KV transport (Mooncake's, ``disaggregation/mooncake/conn.py``): 0.4.4.post2-0.4.5 ship only
``disaggregation/conn.py``'s placeholder ``KVSender`` / ``KVReceiver``, which move nothing and carry no metadata, so
those releases have no KV sender (K1) and no metadata wire (W2) to check: no such code."""
TRANSPORT_UNITS = (
    "prefill_exchange",
    "kv_sender",
    "bootstrap",
    "wire_roundtrip",
    "send_kv_chunk",
    "decode_page_indices",
    "transfer_queue",
)
KV_SENDER_DRIVER_FROM = "0.4.5.post1"
"""The first release the ``kv_sender`` driver runs on: the first with a KV transport (``KV_TRANSPORT_FROM``). To
0.4.6.post4 prefill's send loop passes the sender each send's destination slice and last flag (``send(kv_indices,
index_slice, is_last)``), and the sender forwards them with aux on the last; from 0.4.6.post5 (#6019) the sender
tracks both itself (K1's placement and last-flag clauses, ``FROM_SENDER_TRACKS``). The driver builds each form:
Mooncake's sender where ``CommonKVSender`` is absent, abstract or its ``send`` a placeholder (to 0.5.22), TP and PP
ranks where the constructor takes them (0.4.8-0.5.21), the state lists where ``send`` takes them (0.5.3.post3 on:
K1's state clause), ``num_kv_tokens`` where it takes that (0.5.17 on, #32837), the DP width where the release reads
it (``sglang_prefill._dp_width``)."""
BOOTSTRAP_DRIVER_FROM = "0.4.5.post1"
"""The first release the ``bootstrap`` driver runs on (K2): the first with a KV transport (``KV_TRANSPORT_FROM``;
before it the sender prefill initialises is a placeholder). 0.4.5.post1 initialises the sender with the prompt's token
count, its page count at page size 1, the only one before paged transfer (#5561, 0.4.5.post2: the ``paged_transfer``
input feature). The driver calls ``PrefillBootstrapQueue.finalize_bootstrap`` from 0.5.13 (#26780) and, before,
``pop_bootstrapped`` over a queue holding the request, where the same steps are inline."""
DECODE_QUEUE_DRIVER_FROM = "0.4.4.post2"
"""The first release the ``pop_preallocated`` driver runs on: every release with PD decode. Before 0.4.7 decode's
request rows are a plain ``ReqToTokenPool`` (``DecodeReqToTokenPool`` from #6980); to 0.4.7 admission has no check
that a request can finish with the running requests retracted (#7196, 0.4.7.post1: the triaged T19), to 0.4.6.post4
no abort scan (#6535, #6558, 0.4.6.post5: T18); the destination list is int64 to 0.4.7 (#7214, the wire's dtype: Q4's
``wire_dtype`` clause, from the first KV transport, 0.4.5.post1) and a token list at page size 1 to 0.4.5.post1
(#5561: the ``paged_transfer`` input feature). To 0.5.10.post1 the pass has no decode prefix and reads its budget
once, taking each admission's prompt length and headroom from it (Q2's and Q3's ``budget_read_once`` clause;
``budget_reread`` from 0.5.11, #19746), hands out request row 0 (Q4's ``padding_row`` clause from 0.5.11, #24243),
has no staging buffer before 0.5.10 (#19890), no ``rids_to_check`` before 0.5.7 (#14945: the driver reads the failed
requests off the queue there) and no priority scheduling before 0.5.3 (#8746); it names the metadata hand-over
``init`` to 0.5.9. The queue has the form it is written against from 0.5.11, the first with a decode prefix
(``DecodePrefixMatch`` from 0.5.13, #26227 - 0.5.11-0.5.12.post1 match as an ``(indices, length)`` pair and stream
through the scheduler's own ``stream_output``, and 0.5.11 budgets through ``_allocatable_tokens``, all met by the
driver; no SWA-tail pre-allocation before 0.5.12, #24857: the ``swa_tail_prealloc`` input feature; no priority sort
before 0.5.12, #25062: T17; the KV bookkeeping on the request to 0.5.18, ``req.kv`` from 0.5.19; the flags read
through ``get_disagg()`` and locks released by receipt from 0.5.20 - 0.5.13 to 0.5.19 read ``scheduler.server_args``
and release by ``dec_lock_ref(node)`` or ``swa_uuid_for_lock``, all met by the driver - no SWA-tail reclaim before
0.5.19, raw SWA charges before 0.5.18 (#33794: T14), no LoRA admission gate before 0.5.20 (#39332: T11), the staging
room registered after the metadata before 0.5.17 (#31217: T15), an aborted request's receiver not cleared to 0.5.13
(#28022: T16), and no rebootstrap before 0.5.16 (#25372: the driver passes ``is_rebootstrap`` only where
``DecodeRequest`` has it; a request whose abort was already streamed is queued only with it), with the destination
list and admission inline to 0.5.20 (``_send_kv_metadata`` / ``_transfer_page_indices`` and
``_required_admission_tokens`` from 0.5.21) and no host receive before 0.5.21 (#40238: the ``host_receive`` input
feature). 0.5.21's lock receipts and ``set_extend_range`` are set on the stand-ins too. The budgets are the case's
(``_allocatable_token_budgets`` and the SWA side's ``_swa_tail_allocatable_token_budget``, less what the pass
committed). Before 0.5.22 the paged allocator's ``alloc_extend`` launches a Triton kernel only;
``sglang_decode.AllocExtendKernel`` runs it on CPU, held to SGLang's own ``alloc_extend_naive`` by a test."""
TRANSFER_QUEUE_DRIVER_FROM = KV_TRANSPORT_FROM
"""The first release the ``pop_transferred`` driver runs on: the first with a KV transport, whose aux transfer lands
prefill's metadata row in decode's (before, the placeholder receiver moves nothing: no row ever lands, and the unit's
input - a transfer done - cannot arise; ``TRANSPORT_UNITS``). So every release that has the path. It meets the list of
metadata tensors before 0.4.6.post5 (prefill's ``store_prefill_results``, ``transferred_output_id``), ``send_aux``'s
three forms, ``_commit_transfer_to_req`` from 0.5.5.post1 and the metadata gate from 0.5.13."""

KV_CHECKSUM_FROM = "0.5.21"
"""The first release with the PD KV checksum (``--disaggregation-enable-kv-checksum``, #39500), and so with the
``kv_checksum`` unit (X2): before it there is no such code. The driver meets 0.5.21's chunk end
(``extend_range.end``), 0.5.21-0.5.22's two-argument ``set_kv_checksum`` and decode's ``all_reduce_flags`` where the
release has it."""
GENERATE_DISPATCH_DRIVER_FROM = KV_TRANSPORT_FROM
"""The first release the ``generate_request`` driver runs on (Q9): the first whose generate request carries a
bootstrap room (``GenerateReqInput.bootstrap_room``, with the first KV transport; before, no request names a KV
transfer). 0.4.5.post1-0.4.5.post2 have no ``bootstrap_port`` field and their ``__getitem__`` hands a batch's requests
no bootstrap fields (#5531, 0.4.5.post3: T31); to 0.5.1.post3 a call expanded into several requests must carry its
bootstrap fields as lists (one room for such a call is #10236's, 0.5.2: the ``scalar_bootstrap_batch`` input
feature); 0.5.23 sends its multimodal features through transports the driver gives nothing to move. The driver
passes the fields the release's ``GenerateReqInput`` declares and gives the manager every state name a release
reads (the weight-update gate's three names, the request states' class and maps)."""
_NO_TRANSPORT = "KV transport (its disaggregation/conn.py KVSender and KVReceiver are placeholders that move nothing)"
ABSENT_BEFORE: dict[str, tuple[str, str]] = {
    **dict.fromkeys(TRANSPORT_UNITS, (KV_TRANSPORT_FROM, _NO_TRANSPORT)),
    "kv_checksum": (KV_CHECKSUM_FROM, "PD KV checksum (--disaggregation-enable-kv-checksum, #39500)"),
    "generate_dispatch": (GENERATE_DISPATCH_DRIVER_FROM, "bootstrap room in a generate request (GenerateReqInput)"),
}
"""Units whose code a release before the given one does not have at all (not a form without a driver): the first
release with it and what it is (``"sglang <release> has no <what>: it came in <first>"``). The transport units
(``TRANSPORT_UNITS``) have none before the first KV transport, Mooncake's."""
EARLIER_FORM: dict[str, str] = {}
"""Why a unit has no driver before its driver's first release: the form the release's code has there (none left:
every unit is driven on every release that has it)."""
CHUNK_SENDER_FROM = "0.5.21"
"""The first release with ``_send_kv_chunk`` and ``_transfer_page_indices`` (the function-level sender units split
out); before, the same steps are inline in ``send_kv_chunk`` and ``pop_preallocated`` (``sglang_inline_units``)."""
SENDER_UNITS_DRIVER_FROM = "0.4.5.post1"
"""The first release the function-level sender units are driven on (``sglang_inline_units`` to 0.5.20): the first
with a KV transport (``KV_TRANSPORT_FROM``). 0.4.5.post1 sends token indices and counts tokens, at page size 1 (paged
transfer came with #5561, 0.4.5.post2: the ``paged_transfer`` input feature), where a token index is its page index:
its ``send_kv_chunk`` and ``pop_preallocated`` are driven as they are; it has no ``kv_to_page_num``, so P9-P14 and M1,
which read it, are 'no such code' there."""

SGLANG_MIXIN = "sglang.srt.disaggregation.decode_schedule_batch_mixin"
MIXIN_MODULES = (SGLANG_MIXIN, "sglang.srt.disaggregation.decode")
"""Where ``ScheduleBatchDisaggregationDecodeMixin`` lives: its own module from 0.4.6.post5, ``decode.py`` before
(0.4.4.post2-0.4.6.post4 have ``prepare_for_prebuilt_extend`` there)."""


IMPORT_FAILURES: dict[str, str] = {}
"""Modules of the release that exist but failed to import (module -> error): a unit behind one is reported absent
with that error, never as code the release does not have."""


def _find(modules: tuple[str, ...], name: str) -> tuple[Any, str] | None:
    for module in modules:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module.startswith(exc.name):
                continue  # the release has no such module
            IMPORT_FAILURES[module] = f"{type(exc).__name__}: {exc}"
            continue
        except ImportError as exc:
            IMPORT_FAILURES[module] = f"{type(exc).__name__}: {exc}"
            continue
        fn = getattr(mod, name, None)
        if fn is not None:
            return fn, f"{module}.{name}"
    return None


def _absent(modules: tuple[str, ...], why: str) -> str:
    """Why a unit is absent: the module's import error when one of ``modules`` exists but failed to import."""
    failed = [f"import of {m} failed ({IMPORT_FAILURES[m][:200]})" for m in modules if m in IMPORT_FAILURES]
    return "; ".join(failed) if failed else why


def host_input(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A pre-#31173 ``kv_to_page_indices`` called as its release's call sites did: on ``.cpu().numpy()``."""

    def call(kv_indices: Any, page_size: int, /) -> Any:
        if isinstance(kv_indices, torch.Tensor):
            kv_indices = kv_indices.cpu().numpy()
        return fn(kv_indices, page_size)

    call.__name__ = call.__qualname__ = getattr(fn, "__name__", "kv_to_page_indices")
    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call


def installed_release() -> str:
    try:
        import sglang
    except ImportError as exc:
        raise TargetError(
            f"target 'sglang': cannot import {exc.name or 'sglang'} ({exc}); build the conformance environment with "
            "ci/build-sglang-env.sh (--release VERSION for another release)"
        ) from exc
    return str(getattr(sglang, "__version__", "0"))


def sglang_release_target() -> Target:
    """The installed release's functions, each unit resolved to that release's own code (see the module doc)."""
    release = installed_release()
    version = Version(release)
    units: dict[str, Any] = {}
    sources: list[tuple[str, str]] = []

    def supply(unit: str, found: tuple[Any, str] | None, absent: str) -> None:
        if found is None:
            sources.append((unit, absent))
        else:
            units[unit], where = found
            sources.append((unit, where))

    places = ("sglang.srt.mem_cache.common", "sglang.srt.disaggregation.utils")
    pages = _find(places, "kv_to_page_indices")
    if pages is not None and version < Version("0.5.16"):
        pages = (host_input(pages[0]), f"{pages[1]} (on .cpu().numpy(), as its call sites)")
    supply(
        "kv_to_page_indices",
        pages,
        _absent(places, f"sglang {release} has no kv_to_page_indices (paged transfer came in 0.4.5.post2)"),
    )
    for helper in ("kv_to_page_num", "page_align_floor", "suffix_page_indices"):
        supply(helper, _find(places, helper), _absent(places, f"sglang {release} has no {helper}"))
    supply(
        "minimax_index_transfer_pages",
        _find(("sglang.srt.disaggregation.minimax",), "minimax_index_transfer_pages"),
        _absent(("sglang.srt.disaggregation.minimax",), f"sglang {release} has no minimax_index_transfer_pages"),
    )
    supply(
        "translate_token_ids",
        _find(("sglang.kernels.ops.memory.virtual_slot",), "translate_token_ids"),
        _absent(
            ("sglang.kernels.ops.memory.virtual_slot",),
            f"sglang {release} has no translate_token_ids (virtual-id unified pools)",
        ),
    )
    with contextlib.suppress(ImportError):
        # the server imports the batch before the decode module: older releases import circularly the other way
        importlib.import_module("sglang.srt.managers.schedule_batch")
    mixin = _find(MIXIN_MODULES, "ScheduleBatchDisaggregationDecodeMixin")
    prebuilt = None
    if mixin is not None:
        module = mixin[1].rsplit(".", 1)[0]
        for name in ("prepare_for_prebuilt", "prepare_for_prebuilt_extend"):
            if hasattr(mixin[0], name):
                prebuilt = (getattr(mixin[0], name), f"{mixin[1]}.{name}")
                break
    supply("prepare_for_prebuilt", prebuilt,
           _absent(MIXIN_MODULES, f"sglang {release} has no PREBUILT batch preparation"))  # fmt: skip

    def drive(units: tuple[str, ...], since: dict[str, str], load: Callable[[], tuple[Any, ...]]) -> None:
        """Supply each of ``units`` with pdverify's driver of SGLang's own methods from release ``since[unit]``."""
        if all(version < Version(since[u]) for u in units):
            drivers: tuple[Any, ...] = (None,) * len(units)
        else:
            drivers = load()
        for unit, driver in zip(units, drivers, strict=True):
            if unit in ABSENT_BEFORE and version < Version(ABSENT_BEFORE[unit][0]):
                first, what = ABSENT_BEFORE[unit]
                sources.append((unit, f"sglang {release} has no {what}: it came in {first}"))
                continue
            if version < Version(since[unit]):
                why = EARLIER_FORM.get(unit, "")
                sources.append(
                    (unit, f"no driver for sglang {release}'s form of this path (drivers cover {since[unit]}+)"
                     + (f": {why}" if why else ""))
                )  # fmt: skip
                continue
            supply(unit, (driver, f"{driver.__module__}.{driver.__name__} (drives sglang {release}'s own methods)"), "")

    def scheduler_drivers() -> tuple[Any, ...]:
        from pdverify.targets.sglang_checksum import sglang_kv_checksum
        from pdverify.targets.sglang_decode import sglang_decode_prealloc, sglang_decode_queue
        from pdverify.targets.sglang_dispatch import sglang_generate_dispatch
        from pdverify.targets.sglang_prefill import sglang_bootstrap, sglang_kv_sender, sglang_prefill_exchange
        from pdverify.targets.sglang_transfer_queue import sglang_transfer_queue
        from pdverify.targets.sglang_wire import sglang_wire_roundtrip

        return (
            sglang_prefill_exchange,
            sglang_kv_sender,
            sglang_bootstrap,
            sglang_decode_prealloc,
            sglang_decode_queue,
            sglang_transfer_queue,
            sglang_wire_roundtrip,
            sglang_kv_checksum,
            sglang_generate_dispatch,
        )

    def sender_drivers() -> tuple[Any, ...]:
        if version < Version(CHUNK_SENDER_FROM):  # the steps inline in send_kv_chunk and pop_preallocated
            from pdverify.targets.sglang_inline_units import (
                sglang_inline_decode_page_indices,
                sglang_inline_send_kv_chunk,
            )

            return sglang_inline_send_kv_chunk, sglang_inline_decode_page_indices
        from pdverify.targets.sglang_prefill import sglang_decode_page_indices, sglang_send_kv_chunk

        return sglang_send_kv_chunk, sglang_decode_page_indices

    since = {u: SCHEDULER_DRIVERS_FROM for u in SCHEDULER_UNITS} | {
        "kv_sender": KV_SENDER_DRIVER_FROM,
        "bootstrap": BOOTSTRAP_DRIVER_FROM,
        "decode_queue": DECODE_QUEUE_DRIVER_FROM,
        "transfer_queue": TRANSFER_QUEUE_DRIVER_FROM,
        "decode_prealloc": DECODE_PREALLOC_DRIVER_FROM,
        "wire_roundtrip": WIRE_DRIVER_FROM,
        "kv_checksum": KV_CHECKSUM_FROM,
        "generate_dispatch": GENERATE_DISPATCH_DRIVER_FROM,
    }
    drive(SCHEDULER_UNITS, since, scheduler_drivers)
    sender_units = ("send_kv_chunk", "decode_page_indices")
    drive(sender_units, dict.fromkeys(sender_units, SENDER_UNITS_DRIVER_FROM), sender_drivers)
    layout = "sglang-0.5.23" if version >= Version("0.5.22") else "sglang-any"
    # every unit notes the SGLang functions its calls enter (the run report's ``calls`` per property)
    units = {unit: recording(fn, "sglang", unit) for unit, fn in units.items()}
    return Target(
        name="sglang",
        description=f"the installed sglang {release}",
        layout=layout,
        sampling_info_path=f"{module}.SamplingBatchInfo.from_schedule_batch" if prebuilt else None,
        request_factory=sglang_request if prebuilt else None,
        scheduler_scope=prebuilt_scheduler if prebuilt else None,
        page_allocator=sglang_pages,
        package="sglang",
        release=release,
        unit_sources=tuple(sources),
        **units,
    )
