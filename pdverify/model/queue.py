"""Decode's pre-allocation queue: one ``DecodePreallocQueue.pop_preallocated`` pass over several queued requests
(sglang 0.5.23's admission loop in ``DecodePreallocQueue.pop_preallocated``).

A ``DecodeQueueCase`` is what one pass reads: the queued requests in queue order (each bootstrapped or still
waiting for its KV receiver, aborted or not, with its priority and LoRA adapter), the requests already running
(their tokens are retractable; their adapters are loaded), the free metadata buffers, request-to-token rows and
KV pages, and the token budget admission may commit. A ``QueueTrace`` is what the pass did: which requests it
admitted (in order), failed and left queued, which aborts it streamed, and for each admitted request the
destination list and metadata buffer it sent to prefill.

With the decode radix cache on, a request may match a device (L1) prefix of whole pages the cache holds; the
match locks them until the request is admitted (the lock passes to it) or turned away (released). Its
destination list then starts at that prefix. A rebootstrapped request (re-sent after a prefill failure) never
matches: prefill recomputes its prompt and its outputs, so decode holds and receives ``L + outputs`` tokens.
HiCache host hits are the one-request ``DecodeCase``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pdverify.model.layout import pages_needed
from pdverify.model.pipeline import PP_CONSENSUS
from pdverify.validation import require_int, require_page_size

CLIP_MAX_NEW_TOKENS = 4096
"""``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``'s default: admission counts at most this many new tokens."""
RUNNING_MAX_NEW_TOKENS = 8
"""``max_new_tokens`` of each request in the running batch (``DecodeQueueCase.running``): with the retractable tokens
it sets the largest running request's need (``need_space_for_single_req``) the budget keeps beside the headroom."""

PRIORITY_ORDERS = ("low_first", "high_first")
"""Priority scheduling: lower priority values first (``schedule_low_priority_values_first``) or higher first."""
RECEIVER_FAILURES = ("peer", "abort")
"""How a queued request's KV receiver fails before the pass (``QueuedRequest.receiver_failed``): ``"peer"`` - prefill
reported the transfer failed (the KV manager's status of its room is ``KVPoll.Failed``; the receiver concludes it
when polled); ``"abort"`` - the client aborted the request while queued, and the scheduler's ``AbortReq`` handler
aborted its receiver (``kv_receiver.abort()``: its ``conclude_state`` is ``KVPoll.Failed`` at once)."""
ALLOCATION_POLICIES = ("early", "prefill_complete")
"""``--disaggregation-decode-allocation-policy`` (0.5.22 on; ``"early"`` the default). A release before the flag
behaves as ``"early"``: it asks prefill to recompute a rebootstrapped request once its destinations are sent."""


