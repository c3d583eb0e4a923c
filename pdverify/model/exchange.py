"""One request's prefill-side transfer, as SGLang's prefill scheduler performs it
(``SchedulerDisaggregationPrefillMixin.send_kv_chunk`` and the KV sender).

A ``PrefillCase`` is everything the scheduler-level code reads for one request: the page size, the prompt
length ``L``, the decode prefix ``D`` decode sent at bootstrap, the request's row of the request-to-token table,
where each prefill chunk ends, the DCP pack limit of the peer, the staging grid (``chunked_prefill_size``), the
device prefix an early cached-prefix send may ship, the virtual-to-physical translation, and the state types of
the KV pool. A ``PrefillTrace`` is what the KV sender handed to the transfer backend: one ``Transfer`` per
``add_transfer_request`` (pages, destination slice, last flag, aux and state), the page count the sender was
initialised with, and ``start_send_idx`` after every call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pdverify.model.pipeline import PP_CONSENSUS
from pdverify.validation import require_int, require_page_size

STATE_TYPES: tuple[str, ...] = (
    "SWA",
    "BLOCK_SCALE_SWA",
    "DSA",
    "MINIMAX_INDEX_K",
    "QSA_COMPRESSED",
    "MINIMAX_DENSE_KV",
    "BLOCK_SCALE",
    "SWA_RING",
    "REQUEST_ROW",
)
"""The state types whose payload a prefill send computes from the request's row or slot (SGLang's
``StateType`` names): the SWA window, the DSA and MiniMax index-K suffix from ``D``, the full-from-0 lists,
the unified SWA ring and the request row."""


RANK_SPLITS: tuple[str, ...] = ("kv_shard", "cp_all", "cp_rank0")
"""How the prefill ranks of one request share its transfer: ``kv_shard`` (KV cache sharding: logical page ``l``
lives on rank ``l % N`` as local page ``l // N``; each rank sends the pages it owns at their positions),
``cp_all`` (every context-parallel rank sends its contiguous share of the page list) and ``cp_rank0`` (only CP
rank 0 sends; the others are dummy participants that report success at the last chunk)."""


SWA_WINDOW_TYPES: tuple[str, ...] = ("SWA", "BLOCK_SCALE_SWA")
"""The state types of a hybrid SWA model's sliding-window layers: with a decode prefix, only where the release's server
accepts the decode radix cache for such a model (input feature ``swa_decode_prefix``)."""


DECODE_STATE_TYPES: tuple[str, ...] = (*STATE_TYPES, "DSV4_REQUEST_STATE")
"""Decode's state types: the page-strided ones and DeepSeek-V4's request-scoped state, whose slots the pool
addresses by request row (``request_state_transfer_indices``) and which decode clears on a reused row first."""

REQUEST_STATE_LAYOUTS: tuple[tuple[int, bool, int], ...] = (
    (128, False, 128),
    (128, False, 256),
    (128, True, 1),
    (2, False, 2),
    (2, False, 4),
    (2, False, 8),
)
"""The ``(ratio, online, ring_size)`` layouts of the request-scoped compress-state pool a DeepSeek-V4 KV pool builds
(sglang 0.5.23 ``deepseek_v4_memory_pool.py``: ``_make_compress_state_pool`` makes ratio 128 request-scoped,
online under ``SGLANG_OPT_USE_ONLINE_COMPRESS``; ``_make_pair_state_pool`` ratio 2; ring sizes by
``get_compress_state_ring_size``: C128 a 128-token ring, 256 with speculative decoding, 1 online; the ratio-2 pair
ring 2, or ``1 << (drafts + 1).bit_length()`` with 1-3 draft tokens)."""


DEFERRED_ROOMS: tuple[str, ...] = ("fresh", "duplicate", "cancelled")
"""Deferred decode allocation (``--disaggregation-decode-allocation-policy prefill_complete``): the request's
bootstrap room is fresh, already opened by another sender, or cancelled by decode before the sender existed."""

DP_BALANCE: tuple[str, ...] = ("query", "follow_room")
"""How attention-DP requests find their prefill DP rank: the sender registers its rank with the bootstrap server
(``query``), or the load balancer follows the bootstrap room (rank ``room % DP``: ``follow_bootstrap_room``)."""


def swa_tail_start(fill_len: int, window: int, page_size: int, *, radix: bool) -> int:
    """Where SWA tail pre-allocation's SWA span starts (decode.py ``_swa_tail_len``): the page-aligned window start
    before ``fill_len``, which with the decode radix cache on keeps ``max(window, page_size)`` tokens before the last
    committed position (the radix match stops there: ``max_prefix_len``)."""
    reach = max(window, page_size) + 1 if radix else window
    return max(0, fill_len - reach) // page_size * page_size


def state_list_start(kind: str, *, page_size: int, decode_prefix: int, length: int, window: int) -> int | None:
    """The token position where a page-strided state list of ``kind`` starts on either side (None: the kind
    is not page-strided): the SWA window at ``floor(max(D, L - W) / ps) * ps``, the DSA and MiniMax index-K
    suffix at ``D``, the full lists at 0."""
    if kind in ("SWA", "BLOCK_SCALE_SWA"):
        return max(decode_prefix, length - window) // page_size * page_size
    if kind in ("DSA", "MINIMAX_INDEX_K"):
        return decode_prefix
    if kind in ("QSA_COMPRESSED", "MINIMAX_DENSE_KV", "BLOCK_SCALE"):
        return 0
    return None


@dataclass(frozen=True)
class PrefillCase:
    """One request on the prefill side. ``row`` holds the token locations of positions ``0 .. L - 1``
    (``page * page_size + offset``, int32 as ``ReqToTokenPool`` allocates them)."""

    page_size: int
    length: int
    decode_prefix: int
    row: tuple[int, ...]
    chunk_ends: tuple[int, ...]
    """``req.extend_end`` after each prefill chunk, non-decreasing; the last is ``L`` (the last chunk)."""
    req_pool_idx: int = 1
    dcp_max_tokens: int | None = None
    """Decode-context parallelism: a decode peer of this prefill needs a DCP relayout (an MLA model, decode's
    ``--dcp-size`` above prefill's 1), so the KV manager sized its DCP pack buffer; this is the prefill buffer
    ceiling that sized it, in tokens - ``chunked_prefill_size`` (a page multiple, as prefill requires), or, chunked
    prefill off, ``max_prefill_tokens`` (any). The pack limit is it rounded up to a whole page (``ceil_align``).
    None: no peer relayouts, no limit."""
    dcp_relayout: bool = True
    """With ``dcp_max_tokens``: the room's own decode peer is the one that relayouts, so its sends are split at the
    pack limit. False: the room's peer has prefill's DCP size (another decode instance's relayout set the limit),
    and its sends are not split."""
    chunked_prefill_size: int | None = None
    """Staging on (a positive multiple of the page size, as SGLang's prefill requires): the grid is
    ``max(1, chunked_prefill_size // page_size) * page_size``; None: staging off."""
    early_prefix: int | None = None
    host_hit_length: int = 0
    """The part of the request's cached prefix that is a HiCache host hit still loading back, behind the device
    part: ``prefix_len = early_prefix + host_hit_length``, and only ``early_prefix`` (``prefix_len -
    host_hit_length``) may be sent early."""
    """``prefix_len - host_hit_length`` at the first batch: an early cached-prefix send; None: no early send."""
    translation: tuple[int, ...] | None = None
    """Unified memory: the virtual-to-physical page table (``v2p``; entry ``v`` is the physical page of virtual
    page ``v``, entry 0 the sink). The transfer translates token ids ``t -> v2p[t // page_size] * page_size +
    t % page_size`` as int64 (SGLang's ``translate_kv_indices_for_transfer``); None: the identity (ids stay
    int32)."""
    state_types: tuple[str, ...] = ()
    swa_pages: tuple[int, ...] | None = None
    """A hybrid SWA model's own sliding-window pool: entry ``i`` is the SWA page holding the row's logical page ``i``
    (tokens ``[i * page_size, (i + 1) * page_size)``), 0 for a page the SWA pool already released (only pages wholly
    before ``L - W``: the SWA pool frees what slid out of the window). The SWA and BLOCK_SCALE_SWA lists name these
    pages: SGLang translates the window's full-pool ids with ``translate_swa_indices_for_transfer`` (``SWAKVPool``'s
    ``full_to_swa_index_mapping``; on a unified pool the SWA sub-pool's page table) before paging them, as int64.
    None: the SWA ids are the full pool's (both pools handed out the same slots)."""
    overlap: bool = False
    """The overlap scheduler: an early send records the prior forward's completion event for its transfer."""
    host_tensor_indices: bool = False
    """The sender takes host torch tensors (Mooncake's ``supports_host_tensor_indices``): the page list is
    strided on the device into a pinned host tensor behind a CUDA event instead of ``kv_to_page_indices``."""
    window: int = 4
    """The sliding window (SWA, BLOCK_SCALE_SWA, SWA_RING) in tokens."""
    ring_size: int = 8
    """The unified SWA ring stride (``unified_swa_ring_size``), at least the window."""
    aux_index: int = 7
    kv_checksum: bool = False
    """``--disaggregation-enable-kv-checksum``: the last send digests the request's KV pages for decode to verify."""
    health_check: bool = False
    """A health-check request (its rid carries SGLang's health-check prefix): never digested."""
    bootstrap_room: int = 4242
    deferred_room: str | None = None
    """Deferred decode allocation on, with the room in ``DEFERRED_ROOMS``; None: off."""
    attention_dp: tuple[int, int, str, bool] | None = None
    """``(DP ranks, this sender's DP rank, balance method in DP_BALANCE, placed)``: attention data parallelism on
    prefill; ``placed``: the router already chose the request's prefill DP rank. None: one DP rank."""
    trace_requests: bool = False
    """Request tracing on for the KV sender's module (``--enable-trace``, ``--trace-modules``)."""
    dummy_peer: bool = False
    """Decode registered a dummy (non-transferring) rank for the room beside its real one, listed first."""
    early_send_env: bool = True
    """``SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX`` (on by default): off, no early send."""
    early_send_blocked: str | None = None
    """The first batch finds the request still bootstrapping (``"bootstrapping"``) or a HiCache load-back of the
    batch pending (``"load_back"``, #44070): its early send is held back; None: neither."""
    buffer_waits: int = 0
    """Bootstrap polls that find no free metadata buffer before one frees."""
    held_buffer: bool = False
    """The request already holds a metadata buffer (``aux_index``) from an earlier bootstrap."""
    rank_split: tuple[str, int, int] | None = None
    """``(mode, rank, size)``: this is rank ``rank`` of ``size`` prefill ranks sharing the request's transfer
    (``RANK_SPLITS``); None: one rank sends everything."""
    pp_consensus: str | None = None
    """A pipeline-parallel prefill stage (``--pp-size`` above 1, #8846), stage 1 of 2: the first stage's sender of the
    request (``PP_CONSENSUS``) - ``good``: ready (WaitingForInput), ``bad``: failed - this stage's own sender ready
    (WaitingForInput) unless ``pp_own_late``. What the stages agree of it is each release's own computation over
    both (the driver runs it); the stage must follow the agreement - bootstrap a request agreed ready, fail one agreed
    failed - or the stages' batches diverge. None: one stage, the plain pass."""
    pp_own_late: bool = False
    """On a PP stage (``pp_consensus`` set): decode's destinations reach this stage's sender one step after the first
    stage's (each stage's sender bootstraps with decode on its own; network latency orders them), so at the first
    step this stage's own sender still polls Bootstrapping, without decode's prefix length, and the stages have not
    agreed the request ready there. The stage must keep the request queued until they have (a request agreed failed
    is failed at once), then bootstrap it as on one stage. False: this stage's sender is ready at the first step."""
    extra: dict[str, Any] = field(default_factory=dict, hash=False)
    """Registered request fields (``pdverify.strategies.fields``), set on the request object the driver builds."""

    @property
    def fails_at_creation(self) -> bool:
        """The KV sender fails when it is created: a duplicate or cancelled deferred room, or an unplaced
        attention-DP request off ``room % DP`` where the load balancer follows the room."""
        if self.deferred_room is not None and self.deferred_room != "fresh":
            return True
        if self.attention_dp is None:
            return False
        ranks, dp_rank, method, placed = self.attention_dp
        return not placed and method != "query" and dp_rank != self.bootstrap_room % ranks

    @property
    def kv_sharded(self) -> bool:
        """This rank's pool holds only its stripe of the request's pages (KV cache sharding)."""
        return self.rank_split is not None and self.rank_split[0] == "kv_shard"

    def input_features(self) -> tuple[str, ...]:
        """The input features the case uses that came with a release (``pdverify.properties.releases.FEATURES``)."""
        used = [f"state:{name}" for name in self.state_types]
        if self.host_tensor_indices:
            used.append("host_tensor_indices")
        if self.deferred_room is not None:
            used.append("deferred_allocation")
        if self.kv_sharded:
            used.append("kv_cache_sharding")
        if self.kv_checksum:
            used.append("kv_checksum")
        if self.attention_dp is not None:
            used.append("dp_rank_query")
        if self.early_prefix is not None:
            used.append("early_send")
        if self.held_buffer:  # a request that already holds a metadata buffer: optimistic prefill's retry (#26780)
            used.append("optimistic_prefill")
        if self.decode_prefix:
            used.append("decode_prefixes")
        if self.page_size > 1:
            used.append("paged_transfer")
        if self.chunked_prefill_size is not None:
            used.append("staging_buffer")
        if self.state_types:
            used.append("state_payloads")  # #10912: one payload, the KV pool type's (SWA or DSA), to 0.5.11
        if self.state_types not in ((), ("SWA",), ("DSA",)):
            used.append("state_lists")  # other types, or several: one list per registered type (#24932, 0.5.12)
        if self.rank_split is not None and self.rank_split[0] != "kv_shard":
            used.append("attention_cp")
        if self.dcp_max_tokens is not None:
            used.append("dcp_pack_limit")
        if self.pp_consensus is not None:
            used.append("prefill_pp")
        if self.translation is not None:
            used.append("translated_ids")
        if self.decode_prefix and any(k in SWA_WINDOW_TYPES for k in self.state_types):
            used.append("swa_decode_prefix")
        early = self.early_prefix
        if early is not None and early > self.decode_prefix and early % self.page_size:
            used.append("dcp_prefill")  # a cached tail off the allocator's page: prefill-side DCP's (#32837)
        return tuple(used)

    def __post_init__(self) -> None:
        require_page_size(self.page_size)
        require_int("length", self.length, minimum=0)
        require_int("decode_prefix", self.decode_prefix, minimum=0)
        if self.decode_prefix > self.length or self.decode_prefix % self.page_size:
            raise ValueError(
                f"decode_prefix={self.decode_prefix} must be page-aligned and <= length={self.length} (page_size="
                f"{self.page_size})"
            )
        if len(self.row) != self.length:
            raise ValueError(f"row has {len(self.row)} locations, expected length={self.length}")
        if (
            not self.chunk_ends
            or self.chunk_ends[-1] != self.length
            or list(self.chunk_ends) != sorted(self.chunk_ends)
        ):
            raise ValueError(f"chunk_ends={self.chunk_ends} must be non-decreasing and end at length={self.length}")
        if self.dcp_max_tokens is not None:
            require_int("dcp_max_tokens", self.dcp_max_tokens, minimum=1)
        if not self.dcp_relayout and self.dcp_max_tokens is None:
            raise ValueError(
                "dcp_relayout=False needs dcp_max_tokens: without a pack buffer no peer relayouts, and the flag "
                "says nothing"
            )
        if self.chunked_prefill_size is not None:
            require_int("chunked_prefill_size", self.chunked_prefill_size, minimum=1)
            if self.chunked_prefill_size % self.page_size:
                # PrefillBootstrapQueue.__init__ (every release with staging): "SGLANG_DISAGG_STAGING_BUFFER requires a
                # positive chunked_prefill_size that is a multiple of page_size"
                raise ValueError(
                    f"chunked_prefill_size={self.chunked_prefill_size} must be a positive multiple of page_size="
                    f"{self.page_size}: SGLang's prefill refuses staging with any other chunk size"
                )
        if self.early_prefix is not None and not 0 <= self.early_prefix < max(1, self.length):
            raise ValueError(f"early_prefix={self.early_prefix} must be in [0, length - 1]")
        require_int("host_hit_length", self.host_hit_length, minimum=0)
        if self.host_hit_length and (
            self.early_prefix is None or self.early_prefix + self.host_hit_length >= max(1, self.length)
        ):
            raise ValueError(
                f"host_hit_length={self.host_hit_length} needs an early prefix and prefix_len = early_prefix + "
                "host_hit_length below length"
            )
        if self.translation is not None:
            self._check_translation(self.translation)
        if self.swa_pages is not None:
            self._check_swa_pages(self.swa_pages)
        unknown = set(self.state_types) - set(STATE_TYPES)
        if unknown:
            raise ValueError(f"unknown state types {sorted(unknown)} (known: {', '.join(STATE_TYPES)})")
        require_int("window", self.window, minimum=1)
        if self.ring_size < self.window:
            raise ValueError(f"ring_size={self.ring_size} must be >= window={self.window}")
        require_int("bootstrap_room", self.bootstrap_room, minimum=0)
        require_int("buffer_waits", self.buffer_waits, minimum=0)
        if self.early_send_blocked not in (None, "bootstrapping", "load_back"):
            raise ValueError(
                f"early_send_blocked={self.early_send_blocked!r} must be None, 'bootstrapping' or 'load_back'"
            )
        if self.deferred_room is not None and self.deferred_room not in DEFERRED_ROOMS:
            raise ValueError(f"deferred_room={self.deferred_room!r} must be None or one of {DEFERRED_ROOMS}")
        if self.attention_dp is not None:
            ranks, dp_rank, method, _ = self.attention_dp
            if not isinstance(ranks, int) or ranks < 2 or not 0 <= dp_rank < ranks or method not in DP_BALANCE:
                raise ValueError(
                    f"attention_dp={self.attention_dp} must be (ranks >= 2, 0 <= rank < ranks, method in {DP_BALANCE}, "
                    "placed)"
                )
        if self.pp_consensus not in (None, *PP_CONSENSUS):
            raise ValueError(f"pp_consensus={self.pp_consensus!r} must be None or one of {PP_CONSENSUS}")
        if self.pp_consensus is not None:
            # what SGLang's server validation refuses beside --pp-size above 1 (0.5.23's hooks)
            refused = {
                "deferred_room": self.deferred_room is not None,  # _validate_prefill_complete: no PP
                "translation": self.translation is not None,  # kv_cache_hook: unified memory with PD needs PP 1
                "held_buffer": self.held_buffer,  # serving_hook: optimistic prefill attempts reset to 0 under PP
                "rank_split": self.kv_sharded,  # kv_shard_hook: KV sharding requires PP 1
            }
            named = [name for name, on in refused.items() if on]
            if named:
                raise ValueError(
                    f"pp_consensus={self.pp_consensus!r} with {', '.join(named)}: SGLang's server refuses these "
                    "with --pp-size above 1"
                )
        if self.pp_own_late and self.pp_consensus is None:
            raise ValueError("pp_own_late=True needs a PP stage (pp_consensus 'good' or 'bad'): one stage has no other")
        if self.pp_own_late and self.fails_at_creation:
            raise ValueError(
                "pp_own_late=True with a sender that fails at its creation: that sender polls Failed, never "
                "Bootstrapping"
            )
        if self.pp_consensus == "good" and self.fails_at_creation:
            raise ValueError(
                "pp_consensus='good' with a sender that fails at its creation: this stage's own poll is Failed, so "
                "the stages' consensus lists the request bad"
            )
        if self.rank_split is not None:
            mode, rank, size = self.rank_split
            if mode not in RANK_SPLITS or not isinstance(size, int) or size < 2 or not 0 <= rank < size:
                raise ValueError(
                    f"rank_split={self.rank_split} must be (mode, rank, size) with mode in {RANK_SPLITS}, size >= 2 "
                    "and 0 <= rank < size"
                )

    def _check_translation(self, v2p: tuple[int, ...]) -> None:
        virtual = sorted({loc // self.page_size for loc in self.row})
        if virtual and virtual[-1] >= len(v2p):
            raise ValueError(
                f"translation has {len(v2p)} entries but the row holds virtual page {virtual[-1]} (the table must map"
                " every page of the row)"
            )
        physical = [v2p[v] for v in virtual]
        if any(p < 1 for p in physical) or len(set(physical)) != len(physical):
            raise ValueError(
                "translation must map the row's virtual pages to distinct physical pages >= 1 (page 0 is the sink)"
            )

    def _check_swa_pages(self, swa_pages: tuple[int, ...]) -> None:
        if not any(k in SWA_WINDOW_TYPES for k in self.state_types):
            raise ValueError(
                f"swa_pages needs an SWA window state type ({', '.join(SWA_WINDOW_TYPES)}) in state_types="
                f"{self.state_types}: only those lists are read through the SWA pool"
            )
        count = -(-self.length // self.page_size)
        if len(swa_pages) != count:
            raise ValueError(f"swa_pages has {len(swa_pages)} entries, expected one per page of the row ({count})")
        held = [p for p in swa_pages if p != 0]
        if any(p < 0 for p in swa_pages) or len(set(held)) != len(held):
            raise ValueError("swa_pages must name distinct SWA pages >= 1 (0: a page the SWA pool released)")
        start = max(0, self.length - self.window) // self.page_size
        if 0 in swa_pages[start:]:
            raise ValueError(
                f"swa_pages releases a page of the sliding window (pages {start}..{count - 1}, from L - W = "
                f"{self.length - self.window}): the SWA pool keeps the window's pages"
            )

    @property
    def grid(self) -> int | None:
        """The staging grid in tokens (None when staging is off)."""
        if self.chunked_prefill_size is None:
            return None
        return max(1, self.chunked_prefill_size // self.page_size) * self.page_size

    @property
    def index_dtype(self) -> str:
        """The dtype of the main page lists: int32 as allocated, int64 once translated."""
        return "int32" if self.translation is None else "int64"


@dataclass(frozen=True)
class Transfer:
    """One ``add_transfer_request``: ``pages`` go to ``dst[start:stop]`` of decode's destination list."""

    pages: tuple[int, ...]
    dtype: str
    start: int
    stop: int
    is_last: bool
    aux_index: int | None
    state: tuple[tuple[int, ...], ...] | None
    num_kv_tokens: int | None
    waits_on_forward: bool = False
    """It carries the early send's completion event (overlap scheduling): the transfer worker waits for the
    prior step's forward to finish writing the prefix pages before it reads them."""
    positions: tuple[int, ...] | None = None
    """The destination positions of ``pages`` when they replace the range (a KV-sharded rank's owned pages;
    ``start`` and ``stop`` are then 0)."""

    @property
    def destinations(self) -> tuple[int, ...]:
        """The position in decode's destination list of each page."""
        return self.positions if self.positions is not None else tuple(range(self.start, self.stop))


@dataclass
class PrefillTrace:
    """What the prefill scheduler and its KV sender did for one ``PrefillCase``."""

    num_pages: int
    """The count ``finalize_bootstrap`` initialised the sender with."""
    transfers: list[Transfer] = field(default_factory=list)
    start_send_idx: list[int] = field(default_factory=list)
    """``req.start_send_idx`` after bootstrap and after every send call (early send included)."""
    metadata_sets: int = 0
    """How often the request's metadata buffer was set (``disagg_metadata_buffers.set_buf``): once, by the
    last chunk."""
    statuses: list[str] = field(default_factory=list)
    """What the sender reported to its KV manager (``KVPoll`` names), in order."""
    registrations: list[tuple[int, int]] = field(default_factory=list)
    """``(room, DP rank)`` the sender registered with the bootstrap server."""
    bootstraps: list[bool] = field(default_factory=list)
    """What each ``finalize_bootstrap`` call returned, in order (False: no metadata buffer yet, try again)."""
    dropped: bool = False
    """The bootstrap queue failed the request (``handle_bootstrap_failure``) instead of finalising it."""
    buffers_taken: int = 0
    """Metadata buffers the bootstrap took from the allocator."""
    digests: list[tuple[int, ...] | None] = field(default_factory=list)
    """Each KV checksum set on the request's metadata (``set_kv_checksum``): the page ids the digest read, in
    order (None: set to 0 without a digest)."""


@dataclass(frozen=True)
class WireMessage:
    """What the prefill side reads back from the metadata frames decode sent (``TransferInfo``)."""

    pages: tuple[int, ...]
    dtype: str
    aux_index: int | None
    state: tuple[tuple[int, ...], ...]
    decode_prefix_len: int | None
    is_dummy: bool


@dataclass(frozen=True)
class DecodeCase:
    """One request admitted on decode (``DecodePreallocQueue.pop_preallocated``).

    With the decode radix cache on, ``l1_prefix`` tokens are on the device (their locations ``l1_row``) and
    ``decode_prefix`` (``D``, sent to prefill) adds a HiCache host hit whose restore is still pending; with it
    off both are 0. ``stale_row`` holds what the request-to-token row held from an earlier request (SGLang never
    clears a freed row); ``free_pages`` is the order the allocator hands pages out in.
    """

    page_size: int
    length: int
    output_len: int
    l1_row: tuple[int, ...]
    decode_prefix: int
    stale_row: tuple[int, ...]
    free_pages: tuple[int, ...]
    state_types: tuple[str, ...] = ()
    window: int = 4
    ring_size: int = 8
    aux_index: int = 100
    request_state: tuple[int, bool, int] = REQUEST_STATE_LAYOUTS[0]
    """With ``DSV4_REQUEST_STATE``: the request-scoped compress-state pool's ``(ratio, online, ring_size)``, one of
    ``REQUEST_STATE_LAYOUTS``."""
    evictable_pages: tuple[int, ...] = ()
    """Pages the decode radix cache holds unlocked, in its eviction order: with the cache on (``D > 0``) and the free
    list short of the request's pages for ``[L1, fill_len)``, pre-allocation evicts the shortfall first."""
    evictable_leaves: tuple[int, ...] = ()
    """How ``evictable_pages`` are cached: the pages of each cached sequence (a leaf of the tree), least recently used
    first, summing to ``len(evictable_pages)``; the tree evicts a leaf whole. Empty: one page each."""
    swa_free_pages: tuple[int, ...] | None = None
    """A hybrid SWA pool (full and sliding-window buffers): decode takes full pages for ``[D, fill_len)`` and SWA
    pages, handed out in this order, for the SWA span (``swa_tail_len``), and its SWA state lists address the SWA
    buffer. None: one full pool."""
    swa_tail: bool = True
    """With ``swa_free_pages``: SWA tail pre-allocation (#24857, 0.5.12: the SWA span is the window's tail, SGLang's
    path wherever the pool's page size is above 1), else the whole ``[D, fill_len)`` in the SWA buffer too (page
    size 1, or a release before the tail). Tail pre-allocation needs ``page_size > 1`` (SGLang's condition)."""
    extra: dict[str, Any] = field(default_factory=dict, hash=False)
    """Registered request fields (``pdverify.strategies.fields``), set on the request object the driver builds."""

    def input_features(self) -> tuple[str, ...]:
        """The input features the case uses that came with a release (``pdverify.properties.releases.FEATURES``)."""
        used = [f"state:{name}" for name in self.state_types]
        if self.page_size > 1:
            used.append("paged_transfer")
        if self.decode_prefix:
            used.append("decode_prefixes")
        if self.decode_prefix > self.l1_prefix:
            used.append("decode_hicache")
        if self.state_types or self.swa_free_pages is not None:
            used.append("state_payloads")
        if self.swa_free_pages is not None and self.page_size > 1:
            used.append("swa_paged_pool")
        if self.swa_free_pages is not None and self.swa_tail:
            used.append("swa_tail_prealloc")
        elif self.swa_free_pages is not None and self.page_size > 1:  # the whole sequence in a paged SWA buffer
            used.append("swa_whole_paged")
        # before the per-type state lists a request carries one payload, its pool type's: SWA with an SWA pool, DSA
        pool_typed = ("SWA",) if self.swa_free_pages is not None else ("DSA",)
        if self.state_types not in ((), pool_typed):
            used.append("state_lists")
        if "DSV4_REQUEST_STATE" in self.state_types and self.request_state[0] == 2:
            used.append("dsv4_pair_state")
        # the request state is the last of DeepSeek-V4's own registrations: what follows it is its draft's
        if "DSV4_REQUEST_STATE" in self.state_types[:-1]:
            used.append("dsv4_draft_state")
        swa = self.swa_free_pages is not None or any(k in SWA_WINDOW_TYPES for k in self.state_types)
        if self.decode_prefix and swa:
            used.append("swa_decode_prefix")
        if self.decode_prefix and "DSV4_REQUEST_STATE" in self.state_types:
            used.append("dsv4_decode_prefix")
        return tuple(used)

    def __post_init__(self) -> None:
        require_page_size(self.page_size)
        require_int("length", self.length, minimum=1)
        require_int("output_len", self.output_len, minimum=0)
        l1 = len(self.l1_row)
        if l1 % self.page_size or self.decode_prefix % self.page_size:
            raise ValueError(f"l1 prefix {l1} and decode_prefix={self.decode_prefix} must be page-aligned")
        if not l1 <= self.decode_prefix <= self.length:
            raise ValueError(f"need l1 prefix {l1} <= decode_prefix={self.decode_prefix} <= length={self.length}")
        if len(self.stale_row) < self.fill_len + self.page_size:
            raise ValueError(f"stale_row must cover fill_len + page_size = {self.fill_len + self.page_size} slots")
        if 0 in self.free_pages or len(set(self.free_pages)) != len(self.free_pages):
            raise ValueError("free_pages must be distinct pages >= 1")
        unknown = set(self.state_types) - set(DECODE_STATE_TYPES)
        if unknown:
            raise ValueError(f"unknown state types {sorted(unknown)}")
        if self.ring_size < self.window:
            raise ValueError(f"ring_size={self.ring_size} must be >= window={self.window}")
        if self.request_state not in REQUEST_STATE_LAYOUTS:
            raise ValueError(
                f"request_state={self.request_state} is not a layout SGLang's DeepSeek-V4 pool builds "
                f"(REQUEST_STATE_LAYOUTS: {REQUEST_STATE_LAYOUTS})"
            )
        if self.evictable_pages:
            l1_pages = {loc // self.page_size for loc in self.l1_row}
            taken = set(self.evictable_pages)
            if 0 in taken or len(taken) != len(self.evictable_pages) or taken & (set(self.free_pages) | l1_pages):
                raise ValueError("evictable_pages must be distinct pages >= 1, neither free nor the locked L1 prefix's")
            if self.decode_prefix == 0 or self.swa_free_pages is not None:
                raise ValueError("evictable_pages need the radix cache (decode_prefix > 0) and one full pool")
        leaves = self.evictable_leaves
        if leaves and (
            any(not isinstance(n, int) or n < 1 for n in leaves) or sum(leaves) != len(self.evictable_pages)
        ):
            raise ValueError(
                f"evictable_leaves={leaves} must be page counts >= 1 summing to the {len(self.evictable_pages)} "
                "evictable pages"
            )
        if self.swa_free_pages is None and not self.swa_tail:
            raise ValueError("swa_tail=False describes a hybrid SWA pool's allocation: it needs swa_free_pages")
        if self.swa_free_pages is not None:
            pages = self.swa_free_pages
            if self.page_size == 1 and self.swa_tail:
                raise ValueError("swa_free_pages: SWA tail pre-allocation needs page_size > 1 (swa_tail=False there)")
            if self.output_len > 1 and self.swa_tail:
                # A request prefill hands over carries its first output token only; SWA tail pre-allocation sizes
                # the tail from fill_len, which then covers the SWA list's window [floor(max(D, L - W)), L).
                raise ValueError(f"swa_free_pages: output_len={self.output_len} must be 0 or 1 with an SWA pool")
            if 0 in pages or len(set(pages)) != len(pages):
                raise ValueError("swa_free_pages must be distinct pages >= 1")
            if self.decode_prefix != l1:
                raise ValueError(
                    f"swa_free_pages with a HiCache host hit (decode_prefix={self.decode_prefix} > l1 prefix {l1}): "
                    "SGLang serves a hybrid SWA model's decode radix cache from the device only (it refuses "
                    "--enable-hierarchical-cache there, kv_cache_builder.py)"
                )
            if len(pages) < -(-self.swa_tail_len // self.page_size):
                raise ValueError(f"swa_free_pages hold fewer than the {self.swa_tail_len} tokens of the SWA span")
            if self.decode_prefix > self.fill_len - self.swa_tail_len:
                raise ValueError(
                    f"decode_prefix={self.decode_prefix} reaches into the SWA tail [{self.fill_len - self.swa_tail_len}"
                    f", {self.fill_len}): the radix match stops before it"
                )

    @property
    def swa_tail_len(self) -> int:
        """The SWA span ``[fill - tail, fill)`` decode allocates in the SWA buffer: with tail pre-allocation from the
        page-aligned window start, which with the decode radix cache (``D > 0``) keeps ``max(W, page_size)`` tokens
        before the last committed position; without it all of ``[D, fill)``; 0 without an SWA pool."""
        if self.swa_free_pages is None:
            return 0
        ps, fill = self.page_size, self.fill_len
        if not self.swa_tail:
            return fill - self.decode_prefix
        return fill - swa_tail_start(fill, self.window, ps, radix=self.decode_prefix > 0)

    @property
    def l1_prefix(self) -> int:
        return len(self.l1_row)

    @property
    def cached_leaves(self) -> list[tuple[int, ...]]:
        """``evictable_pages`` as the tree's leaves (``evictable_leaves``; one page each when it is empty), least
        recently used first."""
        sizes = self.evictable_leaves or (1,) * len(self.evictable_pages)
        starts = [sum(sizes[:k]) for k in range(len(sizes))]
        return [self.evictable_pages[start : start + n] for start, n in zip(starts, sizes, strict=True)]

    @property
    def fill_len(self) -> int:
        """The KV decode holds: the prompt plus the output tokens but the last."""
        return self.length + max(self.output_len - 1, 0)


@dataclass
class DecodeTrace:
    """What decode registered for one request and sent to prefill (``send_metadata``)."""

    pages: tuple[int, ...]
    dtype: str
    decode_prefix_len: int | None
    aux_index: int | None
    state: tuple[tuple[int, ...], ...]
    allocated: tuple[int, ...]
    """The token locations pre-allocation gave the request for ``[D, fill_len)``."""
    swa_allocated: tuple[int, ...] = ()
    """With an SWA pool: the SWA token locations the request holds for ``[swa_start, fill_len)``."""
    swa_start: int = 0
    """With an SWA pool: the first position the request holds an SWA slot for."""
    req_pool_idx: int = 1
    """The request-to-token row the request was given."""
    evicted: tuple[int, ...] = ()
    """Pages pre-allocation evicted from the decode radix cache."""
    cleared_rows: tuple[int, ...] = ()
    """Rows whose whole DeepSeek-V4 request-state ring was reset (no entry left as an earlier request wrote it) when
    the metadata went out."""
    row: tuple[int, ...] = ()
    """The request's request-to-token row for ``[0, L)`` when the metadata was sent."""
    cache_protected_len: int | None = None
    """The prefix the request's tree owns after pre-allocation (``req.kv.cache_protected_len``); None: not reported."""
    restore: tuple[int, ...] = ()
    """Token locations reserved at pre-allocation for ``[L1, D)``, the prefix a HiCache restore loads later
    (SGLang 0.5.23 reserves none: those slots keep whatever the row held)."""

    def swa_page(self, pos: int, page_size: int) -> int | None:
        """With an SWA pool: the SWA page the request holds for position ``pos`` (None: none)."""
        k = pos - self.swa_start
        return self.swa_allocated[k] // page_size if 0 <= k < len(self.swa_allocated) else None
