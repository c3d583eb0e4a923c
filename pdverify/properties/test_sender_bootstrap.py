"""The KV sender's creation (``CommonKVSender.__init__``): what it reports and registers before any page moves,
and that it ships what the request's transfer needs - or nothing once its bootstrap failed.

S18: deferred decode allocation (``prefill_complete``): a duplicate or cancelled room fails the sender at its
creation and it ships nothing; a fresh room ships exactly what the sender ships without deferral. S19: attention
DP: a request the router did not place registers its prefill DP rank with the bootstrap server once - unless
the load balancer follows the room, where a rank other than ``room % DP`` fails the request. S20: request tracing
changes nothing the sender ships. S21: an early send switched off, or held back at the first batch (the request
still bootstrapping, a HiCache load-back pending), ships nothing early: the request's transfers are those it
makes without an early send. S22: bootstrap waits for a metadata buffer - no buffer, no bootstrap, nothing
shipped; then exactly one bootstrap, and a request that holds a buffer keeps it. S23: a HiCache host hit behind the
device prefix is not sent early. S24: the DCP pack limit (``get_max_transfer_tokens``) splits only the sends of a
room whose own decode peer needs the relayout, each at ``D + k * ceil_align(ceiling, page_size)``. S25: a later stage
of a pipeline-parallel prefill server bootstraps a request as the stages agreed, not as its own sender polls.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import example
from hypothesis import strategies as st

from pdverify.model.exchange import PrefillCase, PrefillTrace, Transfer
from pdverify.model.pipeline import PP_CONSENSUS
from pdverify.oracle import prefill_exchange as oracle
from pdverify.properties.registry import Clause, applies, note_event, prop, within_release
from pdverify.properties.releases import (
    DOMAIN,
    FROM_DCP_PACK_LIMIT,
    FROM_DEFERRED_ALLOCATION,
    FROM_DP_RANK_QUERY,
    FROM_EARLY_SEND,
    FROM_PREFILL_PP,
    FROM_SENDER_TRACING,
)
from pdverify.strategies import bootstrap_settings, prefill_cases
from pdverify.targets import Target

NEEDS = ("prefill_exchange",)

SPEC = PrefillCase(4, 10, 4, tuple(p * 4 + o for p in (5, 6, 2) for o in range(4))[:10], (6, 10))
"""The worked example's pages 5 6 2, L 10, D 4, two chunks."""


def _run(target: Target, case: PrefillCase, device: str) -> PrefillTrace:
    within_release(case)
    trace: PrefillTrace = target.require("prefill_exchange")(case, device)
    return trace


def _plain(transfers: list[Transfer]) -> list[tuple[object, ...]]:
    return [(t.pages, t.destinations, t.is_last, t.aux_index, t.state) for t in transfers]


@example(case=SPEC, settings={"deferred_room": "duplicate"})
@example(case=SPEC, settings={"deferred_room": "cancelled"})
@example(case=SPEC, settings={"deferred_room": "fresh"})
@prop(
    "S18",
    "deferred decode allocation: a duplicate or cancelled bootstrap room fails the sender at its creation and it "
    "ships nothing; a fresh room ships exactly what the sender ships without deferral",
    needs=NEEDS,
    contract=FROM_DEFERRED_ALLOCATION,
    case=prefill_cases(),
    settings=bootstrap_settings(),
)
def test_s18_deferred_room(target: Target, device: str, case: PrefillCase, settings: dict[str, object]) -> None:
    case = replace(case, **{**settings, "attention_dp": None})  # type: ignore[arg-type]
    if case.deferred_room is None:
        case = replace(case, deferred_room="fresh")
    note_event(f"deferred room: {case.deferred_room}")
    trace = _run(target, case, device)
    if case.deferred_room == "fresh":
        base = _run(target, replace(case, deferred_room=None), device)
        assert "Failed" not in trace.statuses, f"a fresh room failed the sender: {trace.statuses}"
        assert _plain(trace.transfers) == _plain(base.transfers), (
            f"with a fresh deferred room the sender shipped {_plain(trace.transfers)}, without deferral "
            f"{_plain(base.transfers)}"
        )
    else:
        assert "Failed" in trace.statuses, f"a {case.deferred_room} room did not fail the sender: {trace.statuses}"
        assert not trace.transfers, f"a sender failed at bootstrap shipped {_plain(trace.transfers)}"


def expected_registrations(case: PrefillCase) -> tuple[list[tuple[int, int]], bool]:
    """``(registrations, fails)`` under the case's attention DP, from the contract."""
    if case.attention_dp is None:
        return [], False
    ranks, rank, method, placed = case.attention_dp
    if placed:
        return [], False
    if method == "query":
        return [(case.bootstrap_room, rank)], False
    return [], rank != case.bootstrap_room % ranks