@dataclass(frozen=True)
class QueuedRequest:
    """One request in decode's pre-allocation queue."""

    length: int
    """Prompt tokens (``origin_input_ids``)."""
    output_len: int = 1
    """Output tokens it holds (``output_ids``): any number when rebootstrapped, else 0 or 1 - a first-time request
    has none yet, and the one the fill length leaves out changes nothing."""
    max_new_tokens: int = 8
    bootstrapped: bool = True
    """Its KV receiver is ready (``waiting_for_input``); a request still bootstrapping is passed over."""
    aborted: bool = False
    """Aborted while queued (``finished_reason`` is ``FINISH_ABORT``)."""
    abort_streamed: bool = False
    """The abort was already streamed to the client (``finished_output``); only read when ``aborted``."""
    priority: int = 0
    lora: str | None = None
    """Its LoRA adapter (None: the base model); only read with LoRA on."""
    checked: bool = True
    """In the pass's ``rids_to_check``; only read when the case restricts the pass."""
    prefix_pages: tuple[int, ...] = ()
    """The device (L1) prefix the decode radix cache holds for it, whole pages; only read with the radix cache
    on and the request not rebootstrapped."""
    rebootstrap: bool = False
    """Re-sent after a prefill failure (``is_rebootstrap``, ``pd_rebootstrap_in_progress``)."""
    host_capable: bool = False
    """Its KV receiver can land KV in decode's host memory (``supports_host_destination``)."""
    receiver_failed: str | None = None
    """Its KV receiver failed (one of ``RECEIVER_FAILURES``) and reports ``KVPoll.Failed`` when polled; None: it
    reports ``WaitingForInput`` when ``bootstrapped``, else ``Bootstrapping``. ``bootstrapped`` then says whether an
    earlier pass saw it ready (``waiting_for_input``)."""
    consensus: str | None = None
    """Its place in the PP consensus (one of ``PP_CONSENSUS``): ``"good"`` - in ``pp_good_rids`` (its KV receiver
    was ready on every pipeline stage when the stages agreed), ``"bad"`` - in ``pp_bad_rids`` (it failed on some
    stage, or was aborted: the scheduler's ``_route_aborts_to_bad``); None: in neither list - the stages have not
    agreed on it yet; only read when the case is a PP pass (``DecodeQueueCase.pp_consensus``). The consensus was reached
    before the pass and is authoritative: its verdict need not match this stage's own receiver now (a receiver that
    failed, or an abort that arrived, after the stages agreed)."""
    extra: dict[str, Any] = field(default_factory=dict, hash=False)
    """Registered request fields (``pdverify.strategies.fields``), set on the request object the driver builds."""

    def __post_init__(self) -> None:
        require_int("length", self.length, minimum=1)
        require_int("output_len", self.output_len, minimum=0)
        require_int("max_new_tokens", self.max_new_tokens, minimum=1)
        require_int("priority", self.priority)
        if self.lora is not None and not isinstance(self.lora, str):
            raise TypeError(f"lora must be an adapter name or None, got {self.lora!r}")
        if 0 in self.prefix_pages or len(set(self.prefix_pages)) != len(self.prefix_pages):
            raise ValueError(f"prefix_pages={self.prefix_pages} must be distinct pages >= 1")
        if self.abort_streamed and not self.aborted:
            raise ValueError("abort_streamed=True needs aborted=True: only an aborted request has a streamed abort")
        if self.consensus is not None and self.consensus not in PP_CONSENSUS:
            raise ValueError(f"consensus={self.consensus!r} must be None or one of {PP_CONSENSUS}")
        if self.receiver_failed is not None and self.receiver_failed not in RECEIVER_FAILURES:
            raise ValueError(f"receiver_failed={self.receiver_failed!r} must be None or one of {RECEIVER_FAILURES}")
        if self.output_len > 1 and not self.rebootstrap:
            raise ValueError(
                f"output_len={self.output_len} must be 0 or 1 for a request that is not rebootstrapped: a first-time "
                "request is queued before prefill's first token (DecodePreallocQueue.add; a retracted one resumes "
                "through retracted_queue), and the fill length leaves out the last output token"
            )

    @property
    def fill_len(self) -> int:
        """The KV decode holds for it: the prompt plus the output tokens but the last (all of them when
        rebootstrapped: prefill recomputes them)."""
        return self.length + (self.output_len if self.rebootstrap else max(self.output_len - 1, 0))

    @property
    def prefill_len(self) -> int:
        """The tokens prefill computes and sends: the prompt (with the outputs when rebootstrapped)."""
        return self.length + (self.output_len if self.rebootstrap else 0)


