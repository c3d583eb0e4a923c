"""The PD KV checksum end to end (``--disaggregation-enable-kv-checksum``, SGLang 0.5.21 on): one request's KV handed
from prefill to decode, digested on both sides and verified by decode.

Prefill's last send digests the pages of the request's row it sends and writes the digest into the request's
metadata; the transfer copies each sent page, whole, onto decode's destination page for it; decode commits the
transfer, digests its own row's pages over the same range and aborts the request when the digests differ. The range
is ``[D, n)``: ``D`` the page-aligned prefix decode's tree already holds (never sent, never digested; 0 for a
rebootstrap, which skips the radix match), ``n`` the tokens prefill computed - the prompt, or for a PD rebootstrap
(``pause_generation(mode="retract")``) the prompt plus the outputs decode kept (the boundary token is popped and
replayed on decode, ``Scheduler.pause_generation``).

The KV cache dtype (``--kv-cache-dtype``, the same on both sides: one model, one layout) decides what each side
registers for the transfer and the digest: K and V per layer, and for ``mxfp8`` (``MHATokenToKVPoolMXFP8``) the
UE8M0 block scales as ``BLOCK_SCALE`` state, one item per KV page, sent with the KV page ids
(``_full_kv_pages_payload``). A page's scales belong to the page: whatever digests a page's KV digests its scales. A
hybrid SWA model (``SWAKVPool``: full-attention and sliding-window layers) also registers its SWA KV as ``SWA``
state, addressed by SWA pages (each full slot's through ``full_to_swa_index_mapping``) and sent for the window only,
the pages of ``[max(D, n - window), n)`` (page-aligned down); with ``mxfp8`` each sub-pool's block scales ride as
their own state (``BLOCK_SCALE`` by full pages, ``BLOCK_SCALE_SWA`` by SWA pages). The model's attention decides the
pool (``kv_pool``): a DSA model (``DSATokenToKVPool``: MLA latents plus the indexer's keys) registers its index-key
cache as ``DSA`` state, one item per KV page, sent for the pages past ``D`` (``_dsa_pages_payload``); a hybrid
linear-attention model (``HybridLinearKVPool``: full-attention layers plus Mamba/GDN layers) registers the Mamba
state as ``MAMBA``, one slot per request (``req_index_to_mamba_index_mapping``), sent whole; a hybrid linear model
whose full-attention layers are DSA (GLM-5.3-Flash: KDA linear layers, DSA layers with ``index_kpool`` 4 and
``index_kpool_compress``) registers both, and with a pooled, compressed indexer (``index_kpool`` > 1) each request's
compression tail as ``DSA_TAIL`` (``get_compress_tail_buf_infos``: one item per request row), which it sends as a
descriptor of ring slots within the row (``get_dsa_tail_state_indices``), never as whole items - so no digest can
cover it item by item, and none may read it (upstream's per-component checksum, #39729, leaves it out). A hybrid
linear model with a compressed QSA indexer (Qwen4-Exp, ``QSATokenToKVPool``) registers the Mamba state, the
indexer's pending ring (``QSA_PENDING``, one item per request row, sent as the request's row) and its compressed keys
(``QSA_COMPRESSED``, one item per KV page, sent for the pages of ``[0, n)``). A MiniMax-M3 sparse model
(``MiniMaxSparseKVPool``: dense layers and K-only sparse layers with an indexer) registers the sparse layers' KV as
its KV, the indexer's keys as ``MINIMAX_INDEX_K`` (one item per KV page, sent for the pages past ``D``:
``minimax_index_transfer_pages``; from 0 before 0.5.23) and the dense layers' KV as ``MINIMAX_DENSE_KV`` (one item per
KV page, sent for the pages of ``[0, n)``). Each state item is digested as it is sent: by the index space and over
the range of its own payload.

A ``ChecksumCase`` is that request: the pool, the KV cache dtype, the page size, the prompt, the prefix, whether it
is a rebootstrap and how many outputs it kept, and the pages of each side's row (one per logical page of ``[0, n)``)
and, for a hybrid linear model, each side's Mamba slot. A ``ChecksumTrace`` is what happened: the pages each digest
read of the KV buffers and of the state buffers (as they are addressed: one item per page), the pages prefill sent
(KV and block scales) and decode's destinations, decode's verdict, and what raised when a side's scheduler did.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdverify.validation import require_int, require_page_size

KV_CACHE_DTYPES = ("auto", "fp8_e4m3", "mxfp8")
"""``--kv-cache-dtype`` values drawn: ``auto`` (the model's bfloat16, ``MHATokenToKVPool``), ``fp8_e4m3`` (the same
pool storing FP8) and ``mxfp8`` (``MHATokenToKVPoolMXFP8``: FP8 K/V plus block scales registered as state)."""
KV_POOLS = ("mha", "dsa", "mamba", "mamba_dsa", "mamba_qsa", "minimax")
"""The pool the model's attention builds (``kv_pool``): ``mha`` (``MHATokenToKVPool``, its MXFP8 form, or for a
sliding window ``SWAKVPool``), ``dsa`` (``DSATokenToKVPool``, e.g. DeepSeek-V3.2), ``mamba`` (``HybridLinearKVPool``
over MHA full-attention layers, e.g. Qwen3-Next), ``mamba_dsa`` (``HybridLinearKVPool(use_dsa=True)``: a hybrid
linear model whose full-attention layers are DSA, GLM-5.3-Flash) and ``mamba_qsa`` (``QSATokenToKVPool``: a hybrid
linear model with a compressed QSA indexer, Qwen4-Exp) and ``minimax`` (``MiniMaxSparseKVPool``: MiniMax-M3's dense
and K-only sparse layers; PD registration refuses sparse layers that keep index values)."""
QSA_COMPRESS_RATIO = 4
"""The QSA indexer's compression ratio the pool is built with (the model's ``indexer_compress_ratio``; the checksum
reads items, not their widths)."""
QSA_PAGE_SIZE = 64
"""The page size of a compressed QSA indexer: Qwen4-Exp's server overrides it to 64 (``qwen4_exp.py``: "Setting page
size to 64 for compressed QSA (full//ratio compressed addressing)")."""
MINIMAX_PAGE_SIZE = 128
"""The page size MiniMax-M3's server sets where none is given (``model_overrides/minimax_m3.py``: Hopper's fa3, and
fa4 or trtllm_mha on Blackwell, "allow the page_size == 128 sparse block MSA needs"); an explicit ``--page-size``
stands."""
MAX_REQUEST_ROW = 15
"""The largest request row a case names (a small server's 16 rows: row 0 pads)."""
DSA_INDEX_PAGE = 64
"""A DSA pool's index page: ``DSATokenToKVPool`` asserts ``page_size // index_kpool == 64``."""
DSA_INDEX_KPOOLS = (1, 4)
"""``index_kpool`` values drawn: 1 (DeepSeek-V3.2, GLM-5: page size 64) and 4 with compression (GLM-5.3-Flash: page
size 256 from 0.5.22, where the server sets ``page_size = 64 * index_kpool``; 64 before, the pooled index packed into
the page)."""
MAMBA_TRACK_INTERVAL = 256
"""``--mamba-track-interval``'s default: a hybrid linear model runs page size 1 (``no_buffer``) or, with the extra
buffer, a page size dividing it (``validate_mamba_extra_buffer``: ``mamba_track_interval % page_size == 0``)."""
MAX_MAMBA_SLOT = 24
"""The largest Mamba slot a case names: more than a small server's request rows (16 in the SGLang driver), as when
the radix cache holds Mamba states past the running requests."""
MAX_BOOTSTRAP_ROOM = 2**63 - 1
"""The largest bootstrap room: routers draw rooms from ``[0, 2**63)`` (the HTTP PD router and the Python load
balancer) or ``[0, 2**31 - 1)`` (the gRPC PD router's ``random_range(0..i32::MAX)``); a client may send its own."""
METADATA_BUFFER_SLOTS = 4
"""The metadata buffer slots each side's server has in a case (``MetadataBuffers(size)``): a request's slot is one
of them, prefill's and decode's drawn apart (their allocators are independent)."""
MXFP8_PAGE_SIZE = 128
"""The page size an ``mxfp8`` KV cache is written at: ``MHATokenToKVPoolMXFP8.set_kv_buffer`` asserts the interleaved
scale layout, which the pool builds only at page size 128 (``mxfp8_sf_interleaved = page_size == 128``)."""


@dataclass(frozen=True)
class ChecksumCase:
    page_size: int
    prompt: int
    """Tokens of the request's prompt (``origin_input_ids``), at least one."""
    prefill_pages: tuple[int, ...]
    """Prefill's row: the page holding each logical page of ``[0, n)``; distinct, never page 0 (the padding
    page)."""
    decode_pages: tuple[int, ...]
    """Decode's row, likewise."""
    chunk_ends: tuple[int, ...]
    """Where prefill's chunks end: increasing, within ``[1, n]``, the last ``n``. A chunk sends its whole pages past
    what was sent (from ``D``), the last one the rest, and digests ``[D, n)``."""
    decode_prefix: int = 0
    """``D``: the page-aligned prefix decode's radix cache holds and promised at bootstrap, ``D <= prompt``; 0 for a
    rebootstrap."""
    rebootstrap: bool = False
    """A PD rebootstrap: decode retracted the request after it had emitted outputs; prefill recomputes prompt +
    ``outputs`` tokens."""
    outputs: int = 0
    """The outputs decode kept at the retraction (its ``output_ids`` after the boundary token is popped); 0 unless a
    rebootstrap."""
    kv_cache_dtype: str = "auto"
    """``--kv-cache-dtype`` of both servers (``KV_CACHE_DTYPES``); ``mxfp8`` at page size ``MXFP8_PAGE_SIZE`` only."""
    sliding_window: int = 0
    """The sliding window (tokens) of a hybrid SWA model, both sides; 0: no SWA layers (a plain pool)."""
    prefill_swa_pages: tuple[int, ...] = ()
    """With a sliding window: prefill's SWA page for each logical page of ``[0, n)`` (what its
    ``full_to_swa_index_mapping`` maps the row's full pages to); distinct, never page 0. Empty without one."""
    decode_swa_pages: tuple[int, ...] = ()
    """Decode's, likewise."""
    kv_pool: str = "mha"
    """The pool the model builds, both sides (``KV_POOLS``): ``dsa`` and ``mamba_dsa`` at page size ``DSA_PAGE_SIZE``
    only, a sliding window with ``mha`` only, ``mxfp8`` with ``mha`` only."""
    dsa_index_kpool: int = 1
    """A hybrid linear DSA pool's ``index_kpool`` (``DSA_INDEX_KPOOLS``; 1 for other pools): the page size is ``64 *
    index_kpool``, and past 1 the indexer compresses (``index_kpool_compress``), registering ``DSA_TAIL``."""
    prefill_row: int = 2
    """Prefill's request row (``req_pool_idx``): what request-scoped state other than the Mamba slot is addressed by
    (a QSA indexer's pending ring); 1..``MAX_REQUEST_ROW``."""
    decode_row: int = 1
    """Decode's, likewise."""
    prefill_mamba_slot: int = 0
    """With a hybrid linear model: prefill's Mamba slot for the request (``req_index_to_mamba_index_mapping`` of its
    row); 0 otherwise."""
    decode_mamba_slot: int = 0
    """Decode's, likewise."""
    bootstrap_room: int = 4242
    """The request's bootstrap room (``0..MAX_BOOTSTRAP_ROOM``), the one value both sides key the request by: prefill
    writes it into the request's metadata row beside the first token, and decode checks it there before committing
    the transfer."""
    prefill_aux_index: int = 0
    """Prefill's metadata buffer slot for the request (``metadata_buffer_index``, ``0..METADATA_BUFFER_SLOTS - 1``)."""
    decode_aux_index: int = 0
    """Decode's, likewise: the slot prefill's aux transfer writes the row into (``dst_aux_index``)."""

    def __post_init__(self) -> None:
        require_page_size(self.page_size)
        require_int("prompt", self.prompt, minimum=1)
        require_int("decode_prefix", self.decode_prefix, minimum=0)
        require_int("outputs", self.outputs, minimum=0)
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype={self.kv_cache_dtype!r} must be one of {KV_CACHE_DTYPES}")
        if self.kv_cache_dtype == "mxfp8" and self.page_size != MXFP8_PAGE_SIZE:
            raise ValueError(
                f"kv_cache_dtype='mxfp8' at page_size={self.page_size}: the MXFP8 pool writes its block scales only in "
                f"the interleaved layout of page size {MXFP8_PAGE_SIZE}"
            )
        require_int("sliding_window", self.sliding_window, minimum=0)
        if self.kv_pool not in KV_POOLS:
            raise ValueError(f"kv_pool={self.kv_pool!r} must be one of {KV_POOLS}")
        if self.kv_pool != "mha" and (self.sliding_window or self.kv_cache_dtype == "mxfp8"):
            raise ValueError(
                f"kv_pool={self.kv_pool!r} with sliding_window={self.sliding_window} and "
                f"kv_cache_dtype={self.kv_cache_dtype!r}: a sliding window and MXFP8 block scales are an MHA pool's"
            )
        if self.dsa_index_kpool not in DSA_INDEX_KPOOLS or (self.dsa_index_kpool > 1 and self.kv_pool != "mamba_dsa"):
            raise ValueError(
                f"dsa_index_kpool={self.dsa_index_kpool!r} with kv_pool={self.kv_pool!r}: one of "
                f"{DSA_INDEX_KPOOLS} for a hybrid linear DSA pool (GLM-5.3-Flash), 1 for another (no model pools a "
                "plain DSA pool's indexer)"
            )
        if self.dsa and (
            self.page_size not in (DSA_INDEX_PAGE, DSA_INDEX_PAGE * self.dsa_index_kpool)
            or self.kv_cache_dtype != "auto"
        ):
            raise ValueError(
                f"kv_pool={self.kv_pool!r} at page_size={self.page_size}, kv_cache_dtype={self.kv_cache_dtype!r}: a "
                f"DSA pool keeps bfloat16 latents on pages of {DSA_INDEX_PAGE} * index_kpool "
                f"({DSA_INDEX_PAGE * self.dsa_index_kpool}) tokens (from 0.5.22; {DSA_INDEX_PAGE}, the pooled index "
                "packed into it, before)"
            )
        if self.mamba and MAMBA_TRACK_INTERVAL % self.page_size:
            raise ValueError(
                f"kv_pool={self.kv_pool!r} at page_size={self.page_size}: a hybrid linear model's page size divides "
                f"--mamba-track-interval ({MAMBA_TRACK_INTERVAL})"
            )
        for side in ("prefill_row", "decode_row"):
            if require_int(side, getattr(self, side), minimum=1) > MAX_REQUEST_ROW:
                raise ValueError(f"{side}={getattr(self, side)} must be <= {MAX_REQUEST_ROW} (MAX_REQUEST_ROW)")
        if self.kv_pool == "mamba_qsa" and self.page_size != QSA_PAGE_SIZE:
            raise ValueError(
                f"kv_pool='mamba_qsa' at page_size={self.page_size}: the server runs a compressed QSA indexer at page "
                f"size {QSA_PAGE_SIZE}"
            )
        for side in ("prefill_mamba_slot", "decode_mamba_slot"):
            slot = require_int(side, getattr(self, side), minimum=0)
            if slot and not self.mamba:
                raise ValueError(f"{side}={slot} with kv_pool={self.kv_pool!r}: only a hybrid linear pool has slots")
            if slot > MAX_MAMBA_SLOT:
                raise ValueError(f"{side}={slot} must be <= {MAX_MAMBA_SLOT} (MAX_MAMBA_SLOT)")
            if self.mamba and not slot:
                raise ValueError(
                    f"{side}=0 with kv_pool={self.kv_pool!r}: Mamba slots are >= 1 (MambaPool's free list)"
                )
        if require_int("bootstrap_room", self.bootstrap_room, minimum=0) > MAX_BOOTSTRAP_ROOM:
            raise ValueError(f"bootstrap_room={self.bootstrap_room} must be <= 2**63 - 1 (MAX_BOOTSTRAP_ROOM)")
        for side in ("prefill_aux_index", "decode_aux_index"):
            if require_int(side, getattr(self, side), minimum=0) >= METADATA_BUFFER_SLOTS:
                raise ValueError(
                    f"{side}={getattr(self, side)} must be < {METADATA_BUFFER_SLOTS} (METADATA_BUFFER_SLOTS)"
                )
        if not isinstance(self.rebootstrap, bool):
            raise TypeError(f"rebootstrap must be a bool, got {self.rebootstrap!r}")
        if self.decode_prefix > self.prompt or self.decode_prefix % self.page_size:
            raise ValueError(
                f"decode_prefix={self.decode_prefix} must be a multiple of page_size={self.page_size} within the "
                f"prompt ({self.prompt} tokens): decode's tree promises whole pages of the prompt"
            )
        if self.rebootstrap and self.decode_prefix:
            raise ValueError("a rebootstrap has decode_prefix 0: pop_preallocated skips the radix match for it")
        if self.outputs and not self.rebootstrap:
            raise ValueError(f"outputs={self.outputs} without a rebootstrap: prefill computes only the prompt")
        ends = self.chunk_ends
        if not ends or list(ends) != sorted(set(ends)) or ends[0] < 1 or ends[-1] != self.length:
            raise ValueError(f"chunk_ends={ends} must increase within [1, {self.length}] and end at n={self.length}")
        pages = -(-self.length // self.page_size)
        for side in ("prefill_pages", "decode_pages"):
            row = getattr(self, side)
            if len(row) != pages:
                raise ValueError(f"{side} holds {len(row)} pages; [0, {self.length}) at page size "
                                 f"{self.page_size} takes {pages}")  # fmt: skip
            if len(set(row)) != len(row) or any(not isinstance(p, int) or p < 1 for p in row):
                raise ValueError(f"{side} must be distinct page ids >= 1 (page 0 pads), got {row}")
        for side in ("prefill_swa_pages", "decode_swa_pages"):
            row = getattr(self, side)
            if not self.sliding_window:
                if row:
                    raise ValueError(f"{side}={row} without a sliding window: a plain pool has no SWA pages")
                continue
            if len(row) != pages:
                raise ValueError(f"{side} holds {len(row)} pages; [0, {self.length}) at page size "
                                 f"{self.page_size} takes {pages}")  # fmt: skip
            if len(set(row)) != len(row) or any(not isinstance(p, int) or p < 1 for p in row):
                raise ValueError(f"{side} must be distinct SWA page ids >= 1 (page 0 pads), got {row}")

    @property
    def block_scales(self) -> bool:
        """Whether the pool registers block scales (``BLOCK_SCALE`` state) for the transfer and the digest."""
        return self.kv_cache_dtype == "mxfp8"

    @property
    def mamba(self) -> bool:
        """Whether the pool is a hybrid linear model's (``HybridLinearKVPool``: a Mamba slot per request)."""
        return self.kv_pool in ("mamba", "mamba_dsa", "mamba_qsa")

    @property
    def dsa(self) -> bool:
        """Whether the pool keeps a DSA indexer's keys (``DSATokenToKVPool``, alone or in a hybrid linear pool)."""
        return self.kv_pool in ("dsa", "mamba_dsa")

    @property
    def state_types(self) -> tuple[str, ...]:
        """The state types the pool registers for the transfer and the digest, in ``setup_state_kv_args``' order."""
        if self.kv_pool != "mha":
            kinds = {"dsa": ["dsa"], "mamba": ["mamba"], "mamba_dsa": ["mamba", "dsa"],
                     "mamba_qsa": ["mamba", "qsa_pending", "qsa_compressed"],
                     "minimax": ["minimax_index_k", "minimax_dense_kv"]}[self.kv_pool]  # fmt: skip
            return (*kinds, "dsa_tail") if self.dsa_index_kpool > 1 else tuple(kinds)
        kinds = ["swa"] if self.sliding_window else []
        if self.block_scales:
            kinds.append("block_scale")
            if self.sliding_window:
                kinds.append("block_scale_swa")
        return tuple(kinds)

    @property
    def length(self) -> int:
        """``n``: the tokens prefill computes and decode's row holds for the transfer."""
        return self.prompt + self.outputs

    def input_features(self) -> tuple[str, ...]:
        """The input features the case uses that came with a release (``pdverify.properties.releases.FEATURES``)."""
        used = ["kv_checksum"]
        if self.rebootstrap:
            used.append("rebootstrap")
        if self.decode_prefix:
            used.append("decode_prefixes")
        if self.page_size > 1:
            used.append("paged_transfer")
        if self.block_scales:
            used.append("state:BLOCK_SCALE")
        if self.sliding_window and self.page_size > 1:
            used.append("swa_paged_pool")
        if self.sliding_window and self.decode_prefix:
            used.append("swa_decode_prefix")
        if self.dsa_index_kpool > 1:
            used.append("dsa_kpool_packed" if self.page_size == DSA_INDEX_PAGE else "dsa_kpool_pages")
        if self.kv_pool == "mamba_qsa":
            used.append("state:QSA_COMPRESSED")
        return tuple(used)


@dataclass(frozen=True)
class ChecksumTrace:
    prefill_digest: tuple[int, ...]
    """The pages of prefill's KV buffers its digest read, in order (every K and V buffer the same pages; empty: the
    digest read none)."""
    sent: tuple[int, ...]
    """The KV pages prefill sent, in order."""
    destinations: tuple[int, ...]
    """Decode's destination pages for the transfer, as it registered them."""
    decode_digest: tuple[int, ...]
    """The pages of decode's KV buffers its verification digest read, in order."""
    accepted: bool
    """Decode kept the request after verifying (the digests matched)."""
    message: str = ""
    """Why decode rejected it (its abort message), when it did."""
    prefill_state_digest: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """Per registered state type (``"swa"``, ``"block_scale"``, ``"block_scale_swa"``, ``"dsa"``, ``"mamba"``, in
    registration order), the
    items of prefill's buffers of that type its digest read, in order (every buffer of a type the same items); empty
    without state."""
    decode_state_digest: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """Decode's, likewise."""
    sent_state: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """Per registered state type, the items prefill's sends carried for it (its payloads), in order."""
    raised: str = ""
    """What a side's scheduler raised in the handoff (``"prefill: AssertionError at checksum.py:120 ..."``); empty
    when neither did."""
    committed: bool = True
    """Decode's transfer queue committed the request - it left ``pop_transferred`` with prefill's first token - once
    its receiver reported the transfer done and prefill's metadata row had landed; False: it was still queued after
    the polls the driver gives it, ``message`` says why."""