@example(case=SPEC, settings={"attention_dp": (2, 1, "query", False)})
@example(case=SPEC, settings={"attention_dp": (4, 1, "follow_room", False), "bootstrap_room": 6})
@example(case=SPEC, settings={"attention_dp": (4, 2, "follow_room", False), "bootstrap_room": 6})
@example(case=SPEC, settings={"attention_dp": (2, 1, "query", True)})
@prop(
    "S19",
    "attention DP: a request the router did not place registers (room, its prefill DP rank) with the bootstrap "
    "server exactly once; a placed one registers nothing; when the load balancer follows the bootstrap room nothing "
    "registers and a DP rank other than room % DP fails the request",
    needs=NEEDS,
    contract=FROM_DP_RANK_QUERY,
    case=prefill_cases(),
    settings=bootstrap_settings(),
)
def test_s19_dp_registration(target: Target, device: str, case: PrefillCase, settings: dict[str, object]) -> None:
    case = replace(case, **{**settings, "deferred_room": None})  # type: ignore[arg-type]
    if case.attention_dp is None:
        case = replace(case, attention_dp=(2, 0, "query", False))
    note_event(f"attention DP: {case.attention_dp[2]}{' placed' if case.attention_dp[3] else ''}")  # type: ignore[index]
    trace = _run(target, case, device)
    registrations, fails = expected_registrations(case)
    assert trace.registrations == registrations, (
        f"registered {trace.registrations}, expected {registrations} (attention DP {case.attention_dp}, room "
        f"{case.bootstrap_room})"
    )
    assert ("Failed" in trace.statuses) == fails, (
        f"statuses {trace.statuses}: the request must {'' if fails else 'not '}fail (attention DP "
        f"{case.attention_dp}, room {case.bootstrap_room} -> rank {case.bootstrap_room % case.attention_dp[0]})"  # type: ignore[index]
    )


@example(case=SPEC, settings={"trace_requests": True})
@example(case=replace(SPEC, dcp_max_tokens=4), settings={"dummy_peer": True})
@prop(
    "S20",
    "request tracing, and a dummy decode rank registered beside the real one, change nothing the sender ships or "
    "reports (a dummy rank never sets the DCP pack limit, nor hides the real rank's)",
    needs=NEEDS,
    clauses=(
        # each is checked only where the release's sender reads it: before, the switch reaches no code
        Clause("tracing", FROM_SENDER_TRACING, "a traced request ships and reports what an untraced one does"),
        Clause("dummy_rank", FROM_DCP_PACK_LIMIT, "a dummy decode rank beside the real one changes nothing shipped"),
    ),
    case=prefill_cases(),
    settings=bootstrap_settings(),
)
def test_s20_tracing_is_transparent(
    target: Target, device: str, case: PrefillCase, settings: dict[str, object]
) -> None:
    case = replace(case, **settings)  # type: ignore[arg-type]
    if not (case.trace_requests or case.dummy_peer):
        case = replace(case, trace_requests=True)
    plain_case = replace(case, trace_requests=False, dummy_peer=False)
    plain = _run(target, plain_case, device)
    both = case.trace_requests and case.dummy_peer
    if case.trace_requests and applies("tracing"):
        note_event("S20 tracing")
        _same_as_plain(_run(target, replace(plain_case, trace_requests=True), device), plain, "tracing")
    if case.dummy_peer and applies("dummy_rank"):
        note_event("S20 dummy rank")
        _same_as_plain(_run(target, replace(plain_case, dummy_peer=True), device), plain, "a dummy rank")
    if both and applies("tracing") and applies("dummy_rank"):
        _same_as_plain(_run(target, case, device), plain, "tracing and a dummy rank")


def _same_as_plain(got: PrefillTrace, plain: PrefillTrace, what: str) -> None:
    """What the sender shipped and reported with ``what`` on (tracing, a dummy decode rank) is what it does
    without."""
    assert _plain(got.transfers) == _plain(plain.transfers), (
        f"with {what} {_plain(got.transfers)}, without {_plain(plain.transfers)}"
    )
    assert got.statuses == plain.statuses and got.registrations == plain.registrations, (
        f"with {what} the sender reports {got.statuses} {got.registrations}, without {plain.statuses} "
        f"{plain.registrations}"
    )