@dataclass(frozen=True)
class DecodeQueueCase:
    """One ``pop_preallocated`` pass."""

    page_size: int
    requests: tuple[QueuedRequest, ...]
    free_pages: tuple[int, ...]
    """The order the KV allocator hands pages out in."""
    metadata_buffers: int
    """Free metadata buffers (``req_to_metadata_buffer_idx_allocator``): one per admitted request."""
    request_rows: int
    """Free request-to-token rows (``req_to_token_pool``): one per admitted request."""
    token_budget: int
    """Tokens admission may commit in this pass (what ``_allocatable_token_budgets`` reports before it);
    at most the free pages' tokens. The release re-reads it after each admission: the free pool less the decode
    headroom of every active request - the running ones and those this pass admitted to the device - or, when that
    is larger, the largest running request's need; so each device admission takes its fresh pages' tokens and
    whatever its headroom adds to that reserve."""
    reserved_decode_tokens: int = 0
    """``num_reserved_decode_tokens``: headroom each admitted request must leave for decoding."""
    running: tuple[tuple[int, str | None], ...] = ()
    """The running batch: ``(tokens, lora)`` of each request (tokens are retractable; adapters are loaded)."""
    priority_order: str | None = None
    """None: FIFO; else priority scheduling in ``PRIORITY_ORDERS``."""
    max_loras: int | None = None
    """None: LoRA off; else the adapters a batch may hold (the base model counts as one)."""
    restrict: bool = False
    """The pass is given ``rids_to_check``: the requests whose ``checked`` is set."""
    pp_consensus: bool = False
    """Pipeline parallelism (``--pp-size`` above 1; the PP scheduler's ``process_prealloc_queue``): the pass is given
    the stages' consensus (``pp_good_rids``, ``pp_bad_rids``: the requests whose ``consensus`` is set). It looks at
    exactly those and polls no receiver: a request in ``pp_bad_rids`` is aborted (500), one in ``pp_good_rids`` is
    ready (``waiting_for_input``). Not with ``restrict``: SGLang refuses ``rids_to_check`` in PP mode."""
    microbatch_loras: tuple[str | None, ...] = ()
    """A PP pass: the LoRA adapters of the requests running in the stage's other microbatches (the scheduler's
    ``running_mbs``; ``running`` is this microbatch's batch). Their adapters are loaded too: the LoRA gate counts every
    microbatch's (only read with LoRA on)."""
    radix: bool = False
    """``--disaggregation-decode-enable-radix-cache``: requests match their ``prefix_pages``."""
    staging: bool = False
    """Decode's staging buffer on (``SGLANG_DISAGG_STAGING_BUFFER``) with receivers that require staging."""
    allocation_policy: str = "early"
    """``--disaggregation-decode-allocation-policy`` (``ALLOCATION_POLICIES``): ``"early"`` (the default, and what
    a release before the flag does) has decode ask prefill to recompute a rebootstrapped request once its
    destinations are sent; ``"prefill_complete"`` asks at bootstrap, before the pass."""
    host_threshold: float = 1.0
    """``--disaggregation-decode-host-receive-threshold``: below 1, once the device pool's usage reaches it a
    host-capable request (not rebootstrapped) is received into host memory instead."""
    pool_usage: float = 0.0
    """The device KV pool's full-token usage the pass sees."""
    host_free_pages: tuple[int, ...] = ()
    """Decode's host KV pool: its free pages in the order it hands them out."""
    host_reserved_tokens: int = 0
    """Host tokens a host-received request must leave free beyond its own."""
    swa_free_pages: tuple[int, ...] | None = None
    """A hybrid SWA pool with SWA tail pre-allocation: the SWA buffer's free pages (an admitted request takes them
    for its window tail); None: one full pool. Needs ``page_size > 1``. The buffer is pages 0 (padding) to the
    highest free page; the pages not free are in use (``swa_tokens_in_use``)."""
    window: int = 4
    """The sliding window, with an SWA pool."""
    swa_token_budget: int | None = None
    """SWA tokens admission may commit in this pass, with an SWA pool (what ``_swa_tail_allocatable_token_budget``
    reports before it; each admission takes its tail's page-aligned tokens from it, and the decode headroom - to
    0.5.18 outright, from 0.5.19 as the re-read budget's reserve grows, at most by what the windows can grow). At most
    the SWA buffer's free tokens: without the decode radix cache nothing else is reclaimable. None: the budget also
    counts SWA pages the decode radix cache could evict (its SWA-evictable credit, with #27770's decode radix cache
    for SWA models, 0.5.19), more than the free buffer - admission's SWA check does not bind and the reclaim before
    pre-allocation decides (``_reclaim_swa_tail_capacity``); so only with the radix cache."""

    def __post_init__(self) -> None:
        require_page_size(self.page_size)
        if not self.requests:
            raise ValueError("requests must hold at least one queued request")
        for i, r in enumerate(self.requests):
            if not isinstance(r, QueuedRequest):
                raise TypeError(f"requests[{i}] must be a QueuedRequest, got {type(r).__name__}")
            if r.max_new_tokens > CLIP_MAX_NEW_TOKENS:
                raise ValueError(f"requests[{i}].max_new_tokens must be <= {CLIP_MAX_NEW_TOKENS}")
            if len(r.prefix_pages) * self.page_size > r.length:
                raise ValueError(
                    f"requests[{i}] has a prefix of {len(r.prefix_pages)} pages, more than its {r.length} tokens"
                )
            if set(r.prefix_pages) & set(self.free_pages):
                raise ValueError(f"requests[{i}].prefix_pages must not be free pages (the radix cache holds them)")
        if 0 in self.free_pages or len(set(self.free_pages)) != len(self.free_pages):
            raise ValueError("free_pages must be distinct pages >= 1 (page 0 is padding)")
        require_int("metadata_buffers", self.metadata_buffers, minimum=0)
        require_int("request_rows", self.request_rows, minimum=0)
        require_int("reserved_decode_tokens", self.reserved_decode_tokens, minimum=0)
        require_int("token_budget", self.token_budget, minimum=0)
        if self.token_budget > len(self.free_pages) * self.page_size:
            raise ValueError(
                f"token_budget={self.token_budget} exceeds the free pages' {len(self.free_pages) * self.page_size} "
                "tokens: admission's budget never counts more than the pool holds"
            )
        for tokens, lora in self.running:
            require_int("running tokens", tokens, minimum=1)
            if lora is not None and not isinstance(lora, str):
                raise TypeError(f"running lora must be an adapter name or None, got {lora!r}")
        if self.priority_order is not None and self.priority_order not in PRIORITY_ORDERS:
            raise ValueError(f"priority_order must be None or one of {PRIORITY_ORDERS}, got {self.priority_order!r}")
        if self.max_loras is not None:
            require_int("max_loras", self.max_loras, minimum=1)
        if not 0.0 <= self.host_threshold <= 1.0 or not 0.0 <= self.pool_usage <= 1.0:
            raise ValueError(
                f"host_threshold={self.host_threshold} and pool_usage={self.pool_usage} must be fractions in [0, 1]"
            )
        if 0 in self.host_free_pages or len(set(self.host_free_pages)) != len(self.host_free_pages):
            raise ValueError("host_free_pages must be distinct pages >= 1")
        require_int("host_reserved_tokens", self.host_reserved_tokens, minimum=0)
        if self.swa_free_pages is not None:
            if self.page_size == 1:
                raise ValueError("swa_free_pages: SWA tail pre-allocation needs page_size > 1")
            if 0 in self.swa_free_pages or len(set(self.swa_free_pages)) != len(self.swa_free_pages):
                raise ValueError("swa_free_pages must be distinct pages >= 1")
            require_int("window", self.window, minimum=1)
            for i, r in enumerate(self.requests):
                if self.prefix_len(i) > r.fill_len - self.swa_tail_len(i):
                    raise ValueError(f"requests[{i}]'s prefix reaches into its SWA tail")
            if self.host_threshold < 1:
                raise ValueError("host receive with an SWA pool is not modelled")
            if self.swa_token_budget is None and not self.radix:
                raise ValueError(
                    "swa_token_budget=None (an SWA budget beyond the free SWA buffer) needs the decode radix cache: "
                    "without it no SWA page is evictable, so the budget never exceeds the free buffer"
                )
        if self.swa_token_budget is not None:
            require_int("swa_token_budget", self.swa_token_budget, minimum=0)
            held = len(self.swa_free_pages or ()) * self.page_size
            if self.swa_free_pages is None or self.swa_token_budget > held:
                raise ValueError(
                    f"swa_token_budget={self.swa_token_budget} needs an SWA pool and at most its {held} free tokens"
                )
        if self.host_threshold < 1 and self.radix:
            raise ValueError(
                "host_threshold < 1 with the radix cache: the host path's root-prefix binding is not modelled"
            )
        if self.pp_consensus and self.restrict:
            raise ValueError(
                "pp_consensus=True with restrict=True: a PP pass takes the consensus, never rids_to_check "
                "(pop_preallocated raises 'rids_to_check cannot be used in PP mode')"
            )
        if self.microbatch_loras and not self.pp_consensus:
            raise ValueError("microbatch_loras: other microbatches run only in a PP pass (pp_consensus=True)")
        for lora in self.microbatch_loras:
            if lora is not None and not isinstance(lora, str):
                raise TypeError(f"microbatch_loras must hold adapter names or None, got {lora!r}")
        if self.allocation_policy not in ALLOCATION_POLICIES:
            raise ValueError(f"allocation_policy={self.allocation_policy!r} must be one of {ALLOCATION_POLICIES}")
        if self.allocation_policy == "prefill_complete":
            refused = [what for what, on in (("the decode radix cache", self.radix), ("decode host KV buffering",
                       self.host_threshold < 1), ("staging buffers", self.staging)) if on]  # fmt: skip
            if refused:
                raise ValueError(
                    f"allocation_policy='prefill_complete' with {', '.join(refused)}: the server refuses it "
                    "(SGLang's _validate_prefill_complete, arg_groups/pd_disaggregation_hook.py)"
                )

    def input_features(self) -> tuple[str, ...]:
        """The input features the case uses that came with a release (``pdverify.properties.releases.FEATURES``):
        decode-side prefixes (the radix cache), host receive, a hybrid SWA pool (its tail pre-allocated), with the radix
        cache; a pass given ``rids_to_check``; a PP pass given the consensus; priority scheduling; the staging buffer;
        pages of more than one token."""
        used = ["decode_prefixes"] if self.radix else []
        if self.page_size > 1:
            used.append("paged_transfer")
        if self.host_threshold < 1:
            used.append("host_receive")
        if self.swa_free_pages is not None:
            used.append("swa_tail_prealloc")
        if self.radix and self.swa_free_pages is not None:
            used.append("swa_decode_prefix")
        if self.restrict:
            used.append("rids_to_check")
        if self.pp_consensus:
            used.append("pp_consensus")
        if any(r.receiver_failed is not None for r in self.requests):
            used.append("handshake_failure_abort")
        if any(r.receiver_failed == "abort" for r in self.requests):
            used.append("prealloc_receiver_abort")
        if self.priority_order is not None:
            used.append("priority_scheduling")
        if self.staging:
            used.append("staging_buffer")
        return tuple(used)

    def looked_at(self, index: int) -> bool:
        """Whether the pass looks at request ``index``: every request, or those in ``rids_to_check`` (``restrict``),
        or those in the PP consensus (``pp_consensus``)."""
        r = self.requests[index]
        if self.pp_consensus:
            return r.consensus is not None
        return r.checked or not self.restrict

    def handshake_failed(self, index: int) -> bool:
        """Whether the pass's handshake aborts request ``index`` (when it looks at it): its receiver failed, or - a
        PP pass - the consensus put it in ``pp_bad_rids``."""
        r = self.requests[index]
        return r.consensus == "bad" if self.pp_consensus else r.receiver_failed is not None

    def ready(self, index: int) -> bool:
        """Whether request ``index``'s receiver is ready when admission reaches it (``waiting_for_input``): an earlier
        pass saw it ready, or - a PP pass - the consensus put it in ``pp_good_rids``."""
        r = self.requests[index]
        return r.bootstrapped or (self.pp_consensus and r.consensus == "good")

    def to_host(self, index: int) -> bool:
        """Whether request ``index`` takes the host receive path when the pass reaches it."""
        r = self.requests[index]
        return (
            self.host_threshold < 1 and not r.rebootstrap and r.host_capable and self.pool_usage >= self.host_threshold
        )

    @property
    def retractable_tokens(self) -> int:
        return sum(tokens for tokens, _ in self.running)

    def prefix_len(self, index: int) -> int:
        """The L1 prefix request ``index`` matches: its prefix pages' tokens with the radix cache on and the
        request not rebootstrapped, else 0."""
        r = self.requests[index]
        return len(r.prefix_pages) * self.page_size if self.radix and not r.rebootstrap else 0

    def swa_tail_len(self, index: int) -> int:
        """The SWA span request ``index`` takes with an SWA pool (``_swa_tail_len`` of its fill): from the
        page-aligned window start, which with the radix cache keeps ``max(W, page_size)`` tokens before the last
        committed position; 0 without an SWA pool."""
        if self.swa_free_pages is None:
            return 0
        return self.swa_span(self.requests[index].fill_len)

    def swa_span(self, seq_len: int) -> int:
        """``_swa_tail_len(seq_len)``: the SWA span of ``seq_len`` tokens with an SWA pool (``swa_tail_len`` of a
        request is this of its fill)."""
        ps = self.page_size
        reach = max(self.window, ps) + 1 if self.radix else self.window
        return seq_len - max(0, seq_len - reach) // ps * ps

    def swa_required(self, index: int) -> int:
        """``_prealloc_required_tokens``' SWA side: request ``index``'s tail in whole pages, plus the decode headroom
        unless the radix cache is off (``disable_radix_cache``)."""
        tail = self.swa_tail_len(index)
        headroom = self.reserved_decode_tokens if self.radix else 0
        return pages_needed(tail, self.page_size) * self.page_size + headroom

    @property
    def swa_tokens_in_use(self) -> int:
        """SWA tokens in use before the pass: the SWA buffer (pages 0 to the highest free one) less its free pages."""
        free = self.swa_free_pages or ()
        return (max(free, default=0) + 1 - len(free)) * self.page_size

    def swa_kept_back(self, admitted: int, taken: int) -> int:
        """What ``_swa_tail_allocatable_token_budget`` keeps back after ``admitted`` device admissions took ``taken``
        SWA tokens: the active requests' decode headroom, at most what their windows can still grow
        (``sliding_window_size`` x active - SWA tokens in use), or the largest running request's SWA need with the
        others retracted."""
        active = len(self.running) + admitted
        growth = max(0, active * self.window - self.swa_tokens_in_use - taken)
        room = min(RUNNING_MAX_NEW_TOKENS, CLIP_MAX_NEW_TOKENS) - self.retractable_swa_tokens
        single = max((self.swa_span(tokens) + room for tokens, _ in self.running), default=0)
        return max(min(self.reserved_decode_tokens * active, growth), single)

    @property
    def retractable_swa_tokens(self) -> int:
        """The running requests' SWA spans (``_swa_retractable_len``; they carry no outputs here)."""
        return sum(self.swa_span(tokens) for tokens, _ in self.running)

    def pages_for(self, index: int) -> int:
        """Fresh KV pages request ``index`` takes when admitted (its prefix is held already)."""
        r = self.requests[index]
        return pages_needed(r.fill_len, self.page_size) - self.prefix_len(index) // self.page_size


