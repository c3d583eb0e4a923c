"""Version-aware contracts: which SGLang releases' contract a property encodes.

A ``Contract`` is a half-open range of releases ``[since, until)`` with a label. A property checked on a
release outside its range is *not applicable* ("contract before/after ..."), never passed and never failed: an
intended contract change is not a defect. Targets that are not a released SGLang (pdverify's ports, user
targets) have no release, and every contract applies to them.

The first releases below were read from the released wheels (``ci/sglang_release_env.py`` installs them;
docs/release-matrix.md shows the table). ``contract_evidence.json`` beside this file names the upstream change
behind each boundary, with its kind.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version


@dataclass(frozen=True)
class Contract:
    label: str
    since: str | None = None
    """The first release whose contract this is (None: every release that has the units)."""
    until: str | None = None
    """The first release whose contract differs (None: still current)."""

    def __post_init__(self) -> None:
        for bound in (self.since, self.until):
            if bound is not None:
                Version(bound)  # raises InvalidVersion naming the bound

    def __str__(self) -> str:
        return self.label

    def not_applicable(self, release: str | None) -> str | None:
        """Why this contract does not apply to ``release`` (None: it applies). A target without a release (or a
        development build) is held to the current contracts: every one but those that ended (``until``)."""
        past = None if self.until is None else f"not applicable (a past contract, {self.label}: the current applies)"
        if release is None:
            return past
        try:
            version = Version(release)
        except InvalidVersion:
            return past  # a development build: check it against the current contract
        if self.since is not None and version < Version(self.since):
            return f"not applicable (contract before {self.label}: sglang {release} < {self.since})"
        if self.until is not None and version >= Version(self.until):
            return f"not applicable (contract after {self.label}: sglang {release} >= {self.until})"
        return None


ALL_RELEASES = Contract("every release that has the units")
FROM_31173 = Contract("upstream #31173 (device-side stride, torch input), first released in sglang 0.5.16", "0.5.16")
FROM_35070 = Contract("upstream #35070 (no PREBUILT prompt copy), first released in sglang 0.5.18", "0.5.18")

# When prepare_for_prebuilt gained each field or rule it now has (first release whose wheel has it):
FROM_SEQ_LENS_CPU = Contract("seq_lens_cpu is set (#10720), first in sglang 0.5.3", "0.5.3")
FROM_ORIG_SEQ_LENS = Contract("orig_seq_lens is set (#5949), first in sglang 0.5.1", "0.5.1")
FROM_POOL_INDICES_CPU = Contract("req_pool_indices_cpu is set, first in sglang 0.5.13", "0.5.13")
FROM_RETRACTED_STAIN = Contract("a stained (retracted) request's bookkeeping is kept, first in sglang 0.5.6", "0.5.6")
FROM_REBOOTSTRAP = Contract("PD rebootstrap (pd_rebootstrap_in_progress cleared), first in sglang 0.5.16", "0.5.16")
FROM_LOGPROB_STARTS_NONE = Contract("extend_logprob_start_lens is None, first in sglang 0.5.15", "0.5.15")
FROM_PD_LOGPROB = Contract("PD decode returns logprobs (#6558), first in sglang 0.4.6.post5", "0.4.6.post5")
FROM_PREBUILT_MODE = Contract("ForwardMode.PREBUILT (EXTEND before), first in sglang 0.5.5.post1", "0.5.5.post1")

# When the KV sender's last send began to carry the state lists (hybrid-model state payloads):
FROM_STATE_PAYLOADS = Contract(
    "the KV sender's last send carries the state lists (#10912, hybrid-model PD), first in sglang 0.5.3.post3",
    "0.5.3.post3",
)

# When the KV sender began to place each send and flag the last itself (before, prefill's send loop passed both):
FROM_SENDER_TRACKS = Contract(
    "the KV sender tracks its destination offset and last flag (#6019), first in sglang 0.4.6.post5", "0.4.6.post5"
)

# When the metadata wire gained each field it now carries:
FROM_STATE_LISTS = Contract("the wire carries one state list per state type (#24932), first in sglang 0.5.12", "0.5.12")
FROM_MOONCAKE_DECODE_PREFIX = Contract(
    "Mooncake's wire carries decode's prefix length (#24257), first in sglang 0.5.12", "0.5.12"
)


@dataclass
class InputDomain:
    """What the inputs of a release's contract can hold, read by the strategies at draw time (a release before
    a feature never sees inputs that only the feature makes)."""

    decode_prefix: bool = True
    """Decode-side cached prefixes (``--disaggregation-decode-enable-radix-cache``), from sglang 0.5.11; before,
    decode's prefix is always 0."""
    rebootstrap: bool = True
    """PD rebootstrap (``extend_end`` one past ``seq_len``), from sglang 0.5.16."""
    allocation_policy: bool = True
    """Decode's allocation policy (``--disaggregation-decode-allocation-policy early|prefill_complete``), from
    sglang 0.5.22; before, the flag does not exist and decode behaves as ``"early"``, the only policy drawn."""
    seeded_computed: bool = True
    """Decode seeds ``already_computed`` from the prefill-reported cached tokens before ``prepare_for_prebuilt``
    (#25973), from sglang 0.5.13; before, an unstained request reaches it with ``already_computed == 0``
    (``Req.__init__`` and ``reset_for_retract`` set 0, and nothing in the decode path sets it)."""
    features: frozenset[str] = frozenset()
    """The input features of ``FEATURES`` the release has (every one when it is not a release)."""
    release: str | None = field(default=None)

    def has(self, feature: str) -> bool:
        """Whether the release can be given inputs of ``feature`` (a key of ``FEATURES``)."""
        if feature not in FEATURES:
            raise KeyError(f"unknown input feature {feature!r} (known: {', '.join(FEATURES)})")
        return feature in self.features

    @property
    def wire_page_dtype(self) -> str:
        """The dtype of the page list the release's decode sends over the metadata wire: int32 from #7214, int64
        before (``int32_wire``)."""
        return "int32" if self.has("int32_wire") else "int64"

    def state_types(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """The state types of ``names`` the release registers (``StateType``): a type that came later is never drawn
        for it."""
        return tuple(n for n in names if f"state:{n}" not in FEATURES or f"state:{n}" in self.features)


# Input features that came with a release (each an input-domain boundary with its evidence in
# contract_evidence.json): a release before one is never given its inputs, the strategies ask ``DOMAIN.has``.
FROM_INT32_WIRE = Contract("decode's page list goes over the wire as int32 (#7214), first in sglang 0.4.7.post1",
                           "0.4.7.post1")  # fmt: skip
FROM_HOST_TENSOR_INDICES = Contract("a KV sender that takes host tensor indices (Mooncake), first in sglang 0.5.23",
                                    "0.5.23")  # fmt: skip
FROM_REQUEST_ROW_STATE = Contract("the REQUEST_ROW state type, first in sglang 0.5.23", "0.5.23")
FROM_PAGED_TRANSFER = Contract("PD transfer of pages, page size > 1 (#5561), first in sglang 0.4.5.post2",
                               "0.4.5.post2")  # fmt: skip
FROM_TRANSLATED_IDS = Contract(
    "PD over unified-memory pools: int64 ids translated for the transfer (#33362), first in sglang 0.5.18", "0.5.18"
)
FROM_HOST_RECEIVE = Contract(
    "decode receives KV into host memory for custom transfer backends (#40238), first in sglang 0.5.21", "0.5.21"
)
DECODE_PREFIXES = Contract("decode-side cached prefixes, first in sglang 0.5.11", "0.5.11")
FROM_DEFERRED_ALLOCATION = Contract(
    "deferred decode allocation: prefill's sender waits on DeferredBootstrap (#40703), first in sglang 0.5.22", "0.5.22"
)
FROM_KV_CACHE_SHARDING = Contract(
    "KV cache sharding on PD prefill workers (--enable-kv-cache-sharding, #30501), first in sglang 0.5.22", "0.5.22"
)
FROM_DSV4_PAIR_STATE = Contract(
    "DeepSeek-V4's ratio-2 pending-pair request state (request-scoped compress pools), first in sglang 0.5.21", "0.5.21"
)
FROM_MINIMAX_DENSE_KV_STATE = Contract("the MINIMAX_DENSE_KV state type, first in sglang 0.5.21", "0.5.21")
FROM_BLOCK_SCALE_STATE = Contract("the BLOCK_SCALE and BLOCK_SCALE_SWA state types, first in sglang 0.5.19", "0.5.19")
FROM_QSA_STATE = Contract("the QSA_COMPRESSED state type, first in sglang 0.5.20", "0.5.20")
FROM_KV_CHECKSUM = Contract(
    "the PD KV transfer checksum (--disaggregation-enable-kv-checksum, #39500), first in sglang 0.5.21", "0.5.21"
)
FROM_SENDER_TRACING = Contract(
    "request tracing in the PD KV sender (--enable-trace, Mooncake's backend, #23755), first in sglang 0.5.13", "0.5.13"
)
FROM_DCP_PACK_LIMIT = Contract(
    "a send to a DCP-relayout peer is split at the pack buffer's size (get_max_transfer_tokens), first in sglang "
    "0.5.21",
    "0.5.21",
)
FROM_SWA_DECODE_PREFIX = Contract(
    "the decode radix cache for hybrid SWA models (a decode prefix with sliding-window state), first in sglang 0.5.19",
    "0.5.19",
)
FROM_DSV4_DECODE_PREFIX = Contract(
    "the decode radix cache for DeepSeek-V4 (on its unified KV layout), first in sglang 0.5.23", "0.5.23"
)
FROM_SWA_RING_STATE = Contract("the SWA_RING state type (#27935), first in sglang 0.5.14", "0.5.14")
FROM_MINIMAX_INDEX_K_STATE = Contract("the MINIMAX_INDEX_K state type (#28714), first in sglang 0.5.15", "0.5.15")
FROM_DSV4_REQUEST_STATE = Contract(
    "DeepSeek-V4's request-scoped state (C128_STATE, #28612; DSV4_REQUEST_STATE from 0.5.20), first in sglang 0.5.15",
    "0.5.15",
)
FROM_DECODE_HICACHE = Contract(
    "decode HiCache: a decode prefix whose host (L2) part is restored while prefill sends (#26227), first in sglang "
    "0.5.13",
    "0.5.13",
)
FROM_SWA_TAIL_PREALLOC = Contract(
    "decode pre-allocates a hybrid SWA request's window tail only (#24857), first in sglang 0.5.12", "0.5.12"
)
SWA_WHOLE_PAGED = Contract(
    "decode allocates a hybrid SWA request's whole sequence in the SWA buffer at a page size above 1: from paged SWA "
    "pools (#16296, 0.5.8) until SWA tail pre-allocation (#24857, 0.5.12), which takes that path wherever the page "
    "size is above 1",
    "0.5.8",
    "0.5.12",
)
FROM_DSV4_DRAFT_STATE = Contract(
    "DeepSeek-V4's speculative draft registers its own SWA state for PD (setup_state_kv_args' draft block), first in "
    "sglang 0.5.23",
    "0.5.23",
)
FROM_SWA_PAGED_POOL = Contract(
    "hybrid SWA pools at a page size above 1 (SWATokenToKVPoolAllocator's page_size, #16296), first in sglang 0.5.8",
    "0.5.8",
)
FROM_STAGING_GRID = Contract(
    "staging places each send in a fixed page-aligned grid of chunked_prefill_size tokens (#31217), first in sglang "
    "0.5.17",
    "0.5.17",
)
FROM_DCP_PREFILL = Contract(
    "a PD prefill server with decode context parallel (--dcp-size > 1: radix hits and chunk tails off the allocator's "
    "dcp_size-page unit, #32837), first in sglang 0.5.17",
    "0.5.17",
)
FROM_KV_TRANSPORT = Contract(
    "a KV transport with a metadata wire (Mooncake's, #4880), first in sglang 0.4.5.post1", "0.4.5.post1"
)
FROM_RIDS_TO_CHECK = Contract(
    "decode's pre-allocation pass given rids_to_check (the decode PP event loop, #14945), first in sglang 0.5.7",
    "0.5.7",
)
FROM_PP_CONSENSUS = Contract(
    "a pipeline-parallel decode stage's pre-allocation step given the stages' consensus (the good and bad lists of "
    "the decode PP event loop, process_prealloc_queue, #14945), first in sglang 0.5.7",
    "0.5.7",
)
FROM_PP_TRANSFER = Contract(
    "a pipeline-parallel decode stage's transfer step given the stages' agreement (the decode PP event loop's "
    "process_decode_transfer_queue, #14945), first in sglang 0.5.7",
    "0.5.7",
)
FROM_PREFILL_PP = Contract(
    "a pipeline-parallel prefill server (--pp-size above 1 with --disaggregation-mode prefill: the prefill PP event "
    "loop, whose later stages bootstrap a request by what the stages agreed, #8846), first in sglang 0.5.1",
    "0.5.1",
)
FROM_HANDSHAKE_FAILURE_ABORT = Contract(
    "decode aborts a request whose KV receiver failed (prepare_abort, 500) where it raised 'Handshake failed' "
    "(#6504), first in sglang 0.4.6.post5",
    "0.4.6.post5",
)
FROM_TRANSFER_FAILURE_ABORT = Contract(
    "decode aborts a request whose KV transfer failed (prepare_abort, 500) where it raised 'Transfer failed' "
    "(#6504), first in sglang 0.4.6.post5",
    "0.4.6.post5",
)
FROM_SCALAR_BOOTSTRAP_BATCH = Contract(
    "a generate call expanded into several requests (a batch, or n parallel samples) may carry one bootstrap host, "
    "port and room, which GenerateReqInput's normalisation expands (#10236), first in sglang 0.5.2; before, "
    "__getitem__ states 'the bootstrap_host, bootstrap_port, bootstrap_room must be a list'",
    "0.5.2",
)
FROM_NIXL_TRANSPORT = Contract(
    "the NIXL KV transport (--disaggregation-transfer-backend nixl, #5477), first in sglang 0.4.5.post3", "0.4.5.post3"
)
FROM_PD_CACHED_TOKENS = Contract(
    "PD decode reports prefill's cached tokens (the metadata row's cached_tokens, #10192), first in sglang 0.5.3",
    "0.5.3",
)
FROM_PREALLOC_RECEIVER_ABORT = Contract(
    "the scheduler's AbortReq handler aborts a pre-allocation-queued request's KV receiver (#8352), first in "
    "sglang 0.4.9.post5",
    "0.4.9.post5",
)
FROM_DETERMINISTIC_INFERENCE = Contract(
    "deterministic inference (--enable-deterministic-inference, #10645) and a request's sampling seed "
    "(SamplingParams.sampling_seed, #10678), first in sglang 0.5.3",
    "0.5.3",
)
FROM_PRIORITY_SCHEDULING = Contract(
    "priority scheduling (--enable-priority-scheduling, #8746), first in sglang 0.5.3", "0.5.3"
)
FROM_DP_RANK_QUERY = Contract(
    "prefill registers each request's attention-DP rank with the bootstrap server for decode to query "
    "(#19168, load balancing other than following the bootstrap room), first in sglang 0.5.10",
    "0.5.10",
)
FROM_ATTENTION_CP = Contract(
    "PD with attention context parallel: a dummy CP rank sends nothing (#19504), all CP ranks may share the transfer "
    "(#19765), first in sglang 0.5.10",
    "0.5.10",
)
FROM_OPTIMISTIC_PREFILL = Contract(
    "optimistic prefill: a request retried before its bootstrap completes keeps the metadata buffer it holds "
    "(#26780), first in sglang 0.5.13",
    "0.5.13",
)
FROM_EARLY_SEND = Contract(
    "the early cached-prefix send (SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX, #29316), first in sglang 0.5.15",
    "0.5.15",
)
FROM_STAGING_BUFFER = Contract(
    "decode's GPU staging buffer for heterogeneous-TP transfers (SGLANG_DISAGG_STAGING_BUFFER, #19890), first in "
    "sglang 0.5.10",
    "0.5.10",
)

# When decode's pre-allocation queue gained each rule it now has:
FROM_REQ_ROW_PADDING = Contract(
    "request row 0 reserved as padding in every request pool (#24243), first in sglang 0.5.11", "0.5.11"
)
FROM_SWA_HEADROOM_RADIX_ONLY = Contract(
    "a hybrid SWA request's decode headroom charged against the SWA budget only with the radix cache (#28755, "
    "chunk-cache SWA sizing), first in sglang 0.5.14",
    "0.5.14",
)
FROM_BUDGET_REREAD = Contract(
    "admission re-reads its budget from the pool after each admission (#19746, the decode radix cache), first in "
    "sglang 0.5.11",
    "0.5.11",
)
FROM_SWA_BUDGET_REREAD = Contract(
    "admission re-reads its SWA budget from the SWA pool after each admission, its decode headroom bounded by what "
    "the windows can still grow (#27770, the decode radix cache for hybrid SWA models; the cap from #24857), first "
    "in sglang 0.5.19",
    "0.5.19",
)
BUDGET_READ_ONCE = Contract(
    "admission charges each request against a budget read once per pass (before #19746)", until="0.5.11"
)
"""The earlier form of ``FROM_BUDGET_REREAD``'s rule, to 0.5.10.post1: each admission takes its pages' tokens and its
decode headroom from a budget read at the start of the pass."""

FROM_DSA_KPOOL_PAGES = Contract(
    "a pooled DSA indexer (index_kpool > 1, GLM-5.3-Flash) on KV pages of 64 * index_kpool tokens, first in sglang "
    "0.5.22",
    "0.5.22",
)
DSA_KPOOL_PACKED = Contract(
    "a pooled DSA indexer packed into the DSA models' 64-token pages (before 0.5.22's 64 * index_kpool)", until="0.5.22"
)
"""The earlier form of ``FROM_DSA_KPOOL_PAGES``' page size, to 0.5.21: every DSA model runs page size 64."""

NO_RIDS_TO_CHECK_CALLER = Contract(
    "no caller hands decode's pre-allocation pass rids_to_check: the decode PP loop hands it the stages' consensus "
    "instead (pp_good_rids / pp_bad_rids, #31869), from sglang 0.5.17",
    "0.5.17",
)
"""Where ``FROM_RIDS_TO_CHECK``'s input stops being made: ``pop_preallocated`` still takes ``rids_to_check`` (a PP
pass refuses it), but from 0.5.17 no caller in the release passes it - the PP mixin passes the consensus lists and
the non-PP loop passes nothing."""

FEATURES: dict[str, Contract] = {
    "decode_prefixes": DECODE_PREFIXES,
    "paged_transfer": FROM_PAGED_TRANSFER,
    "translated_ids": FROM_TRANSLATED_IDS,
    "host_receive": FROM_HOST_RECEIVE,
    "state_payloads": FROM_STATE_PAYLOADS,
    "int32_wire": FROM_INT32_WIRE,
    "host_tensor_indices": FROM_HOST_TENSOR_INDICES,
    "state:REQUEST_ROW": FROM_REQUEST_ROW_STATE,
    "deferred_allocation": FROM_DEFERRED_ALLOCATION,
    "kv_cache_sharding": FROM_KV_CACHE_SHARDING,
    "dsv4_pair_state": FROM_DSV4_PAIR_STATE,
    "state:MINIMAX_DENSE_KV": FROM_MINIMAX_DENSE_KV_STATE,
    "state:BLOCK_SCALE": FROM_BLOCK_SCALE_STATE,
    "state:BLOCK_SCALE_SWA": FROM_BLOCK_SCALE_STATE,
    "state:QSA_COMPRESSED": FROM_QSA_STATE,
    "kv_checksum": FROM_KV_CHECKSUM,
    "rebootstrap": FROM_REBOOTSTRAP,
    "dcp_pack_limit": FROM_DCP_PACK_LIMIT,
    "swa_decode_prefix": FROM_SWA_DECODE_PREFIX,
    "dsv4_decode_prefix": FROM_DSV4_DECODE_PREFIX,
    "state:SWA_RING": FROM_SWA_RING_STATE,
    "state:MINIMAX_INDEX_K": FROM_MINIMAX_INDEX_K_STATE,
    "state:DSV4_REQUEST_STATE": FROM_DSV4_REQUEST_STATE,
    "decode_hicache": FROM_DECODE_HICACHE,
    "state_lists": FROM_STATE_LISTS,
    "swa_paged_pool": FROM_SWA_PAGED_POOL,
    "swa_tail_prealloc": FROM_SWA_TAIL_PREALLOC,
    "swa_budget_reread": FROM_SWA_BUDGET_REREAD,
    "swa_whole_paged": SWA_WHOLE_PAGED,
    "dsv4_draft_state": FROM_DSV4_DRAFT_STATE,
    "dcp_prefill": FROM_DCP_PREFILL,
    "rids_to_check": FROM_RIDS_TO_CHECK,
    "pp_consensus": FROM_PP_CONSENSUS,
    "prefill_pp": FROM_PREFILL_PP,
    "pp_transfer_consensus": FROM_PP_TRANSFER,
    "handshake_failure_abort": FROM_HANDSHAKE_FAILURE_ABORT,
    "transfer_failure_abort": FROM_TRANSFER_FAILURE_ABORT,
    "nixl_transport": FROM_NIXL_TRANSPORT,
    "scalar_bootstrap_batch": FROM_SCALAR_BOOTSTRAP_BATCH,
    "prealloc_receiver_abort": FROM_PREALLOC_RECEIVER_ABORT,
    "priority_scheduling": FROM_PRIORITY_SCHEDULING,
    "deterministic_inference": FROM_DETERMINISTIC_INFERENCE,
    "staging_buffer": FROM_STAGING_BUFFER,
    "dp_rank_query": FROM_DP_RANK_QUERY,
    "attention_cp": FROM_ATTENTION_CP,
    "early_send": FROM_EARLY_SEND,
    "optimistic_prefill": FROM_OPTIMISTIC_PREFILL,
    "dsa_kpool_pages": FROM_DSA_KPOOL_PAGES,
    "dsa_kpool_packed": DSA_KPOOL_PACKED,
}
"""Input feature -> the first release that has it."""

UNMADE_FROM: dict[str, Contract] = {"rids_to_check": NO_RIDS_TO_CHECK_CALLER}
"""Input feature -> the first release none of whose callers makes it any more, though the unit still takes it. A
released server from then on is never given the input (its row would pass or fail on an input no server of it makes);
a target without a release (pdverify's port, a development build) keeps it: the unit's own signature still takes it."""

DOMAIN = InputDomain(features=frozenset(FEATURES))
SEEDED_COMPUTED = Contract(
    "already_computed seeded from prefill's cached tokens (#25973), first in sglang 0.5.13", "0.5.13"
)
"""An input-domain boundary, not a contract: what ``already_computed`` can hold when ``prepare_for_prebuilt`` runs."""
ALLOCATION_POLICY = Contract(
    "decode allocation policy (--disaggregation-decode-allocation-policy), first in sglang 0.5.22", "0.5.22"
)
"""An input-domain boundary, not a contract: which allocation policies a release's decode server accepts."""


def release_features(release: str | None) -> frozenset[str]:
    """The input features of ``FEATURES`` that ``release`` has and some caller of it makes (``UNMADE_FROM``); None,
    or a development build: every current one."""
    had = {name for name, c in FEATURES.items() if c.not_applicable(release) is None}
    if release is not None and _is_release(release):
        had -= {name for name, c in UNMADE_FROM.items() if c.not_applicable(release) is None}
    return frozenset(had)


def _is_release(release: str) -> bool:
    try:
        Version(release)
    except InvalidVersion:
        return False
    return True


def features_lacking(values: Iterable[Any], features: frozenset[str]) -> list[str]:
    """The input features ``values`` use (each one's ``input_features()``, where it has them) that are not in
    ``features``: the one rule by which an input is outside a release's domain (``registry.within_release`` while a
    property runs, ``replay.features_missing`` for a recorded example)."""
    used = {f for value in values for f in getattr(value, "input_features", tuple)()}
    return sorted(f for f in used if f in FEATURES and f not in features)


def bind_release(release: str | None) -> InputDomain:
    """Set ``DOMAIN`` to the contract of ``release`` (None, or a development build: the current contract, every
    input)."""
    DOMAIN.release = release
    DOMAIN.decode_prefix = DECODE_PREFIXES.not_applicable(release) is None
    DOMAIN.rebootstrap = FROM_REBOOTSTRAP.not_applicable(release) is None
    DOMAIN.seeded_computed = SEEDED_COMPUTED.not_applicable(release) is None
    DOMAIN.allocation_policy = ALLOCATION_POLICY.not_applicable(release) is None
    DOMAIN.features = release_features(release)
    return DOMAIN