@example(case=replace(SPEC, early_prefix=8), hold={"early_send_env": False})
@example(case=replace(SPEC, early_prefix=8), hold={"early_send_blocked": "bootstrapping"})
@example(case=replace(SPEC, early_prefix=8, chunked_prefill_size=4), hold={"early_send_blocked": "load_back"})
@prop(
    "S21",
    "an early send switched off (SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX=0) or held back at the first batch "
    "(the request still bootstrapping, a HiCache load-back pending) ships nothing early: the request's transfers "
    "are those it makes without an early send",
    needs=NEEDS,
    contract=FROM_EARLY_SEND,
    case=prefill_cases(early_send=True),  # a hold matters only where an early send would ship
    hold=st.one_of(
        st.just({"early_send_env": False}),
        st.sampled_from(["bootstrapping", "load_back"]).map(lambda why: {"early_send_blocked": why}),
    ),
)
def test_s21_early_send_held_back(target: Target, device: str, case: PrefillCase, hold: dict[str, object]) -> None:
    held = replace(case, **hold)  # type: ignore[arg-type]
    note_event(f"early send held back: {hold}")
    got = _run(target, held, device)
    want = _run(target, replace(case, early_prefix=None, host_hit_length=0), device)
    assert _plain(got.transfers) == _plain(want.transfers), (
        f"with the early send held back ({hold}, early prefix {case.early_prefix}) the request shipped "
        f"{_plain(got.transfers)}; without an early send {_plain(want.transfers)}"
    )
    assert [t.waits_on_forward for t in got.transfers] == [False] * len(got.transfers), (
        "a transfer waits on a forward event no early send recorded"
    )


@example(case=SPEC, waits=2, held=False)
@example(case=SPEC, waits=0, held=True)
@example(case=SPEC, waits=3, held=True)
@prop(
    "S22",
    "bootstrap waits for a metadata buffer: each poll without a free buffer returns not-ready and leaves the request "
    "pending; the next finalises it once, taking one buffer - none when the request already holds one, which it "
    "keeps as its aux index - and the request then ships as it would without the wait",
    needs=NEEDS,
    case=prefill_cases(),
    waits=st.integers(0, 3),
    # a request holding a buffer at bootstrap is optimistic prefill's retry (#26780, 0.5.13): drawn from then on
    held=st.booleans().map(lambda held: held and DOMAIN.has("optimistic_prefill")),
)
def test_s22_bootstrap_waits_for_a_buffer(
    target: Target, device: str, case: PrefillCase, waits: int, held: bool
) -> None:
    waiting = replace(case, buffer_waits=waits, held_buffer=held)
    got = _run(target, waiting, device)
    want = [True] if held else [False] * waits + [True]
    assert got.bootstraps == want, f"finalize_bootstrap returned {got.bootstraps}, expected {want} (held {held})"
    assert got.buffers_taken == (0 if held else 1), f"{got.buffers_taken} buffers taken (held {held})"
    base = _run(target, case, device)
    assert _plain(got.transfers) == _plain(base.transfers) and got.num_pages == base.num_pages, (
        f"after {waits} polls without a buffer the request shipped {_plain(got.transfers)}, else "
        f"{_plain(base.transfers)}"
    )
    finals = [t.aux_index for t in got.transfers if t.is_last]
    assert finals in ([case.aux_index], []), (
        f"aux on the last transfer {finals}, the request's buffer is {case.aux_index}"
    )


@example(case=replace(SPEC, early_prefix=4, chunk_ends=(9, 10)), hit=4)
@example(case=replace(SPEC, early_prefix=4, chunk_ends=(10,), chunked_prefill_size=4), hit=5)
@prop(
    "S23",
    "the early send ships only the device-resident prefix (prefix_len - host_hit_length): a HiCache host hit behind "
    "it, still loading back, changes nothing the request ships",
    needs=NEEDS,
    contract=FROM_EARLY_SEND,
    case=prefill_cases(),
    hit=st.integers(1, 96),
)
def test_s23_host_hit_not_sent_early(target: Target, device: str, case: PrefillCase, hit: int) -> None:
    if case.early_prefix is None or case.early_prefix + 1 >= case.length:
        case = replace(case, early_prefix=0) if case.length > 1 else case
    room = case.length - 1 - (case.early_prefix or 0)
    if case.early_prefix is None or room < 1:
        return
    note_event("host hit behind the device prefix")
    with_hit = replace(case, host_hit_length=min(hit, room))
    got = _run(target, with_hit, device)
    want = _run(target, replace(case, host_hit_length=0), device)
    assert _plain(got.transfers) == _plain(want.transfers), (
        f"with a host hit of {with_hit.host_hit_length} behind the device prefix {case.early_prefix} the request "
        f"shipped {_plain(got.transfers)}; with none {_plain(want.transfers)}"
    )