@dataclass
class QueueTrace:
    """What one pass did; requests are named by their index in ``DecodeQueueCase.requests``."""

    admitted: tuple[int, ...]
    """In admission order."""
    failed: tuple[int, ...]
    remaining: tuple[int, ...]
    """The queue after the pass, in its order."""
    streamed: tuple[int, ...]
    """Aborts streamed to the client by this pass."""
    cleared: tuple[int, ...]
    """Requests whose KV receiver was cleared and released."""
    pages: tuple[tuple[int, ...], ...]
    """Per admitted request: the destination page list sent to prefill."""
    dtypes: tuple[str, ...]
    aux: tuple[int, ...]
    """Per admitted request: its metadata buffer."""
    rows: tuple[int, ...]
    """Per admitted request: its request-to-token row."""
    allocated: tuple[tuple[int, ...], ...]
    """Per admitted request: the token locations of ``[prefix, fill_len)`` it was given."""
    row_prefix: tuple[tuple[int, ...], ...] = ()
    """Per admitted request: its row's locations of ``[0, prefix)`` (the matched prefix)."""
    locked: tuple[int, ...] = ()
    """Requests holding a radix lock after the pass."""
    host: tuple[bool, ...] = ()
    """Per admitted request: received into host memory (its pages and ``allocated`` are host ones, no row)."""
    rows_left: int | None = None
    """Request-to-token rows still free after the pass (None: the target does not say; Q4 then fails)."""
    buffers_left: int | None = None
    """Metadata buffers still free after the pass (None: the target does not say; Q4 then fails)."""
    events: tuple[tuple[str, int], ...] = ()
    """The handshake, in order: ``("staging", i)`` (registered with decode's staging handler), ``("metadata", i)``
    (destinations sent to prefill), ``("recompute", i)`` (prefill asked to recompute a rebootstrapped request)."""
    aborted_left: tuple[int, ...] | None = None
    """Requests still queued after the pass with their abort set (``FINISH_ABORT``); None: the target does not say
    (Q3 then fails)."""


@dataclass(frozen=True)
class Admission:
    """One admitted request, as the trace lists it."""

    index: int
    pages: tuple[int, ...]
    dtype: str
    aux: int
    row: int
    allocated: tuple[int, ...]
    row_prefix: tuple[int, ...] = ()
    host: bool = False


def queue_trace(admissions: list[Admission], **rest: Any) -> QueueTrace:
    """The trace of a pass from its admissions (in order) and the rest of ``QueueTrace``'s fields."""
    return QueueTrace(
        admitted=tuple(a.index for a in admissions),
        pages=tuple(a.pages for a in admissions),
        dtypes=tuple(a.dtype for a in admissions),
        aux=tuple(a.aux for a in admissions),
        rows=tuple(a.row for a in admissions),
        allocated=tuple(a.allocated for a in admissions),
        row_prefix=tuple(a.row_prefix for a in admissions),
        host=tuple(a.host for a in admissions),
        **rest,
    )