@example(case=replace(SPEC, chunk_ends=(10,)), ceiling=5, relayout=True)  # limit 8: [4, 10) stays one send
@example(case=replace(SPEC, chunk_ends=(10,)), ceiling=3, relayout=True)  # limit 4: [4, 10) -> [4, 8) + [8, 10)
@example(case=replace(SPEC, chunk_ends=(10,)), ceiling=3, relayout=False)  # another decode's limit: one send
@prop(
    "S24",
    "the DCP pack limit splits only the sends of a room whose own decode peer needs the relayout (decode's DCP size "
    "above prefill's): there each unlimited send is cut at every D + k * limit, the limit being the prefill buffer "
    "ceiling rounded up to a page; a room whose peer has prefill's DCP size ships what it ships with no limit, "
    "though another decode instance's relayout gave the manager one",
    needs=NEEDS,
    contract=FROM_DCP_PACK_LIMIT,
    case=prefill_cases(),
    ceiling=st.integers(1, 96),
    relayout=st.booleans(),
)
def test_s24_pack_limit_only_for_relayout_peers(
    target: Target, device: str, case: PrefillCase, ceiling: int, relayout: bool
) -> None:
    # the staging grid, where on, decides the split instead (S12); a rank split ships a share of each send (S17)
    base = replace(case, dcp_max_tokens=None, dcp_relayout=True, chunked_prefill_size=None, rank_split=None)
    limited = replace(base, dcp_max_tokens=ceiling, dcp_relayout=relayout)
    note_event(f"S24 {'relayout peer' if relayout else 'matching-DCP peer'}")
    got = _run(target, limited, device)
    plain = _run(target, base, device)
    limit = oracle.pack_limit(limited)
    if limit is None:
        assert _plain(got.transfers) == _plain(plain.transfers), (
            f"the room's peer needs no relayout, yet with a pack buffer of {ceiling} tokens it shipped "
            f"{_plain(got.transfers)}; with none {_plain(plain.transfers)}"
        )
        return
    counts = [t.num_kv_tokens or 0 for t in got.transfers]
    want = oracle.split_at_limit([t.num_kv_tokens or 0 for t in plain.transfers], base.decode_prefix, limit)
    assert counts == want, (
        f"a pack buffer of {ceiling} tokens (limit {limit} at page size {base.page_size}) split the sends "
        f"{[t.num_kv_tokens for t in plain.transfers]} into {counts}, expected {want}"
    )
    assert [p for t in got.transfers for p in t.pages] == [p for t in plain.transfers for p in t.pages], (
        f"the split sends ship {_plain(got.transfers)}, the unsplit {_plain(plain.transfers)}"
    )
    final, unsplit = got.transfers[-1], plain.transfers[-1]
    assert (final.is_last, final.aux_index, final.state) == (unsplit.is_last, unsplit.aux_index, unsplit.state), (
        f"the last split send carries {final}, the unsplit one {unsplit}"
    )


@example(case=SPEC, consensus="bad", waits=0, late=False)
@example(case=SPEC, consensus="good", waits=1, late=False)
@example(case=SPEC, consensus="good", waits=0, late=True)
@prop(
    "S25",
    "a later stage of a pipeline-parallel prefill server bootstraps a request as the stages agreed, whatever its own "
    "sender polls: one agreed failed is failed here (handle_bootstrap_failure) and ships nothing; one agreed ready "
    "ships exactly what it ships on a server of one stage; while this stage's own sender still bootstraps (decode's "
    "destinations reach it after the first stage's), the stages have not agreed the request ready: it stays queued",
    needs=NEEDS,
    contract=FROM_PREFILL_PP,
    case=prefill_cases(),
    consensus=st.sampled_from(PP_CONSENSUS),
    waits=st.integers(0, 2),
    late=st.booleans(),
)
def test_s25_pp_stage_follows_the_consensus(
    target: Target, device: str, case: PrefillCase, consensus: str, waits: int, late: bool
) -> None:
    # the server refuses unified memory (translated ids) with --pp-size above 1
    plain = replace(case, translation=None, buffer_waits=waits)
    staged = replace(plain, pp_consensus=consensus, pp_own_late=late)
    note_event(f"PP consensus: {consensus}" + (", this stage's sender late" if late else ""))
    got = _run(target, staged, device)
    if consensus == "bad":
        assert got.dropped and not got.transfers, (
            f"a request the PP stages agreed failed was not failed on this stage (its own sender "
            f"{'late' if late else 'ready'}): dropped {got.dropped}, bootstraps {got.bootstraps}, shipped "
            f"{_plain(got.transfers)}"
        )
        return
    want = _run(target, plain, device)
    # the step that finds this stage's sender still bootstrapping is one of the polls that wait for a buffer
    bootstraps = [False] * max(len(want.bootstraps) - 1, int(late)) + [True]
    assert not got.dropped and got.bootstraps == bootstraps, (
        f"a request the PP stages agreed ready (this stage's sender {'late' if late else 'ready'}): dropped "
        f"{got.dropped}, bootstraps {got.bootstraps}, expected {bootstraps} (on one stage {want.bootstraps})"
    )
    assert _plain(got.transfers) == _plain(want.transfers) and got.num_pages == want.num_pages, (
        f"a request the PP stages agreed ready shipped {_plain(got.transfers)} ({got.num_pages} pages); on one stage "
        f"{_plain(want.transfers)} ({want.num_pages} pages)"
    )
