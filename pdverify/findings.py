"""Recorded defects of released SGLang, as predicates: a recorded finding must not blind its property.

A finding's property fails on the release wherever the defect shows, and an explicit example reaches it at once:
left as a plain failure, the property would stop at its first example and never look at the rest of its input
space - a second, different defect there would go unseen. So each finding carries

* a **signature**, a predicate over the property's drawn arguments that says where the defect can show, and
* an **explanation**, a predicate over those arguments and the property's assertion message that says the failure
  is this defect's (and not another one in the same input).

On a target that is a release the finding is recorded for (``Target.package``, ``Target.release``), an example
inside a signature whose failure the finding explains is counted (the finding *reproduced*) and set aside
(``hypothesis.reject``: it does not use the profile's example budget); the property goes on generating. Any other
failure - outside every signature, or inside one but not explained by it - is a new failure, reported as such.
``pdverify check --known-findings ignore`` switches this off (every failure is a plain failure).

The findings files (``findings/sglang-<release>.json``) and the triage record which findings a release has; this
module holds what they cannot - the predicates - and a test keeps the two in step.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pdverify.model.checksum import ChecksumCase
from pdverify.model.dispatch import GenerateCall
from pdverify.model.exchange import PrefillCase
from pdverify.model.transfer_queue import TransferQueueCase
from pdverify.oracle.prefill_exchange import early_send_waits

FULL_FROM_0 = ("QSA_COMPRESSED", "MINIMAX_DENSE_KV", "BLOCK_SCALE")
"""State types whose decode list covers ``[0, L)`` page by page (``_full_kv_pages_payload``)."""


@dataclass(frozen=True)
class KnownDefect:
    id: str
    property: str
    """The property id that finds it."""
    package: str
    releases: tuple[str, ...]
    summary: str
    shows: Callable[[Mapping[str, Any]], bool]
    """The signature: whether the defect can show on these drawn arguments."""
    explains: Callable[[Mapping[str, Any], str], bool]
    """Whether the property's assertion message on these arguments is this defect's failure."""

    also: tuple[str, ...] = ()
    """Further properties the same defect fails (one cause, several observations; each has its triage row)."""
    explains_also: Callable[[Mapping[str, Any], str], bool] | None = None
    """How the further properties' messages are this defect's (their assertions differ from ``property``'s)."""
    narrower: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """``(property, releases)``: a further property that observes the defect on fewer of its releases - where its
    generator reaches the defect in the matrix's run (each pair has its triage row)."""

    def properties(self) -> tuple[str, ...]:
        """Every property that observes this defect."""
        return (self.property, *self.also)

    def releases_for(self, property_id: str) -> tuple[str, ...]:
        """The releases on which ``property_id`` observes this defect."""
        return dict(self.narrower).get(property_id, self.releases)

    def explanation(self, property_id: str) -> Callable[[Mapping[str, Any], str], bool]:
        """How ``property_id``'s failure message is this defect's."""
        if property_id != self.property and self.explains_also is not None:
            return self.explains_also
        return self.explains

    def recorded_for(self, target: Any, property_id: str | None = None) -> bool:
        releases = self.releases if property_id is None else self.releases_for(property_id)
        return getattr(target, "package", None) == self.package and getattr(target, "release", None) in releases


_TRIPLE = re.compile(r"\((\d+), (-?\d+), (None|-?\d+)\)")


def _f1_shows(kwargs: Mapping[str, Any]) -> bool:
    case = kwargs.get("case")
    return (
        case is not None
        and any(kind in FULL_FROM_0 for kind in getattr(case, "state_types", ()))
        and getattr(case, "decode_prefix", 0) > getattr(case, "l1_prefix", 0)
    )


def _f1_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """D1's message for a full-from-0 list whose only wrong entries are logical pages of ``[L1, D)`` held by no
    page yet (their HiCache restore is pending): ``(logical page, sent, held)`` triples, each ``held`` None."""
    case = kwargs["case"]
    kinds = "|".join(FULL_FROM_0)
    head = re.match(rf"({kinds}) list \[[^\]]*\] from position 0: logical page, sent, held = \[", message)
    if head is None:
        return False
    body = message[head.end() : message.index("]", head.end())]
    bad = _TRIPLE.findall(body)
    ps = case.page_size
    first, past = case.l1_prefix // ps, -(-case.decode_prefix // ps)
    return bool(bad) and all(held == "None" and first <= int(page) < past for page, _, held in bad)


def _f2_shows(kwargs: Mapping[str, Any]) -> bool:
    """A translated pool with the checksum on, for a request that sends a page of ``[D, L)`` whose physical id
    differs from its virtual one (where every sent page maps to itself the two digests agree)."""
    case = kwargs.get("case")
    if (
        case is None
        or not getattr(case, "kv_checksum", False)
        or getattr(case, "health_check", False)
        or getattr(case, "translation", None) is None
    ):
        return False
    ps = case.page_size
    return any(case.translation[loc // ps] != loc // ps for loc in case.row[case.decode_prefix :: ps])


def _f2_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """S16's message when the one digest covers exactly the untranslated (virtual) pages of ``[D, L)``."""
    case = kwargs["case"]
    ps = case.page_size
    virtual = tuple(loc // ps for loc in case.row[case.decode_prefix :: ps])
    return message.startswith(f"digests [{virtual!r}], expected one over the pages sent")


def _t1_shows(kwargs: Mapping[str, Any]) -> bool:
    batch = kwargs.get("batch")
    return batch is not None and any(getattr(r, "prefix_len", 0) > 0 for r in getattr(batch, "reqs", ()))


def _t1_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """P19's message when ``out_cache_loc`` holds each row's first ``extend_len`` slots (from 0, not from the
    decode prefix): 0.5.11's slice ``req_to_token[row][:extend_input_len]``."""
    batch = kwargs["batch"]
    from_zero = [slot for r in batch.reqs for slot in batch.req_to_token[r.req_pool_idx][: r.extend_len]]
    return message.startswith(f"out_cache_loc: {from_zero} != expected ")


def _t25_shows(kwargs: Mapping[str, Any]) -> bool:
    """A batch with a request that asks for ``min_new_tokens`` on a server whose tokenizer has no end-of-sequence
    token (``eos_token_id`` None)."""
    batch = kwargs.get("batch")
    reqs = getattr(batch, "reqs", ())
    return (
        getattr(batch, "eos_token_id", 0) is None
        and not getattr(batch, "skip_tokenizer_init", False)
        and any(r.sampling.min_new_tokens > 0 for r in reqs)
    )


def _t25_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """The message when the ``min_new_tokens`` penalizer put the tokenizer's None end-of-sequence token into its
    int64 stop-token tensor (``min_new_tokens.py``: ``{req.tokenizer.eos_token_id}``)."""
    del kwargs
    return message.startswith("building the sampling info raised TypeError at min_new_tokens.py:") and (
        "'NoneType' object cannot be interpreted as an integer" in message
    )


def _t27_shows(kwargs: Mapping[str, Any]) -> bool:
    """A batch with a request that asks for ``min_new_tokens`` on a server started with ``--skip-tokenizer-init``
    (no tokenizer: the scheduler hands each request None)."""
    batch = kwargs.get("batch")
    reqs = getattr(batch, "reqs", ())
    return bool(getattr(batch, "skip_tokenizer_init", False)) and any(r.sampling.min_new_tokens > 0 for r in reqs)


def _t27_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """The message when the ``min_new_tokens`` penalizer read the stop tokens of a request's tokenizer that is None
    (``min_new_tokens.py``: ``req.tokenizer.additional_stop_token_ids``)."""
    del kwargs
    return message.startswith("building the sampling info raised AttributeError at min_new_tokens.py:") and (
        "'NoneType' object has no attribute" in message
    )


def _stray_stop_ids(batch: Any) -> set[int]:
    """The stop token ids the batch's requests send that the ``min_new_tokens`` penalizer's stop-token table has no
    column for: outside ``[0, vocab_size]`` (column ``vocab_size`` is its padding, sliced off)."""
    vocab = getattr(batch, "vocab_size", 0)
    stops = (t for r in getattr(batch, "reqs", ()) for t in r.sampling.stop_token_ids or ())
    return {t for t in stops if not 0 <= t <= vocab}


def _f7_shows(kwargs: Mapping[str, Any]) -> bool:
    """A batch with a request that asks for ``min_new_tokens`` (the penalizer then prepares every request's stop
    tokens) and a request - the same or another - whose stop token ids name one outside ``[0, vocab_size]``, on a
    server with a tokenizer (without one, T27's crash comes first, or from 0.5.14 the refusal)."""
    batch = kwargs.get("batch")
    reqs = getattr(batch, "reqs", ())
    return (
        not getattr(batch, "skip_tokenizer_init", False)
        and any(r.sampling.min_new_tokens > 0 for r in reqs)
        and bool(_stray_stop_ids(batch))
    )


_F7_MESSAGE = re.compile(
    r"^building the sampling info raised RuntimeError at min_new_tokens\.py:\d+: "
    r"index (-?\d+) is out of bounds for dimension 1 with size (\d+)"
)


def _f7_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """The message when the penalizer's ``scatter_add_`` over its ``(n, vocab_size + 1)`` table met one of the batch's
    stop ids outside it (``min_new_tokens.py``)."""
    found = _F7_MESSAGE.match(message)
    batch = kwargs["batch"]
    return (
        found is not None
        and int(found.group(1)) in _stray_stop_ids(batch)
        and int(found.group(2)) == batch.vocab_size + 1
    )


def _only_model_eos(batch: Any, req: Any) -> set[int]:
    """The model-configuration eos ids of ``batch`` that neither a stop token of ``req`` nor the tokenizer's eos or
    additional stop tokens is (a server without a tokenizer has neither: ``validate_batch``)."""
    model = set(getattr(batch, "model_eos_token_ids", ()))
    tokenizer = {getattr(batch, "eos_token_id", None), *getattr(batch, "additional_stop_token_ids", ())}
    return model - set(req.sampling.stop_token_ids or ()) - tokenizer


def _t28_shows(kwargs: Mapping[str, Any]) -> bool:
    """A batch with a request that asks for ``min_new_tokens`` and finishes on a model-configuration eos id that none
    of its own stop tokens and the tokenizer's eos is."""
    batch = kwargs.get("batch")
    return any(r.sampling.min_new_tokens > 0 and _only_model_eos(batch, r) for r in getattr(batch, "reqs", ()))


_T28_MESSAGE = re.compile(
    r"request (\d+) \(min_new_tokens=\d+\) is held back from .*: missing \[([\d, ]*)\], extra \[\]"
)


def _t28_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """P27's message when the penalizer holds back everything the request finishes on but model-configuration eos
    ids: what is missing is only such ids, and nothing extra is held back (before #31378 the penalizer never read
    ``req.eos_token_ids``)."""
    found = _T28_MESSAGE.search(message)
    if found is None:
        return False
    batch = kwargs["batch"]
    missing = {int(t) for t in found.group(2).split(",") if t.strip()}
    return bool(missing) and missing == _only_model_eos(batch, batch.reqs[int(found.group(1))])


def _t29_shows(kwargs: Mapping[str, Any]) -> bool:
    """A transfer queue whose transport's aux transfer copies only the first metadata buffer on the target's release
    (Mooncake's to 0.4.8, NIXL's to 0.5.3), with a transferred request: what rides in the other buffers (the first
    token's logprob, prefill's cached tokens from 0.5.3) never reaches decode."""
    case = kwargs.get("case")
    if not isinstance(case, TransferQueueCase):
        return False
    release = getattr(kwargs.get("target"), "release", None)  # None: no release named, Mooncake's can show too
    first_only = case.transport == "nixl" or release is None or release in T29_MOONCAKE
    return first_only and any(t.poll == "success" for t in case.transfers)


_T29_LISTS = (
    re.compile(r"hold first-token \(logprob, id\) (\[.*\]), prefill computed (\[.*\]) \(None: no logprobs"),
    re.compile(r"report cached tokens (\[[\d, ]*\]), prefill cached (\[[\d, ]*\])"),
    re.compile(r"hold first-token top logprobs (\[.*\]), prefill computed (\[.*\]) \(None: no top logprobs"),
)


def _got_and_wanted(pattern: re.Pattern[str], message: str) -> tuple[Any, Any] | None:
    """The two Python literals ``pattern``'s groups capture in the first line of an assertion message (what the
    target did, what the oracle wanted), or None where the line does not match or a literal does not parse."""
    found = pattern.search(message.split("\n", 1)[0])
    if found is None:
        return None
    try:
        return ast.literal_eval(found.group(1)), ast.literal_eval(found.group(2))
    except (ValueError, SyntaxError):
        return None


def _t29_cleared(which: int, want: Any) -> Any:
    """What decode's own cleared row commits in place of ``want``: a logprob of ``(0.0, 0)``, 0 cached tokens, the
    top logprobs as many ``(0.0, 0)`` pairs as the request asked for."""
    if which == 2:
        return tuple((0.0, 0) for _ in want)
    return ((0.0, 0), 0)[which]


def _t29_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """Q7's message when what the committed requests hold past their token is decode's own cleared row - a
    first-token logprob of ``(0.0, 0)`` where prefill computed another, 0 cached tokens where prefill cached some -
    and nothing else differs: the aux transfer moved the output-id buffer only."""
    for which, pattern in enumerate(_T29_LISTS):  # the clauses' messages: at most one matches
        pair = _got_and_wanted(pattern, message)
        if pair is not None:
            return _differs_only_as(pair, functools.partial(_t29_cleared, which))
    return False


def _differs_only_as(pair: tuple[Any, Any], defect: Callable[[Any], Any]) -> bool:
    """Whether what the target did differs from what the oracle wanted, entry by entry, and only where the entry is
    the defect's form of the wanted one (``defect(wanted)``; no entry where the oracle wanted None)."""
    got, want = pair
    if len(got) != len(want) or got == want:
        return False
    return all(g == w or (w is not None and g == defect(w)) for g, w in zip(got, want, strict=True))


def _f9_shows(kwargs: Mapping[str, Any]) -> bool:
    """A request asking for more top logprobs than decode's metadata row holds (``top_logprobs_num`` past 128): the
    server admits it, and prefill's write of its row raises once its transfer completes."""
    case = kwargs.get("case")
    return isinstance(case, TransferQueueCase) and any(t.top_beyond_row for t in case.transfers)


_F9_OUTCOMES = re.compile(r"prefill's outcome per request (\[[^\]]*\]), expected (\[[^\]]*\])")


def _f9_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """Q8's message when exactly the requests past the row's top logprobs were admitted where they should have been
    refused - each one either raised in prefill's write (its transfer completed) or is still admitted (in flight)."""
    case = kwargs["case"]
    pair = _got_and_wanted(_F9_OUTCOMES, message)
    if pair is None:
        return False
    got, want = pair
    if len(got) != len(case.transfers) or len(want) != len(got):
        return False
    wrong = {i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w}
    beyond = {i for i, t in enumerate(case.transfers) if t.top_beyond_row}
    return bool(wrong) and wrong == beyond and all(got[i] in ("raised", "admitted") for i in wrong)


def _t30_shows(kwargs: Mapping[str, Any]) -> bool:
    """A transferred request that asks for logprobs and names token ids (``token_ids_logprob``): decode's commit
    appends the first token's row to its token logprobs but none to its token-ids logprobs."""
    case = kwargs.get("case")
    if not isinstance(case, TransferQueueCase):
        return False
    return any(t.poll == "success" and t.logprob is not None and t.token_ids_logprob is not None
               for t in case.transfers)  # fmt: skip


_T30_ROWS = re.compile(r"hold \(token, top, token-ids\) logprob rows (\[.*\]) for their one output token, expected "
                       r"(\[.*\]) \(one row")  # fmt: skip


def _t30_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """Q7's message when the committed requests' logprob rows differ from one per list only in the token-ids list,
    empty (0 rows) for each request that named token ids."""
    pair = _got_and_wanted(_T30_ROWS, message)
    # the defect's form of a wanted (token, top, 1): the same, with no token-ids row; a request naming no ids has none
    return pair is not None and _differs_only_as(pair, lambda w: (w[0], w[1], 0) if w[2] == 1 else w)


def _f10_shows(kwargs: Mapping[str, Any]) -> bool:
    """A generate call asking for parallel samples (``n > 1``): the tokenizer manager sends every sample of a prompt
    as a copy of the prompt's first expanded request, bootstrap room included."""
    call = kwargs.get("call")
    return isinstance(call, GenerateCall) and call.n > 1


_SAMPLE_ROOMS = re.compile(r"samples carry rooms (\[[^\]]*\]): ")
_ANY_ROOMS = re.compile(r"carry rooms (\[[^\]]*\])[:,]")


def _carried_rooms(pattern: re.Pattern[str], message: str) -> list[Any] | None:
    """The rooms a Q9 message's first line lists where ``pattern`` finds them (the samples' in ``distinct_rooms``;
    with ``_ANY_ROOMS`` the router rooms' clause's too), or None where it does not or the list does not parse."""
    found = pattern.search(message.split("\n", 1)[0])
    if found is None:
        return None
    try:
        rooms = ast.literal_eval(found.group(1))
    except (ValueError, SyntaxError):
        return None
    return rooms if isinstance(rooms, list) else None


def _f10_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """Q9's ``distinct_rooms`` message when the samples were sent prompt by prompt, each of the ``n`` samples of a
    prompt in the room of the prompt's own first expanded request (``room + i`` for one room, ``room[i]`` for
    per-prompt rooms): what 0.5.23's ``_handle_batch_request`` does."""
    call: GenerateCall = kwargs["call"]
    prompt_rooms = [call.room[i] if isinstance(call.room, tuple) else call.room + i for i in range(len(call.prompts))]
    return _carried_rooms(_SAMPLE_ROOMS, message) == [r for r in prompt_rooms for _ in range(call.n)]


def _t31_shows(kwargs: Mapping[str, Any]) -> bool:
    """A generate call the server expands into several requests (a batch, or parallel samples): 0.4.5.post1's and
    0.4.5.post2's ``GenerateReqInput.__getitem__`` hands each of them no bootstrap fields."""
    call = kwargs.get("call")
    return isinstance(call, GenerateCall) and call.expanded


def _t31_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """Q9's message when every request of the expanded call carries no room at all (None): the router's rooms
    (``router_room``) or the samples' (``distinct_rooms``)."""
    rooms = _carried_rooms(_ANY_ROOMS, message)
    return bool(rooms) and all(r is None for r in rooms or ())


def _t26_shows(kwargs: Mapping[str, Any]) -> bool:
    """Deterministic inference on, and a request whose sampling seed a 32-bit integer cannot hold (0.5.3-0.5.6 keep
    the seeds as int32, 0.5.7-0.5.20 as int64) or that is no integer at all (a string)."""
    batch = kwargs.get("batch")
    seeds = [r.sampling.sampling_seed for r in getattr(batch, "reqs", ())]
    return bool(getattr(batch, "enable_deterministic_inference", False)) and any(
        s is not None and (not isinstance(s, int) or not -(2**31) <= s < 2**31) for s in seeds
    )


def _t26_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """The message when the seed column's ``torch.tensor`` overflowed (``sampling_batch_info.py``): int32 to 0.5.6,
    int64 after; or could not take a string seed at all."""
    del kwargs
    return message.startswith("building the sampling info raised ") and (
        "cannot be converted to type int32 without overflow" in message
        or "Overflow when unpacking long" in message
        or "too many dimensions 'str'" in message
        or "'str' object cannot be interpreted as an integer" in message
    )


_AFTER = re.compile(r"cached_tokens=(-?\d+), cached_tokens_device=(-?\d+), already_computed=(-?\d+)")


def _t2_shows(kwargs: Mapping[str, Any]) -> bool:
    batch = kwargs.get("batch")
    reqs = getattr(batch, "reqs", ())
    return any(getattr(r, "prefix_len", 0) > 0 and not getattr(r, "retracted_stain", False) for r in reqs)


def _t2_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """P23's message when only ``cached_tokens_device`` is wrong, left where it was: decode's prefix hit (on the
    device) was not counted as device-cached (before #25973)."""
    head = re.match(r"request (\d+): ", message)
    after = _AFTER.findall(message)
    if head is None or len(after) != 2:
        return False
    (got_c, got_d, got_a), (want_c, want_d, want_a) = after
    before = kwargs["batch"].reqs[int(head.group(1))].cached_tokens_device
    return (got_c, got_a) == (want_c, want_a) and int(got_d) == before != int(want_d)


def _t3_shows(kwargs: Mapping[str, Any]) -> bool:
    """A queue pass with pages of more than one token and a request on the path without the radix cache (radix
    off, or a rebootstrapped request: it never matches decode's tree) whose fill length is not page-aligned: only
    then does counting its fill length differ from counting the whole pages it takes."""
    case = kwargs.get("case")
    ps = getattr(case, "page_size", 1)
    radix = getattr(case, "radix", True)
    return (
        case is not None
        and ps > 1
        and any(r.fill_len % ps and (not radix or r.rebootstrap) for r in getattr(case, "requests", ()))
    )


def _t3_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """Q4's budget clause, overshot by what the pass with raw fill lengths allocates: from 0.5.11 admission re-reads
    the budget after each request, so only the last admitted request's rounding up to whole pages can take the pass
    past it (by less than a page); to 0.5.10.post1 the budget is read once and every admission's rounding adds up."""
    q4 = re.match(r"(\d+) tokens allocated, the budget was (\d+)$", message.splitlines()[0] if message else "")
    if q4 is None:
        return False
    got, budget, ps = int(q4.group(1)), int(q4.group(2)), int(kwargs["case"].page_size)
    if not _budget_read_once():
        return 0 < got - budget < ps
    # T11 too, T23/T24's unpolled failed receivers (a request admitted that should have failed), T17's arrival
    # order (no priority sort in the pass before 0.5.12), and T32's PP step (its own polls, not the consensus)
    from dataclasses import replace

    from pdverify.properties.releases import DOMAIN

    case = kwargs["case"]
    skips = (False, True) if DOMAIN.release in T24_RELEASES else (False,)
    orders = [case, replace(case, priority_order=None)] if _release_before("0.5.12") else [case]
    if case.pp_consensus and DOMAIN.release in T32_RELEASES:
        orders += [_pp_step_before_consensus(variant) for variant in orders]
    passes = [
        _defective_queue_pass(variant, raw_fill=True, lora_gate=g, skip_ready_polls=skip)
        for variant in orders
        for g in (True, False)
        for skip in skips
    ]
    return got > budget and any(
        sum(len({loc // ps for loc in t}) * ps for t in p.allocated) == got for p in passes if p is not None
    )


def _t3_overadmits(kwargs: Mapping[str, Any], message: str) -> bool:
    """Q2's or Q3's message when the pass admitted, past where the contract stops, the next request the pass looks
    at - one whose raw fill length and headroom fit what is left of the budget while its whole pages do not; Q1's
    when that request, admitted so, then failed for want of SWA pages (the hybrid pool's reclaim: with the radix
    cache, whose evictable SWA pages the SWA budget counts, a rebootstrapped request takes the raw-length path)."""

    case = kwargs["case"]
    if _budget_read_once():  # to 0.5.10.post1: what the pass with raw fill lengths and the budget read once did
        fields = _pass_fields(message)
        if fields is None or not _pass_shows(_oracle(case, budget_reread=False), fields[0], fields[2]):
            return False
        return _pass_shows(_defective_queue_pass(case, raw_fill=True), fields[0], fields[1])  # with T11 too: T11's
    want = _oracle(case)
    message = _own_message(message)
    q2 = re.match(r"admitted ([#\d, ]+|none), expected ([#\d, ]+|none) \(", message)
    q3 = re.match(r"queue after the pass ([#\d, ]+|none), expected ([#\d, ]+|none)$", message)
    q1 = re.match(r"failed ([#\d, ]+|none), expected ([#\d, ]+|none)$", message)

    def names(text: str) -> list[int]:
        return [] if text == "none" else [int(n) for n in re.findall(r"#(\d+)", text)]

    if q2 is not None and names(q2.group(2)) == want.admitted:
        got = names(q2.group(1))
        extra = got[len(want.admitted) :] if got[: len(want.admitted)] == want.admitted else []
    elif q3 is not None and names(q3.group(2)) == want.remaining:
        got = names(q3.group(1))
        extra = [i for i in want.remaining if i not in got]
        if [i for i in want.remaining if i in got] != got:
            return False
    elif q1 is not None and names(q1.group(2)) == want.failed and case.swa_free_pages is not None:
        got = names(q1.group(1))
        extra = [i for i in got if i not in want.failed]
        if len(extra) != 1 or [i for i in got if i != extra[0]] != want.failed or extra[0] not in want.remaining:
            return False
    else:
        return False
    if not extra:
        return False
    ps, r = case.page_size, case.requests[extra[0]]
    if case.radix and not r.rebootstrap:
        return False  # the radix path charges whole pages
    from pdverify.production.decode_queue import PreallocPass

    held = [len(q.prefix_pages) if case.radix and not q.rebootstrap else 0 for q in case.requests]
    on_device = [i for i in want.admitted if not case.to_host(i)]
    reserve = PreallocPass(case, "cpu").reserved_tokens  # the budget keeps back the admitted requests' headroom too
    left = case.token_budget - sum((-(-case.requests[i].fill_len // ps) - held[i]) * ps for i in on_device)
    left -= reserve(len(on_device)) - reserve(0)
    raw, pages = r.fill_len + case.reserved_decode_tokens, -(-r.fill_len // ps) * ps + case.reserved_decode_tokens
    return bool(raw <= left < pages)


def _t9_exchange(pair: Any) -> Any:
    """The exchange 0.4.5.post2 performs for ``pair`` (no decode prefix): each chunk ``[start, end)`` sent as it
    ends (no partial page deferred, an empty one too), its pages strided from the chunk's own start, placed at the
    token offset ``start`` in decode's page list; decode registers the pages of ``[0, L)``."""
    import numpy as np

    from pdverify.production.transfer import KvChunk, PrefillSendState
    from pdverify.properties.test_transfer import Exchange

    ps, n = pair.page_size, pair.length
    locs = list(pair.prefill.locations)
    state = PrefillSendState(1, n, 0, -(-n // ps), 0)
    states, sends = [state], []
    for k, end in enumerate(pair.chunk_ends):
        start, stop = state.start_send_idx, min(end, n)
        pages = np.asarray([loc // ps for loc in locs[start:stop][::ps]], dtype=np.int32)
        sends.append((k, KvChunk(pages, start, start, stop, k == len(pair.chunk_ends) - 1)))
        state = PrefillSendState(1, n, 0, state.num_pages, stop, state.curr_idx + len(pages))
        states.append(state)
    decode = np.asarray([loc // ps for loc in list(pair.decode.locations)[:n][::ps]], dtype=np.int64)
    return Exchange(state.num_pages, sends, states, decode, locs, list(pair.decode.locations))


def _t9_shows(kwargs: Mapping[str, Any]) -> bool:
    """A chunked prompt (more than one chunk) at a page size above 1: with one chunk, or pages of one token, token
    and page offsets agree. On the prefill exchange (S10-S12, X1): a send whose token slice is not its page slice."""
    case = _t9_case(kwargs)
    if case is not None:
        return any(
            (t.start, t.stop) != (t.start // case.page_size, t.start // case.page_size + len(t.pages))
            for t in _t9_transfers(case)
        )
    pair = kwargs.get("pair")
    return pair is not None and pair.page_size > 1 and len(pair.chunk_ends) > 1


def _t9_case(kwargs: Mapping[str, Any]) -> PrefillCase | None:
    """The prefill exchange's case in S10-S12's (``case``) or X1's (``pair``: prefill's side first) arguments."""
    case = kwargs.get("case")
    pair = kwargs.get("pair")
    if isinstance(pair, tuple) and pair and isinstance(pair[0], PrefillCase):
        case = pair[0]
    return case if isinstance(case, PrefillCase) else None


def _t9_transfers(case: PrefillCase) -> list[Any]:
    """The transfers 0.4.5.post2's ``send_kv_chunk`` (prefill.py:284-310) makes for ``case`` (no decode prefix, no
    state): each chunk ``[start, end)`` as it ends, its pages strided from the chunk's own start, with the token slice
    as its destination; aux on the last."""
    from pdverify.model.exchange import Transfer

    ps, start, out = case.page_size, 0, []
    for k, end in enumerate(case.chunk_ends):
        last = k == len(case.chunk_ends) - 1
        pages = tuple(loc // ps for loc in case.row[start:end][::ps])
        out.append(Transfer(pages, "int32", start, end, last, case.aux_index if last else None, None, end - start))
        start = end
    return out


def _t9_exchange_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """S10-S12: the message shows exactly 0.4.5.post2's transfers (``_t9_transfers``); X1: prefill's sends land on
    positions past decode's destination list, as token slices do."""
    from pdverify.properties.test_prefill_exchange import _show

    case = _t9_case(kwargs)
    if case is None or not _t9_shows(kwargs):
        return False
    if "pair" in kwargs:
        return message.startswith("prefill's sends land on ")
    shown = _show(_t9_transfers(case))
    return message.rstrip().endswith(shown) or f": {shown}" in message


def _t9_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """P10's, P11's or P12's message is the one the property's own check gives 0.4.5.post2's exchange
    (``_t9_exchange``)."""
    from pdverify.properties import test_transfer

    pair = kwargs["pair"]
    model = _t9_exchange(pair)
    for check in (test_transfer.check_concatenation, test_transfer.check_pairing, test_transfer.check_boundaries):
        try:
            check(model, pair)
        except AssertionError as exc:
            if _own_message(str(exc)) == _own_message(message):
                return True
    return False


def _t9_explains_also(kwargs: Mapping[str, Any], message: str) -> bool:
    """P11 and P12 as P10 (``_t9_explains``); the prefill exchange's S10-S12 and X1 by its own model."""
    if _t9_case(kwargs) is not None:
        return _t9_exchange_explains(kwargs, message)
    return _t9_explains(kwargs, message)


def _own_message(text: str) -> str:
    """An assertion's own message, without the explanation pytest's assertion rewriting appends (``\nassert ...``,
    whose ``+ where`` lines name objects by address)."""
    return text.split("\nassert ")[0]


def _t4_shows(kwargs: Mapping[str, Any]) -> bool:
    """Every batch: the field is never set."""
    return "batch" in kwargs


def _t4_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """P26's multimodal clause, and only because the field was never set."""
    return message.startswith("prepare_for_prebuilt left batch.multimodal_inputs unset")


T4_RELEASES = (
    "0.4.4.post2",
    "0.4.4.post3",
    "0.4.4.post4",
    "0.4.5",
    "0.4.5.post1",
    "0.4.5.post2",
    "0.4.5.post3",
    "0.4.6",
    "0.4.6.post1",
    "0.4.6.post2",
    "0.4.6.post3",
    "0.4.6.post4",
    "0.4.6.post5",
    "0.4.7",
    "0.4.7.post1",
    "0.4.8",
    "0.4.8.post1",
    "0.4.9",
    "0.4.9.post1",
    "0.4.9.post2",
    "0.4.9.post3",
    "0.4.9.post4",
    "0.4.9.post5",
    "0.4.9.post6",
    "0.4.10",
    "0.4.10.post1",
)
"""Every release with a PREBUILT batch before 0.4.10.post2 (#8094)."""

_SUFFIX = ("DSA", "MINIMAX_INDEX_K")


def _t5_shows(kwargs: Mapping[str, Any]) -> bool:
    """A suffix state type and a decode prefix: only then do a list from 0 and the suffix from ``D`` differ."""
    if "pair" in kwargs:
        _, dec = kwargs["pair"]
        return any(k in _SUFFIX for k in dec.state_types) and dec.decode_prefix > 0
    case = kwargs.get("case")
    return case is not None and any(k in _SUFFIX for k in case.state_types) and case.decode_prefix > 0


def _t5_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """P16 / P18: a DSA or MiniMax index-K list that is exactly the pages of ``[0, L)`` where the suffix from ``D`` is
    expected. D1: decode's list of such a type has a page for every position of ``[0, L)``. P18p: a mispairing in one
    of those lists (both sides' lists start at 0, the pairing at ``D``)."""
    head = message.splitlines()[0] if message else ""
    if "pair" in kwargs:
        return re.match(r"(DSA|MINIMAX_INDEX_K)(\[\d+\])?: ", head) is not None
    case = kwargs["case"]
    d1 = re.match(r"(DSA|MINIMAX_INDEX_K) list \[([\d, ]*)\] from position (\d+): ", head)
    if d1 is not None:  # D1: decode's list holds a page per position of [0, L) where the suffix from D is expected
        sent = [v for v in d1.group(2).split(",") if v.strip()]
        return bool(int(d1.group(3)) == case.decode_prefix and len(sent) == -(-case.length // case.page_size))
    m = re.match(r"(DSA|MINIMAX_INDEX_K) state list \[([\d, ]*)\], expected \[([\d, ]*)\] \(D=(\d+)\)$", head)
    if m is None:
        return False
    got = [int(v) for v in m.group(2).split(",") if v.strip()]
    return got == [loc // case.page_size for loc in case.row[:: case.page_size]]


def _t6_shows(kwargs: Mapping[str, Any]) -> bool:
    """The KV checksum on (not a health check) with a decode prefix: a prefill case, or X2's handoff."""
    case = kwargs.get("case")
    if isinstance(case, ChecksumCase):
        return case.decode_prefix > 0
    return (
        case is not None
        and getattr(case, "kv_checksum", False)
        and not getattr(case, "health_check", False)
        and case.decode_prefix > 0
    )


def _t6_explains_x2(kwargs: Mapping[str, Any], message: str) -> bool:
    """X2's message when prefill's digest reads its pages of ``[0, n)``, the prefix it never sent included."""
    case = kwargs["case"]
    return message.startswith(f"prefill's digest read pages {list(case.prefill_pages)}, not the pages it sent")


def _swa_window(case: ChecksumCase, swa: tuple[int, ...], length: int) -> list[int]:
    """A side's SWA pages of the window its SWAKVPool digest reads over ``[0, length)`` (page-aligned down)."""
    ps = case.page_size
    first = max(case.decode_prefix, length - case.sliding_window) // ps
    return [swa[i] for i in range(first, (length - 1) // ps + 1)]


def _f3_shows(kwargs: Mapping[str, Any]) -> bool:
    """A rebootstrap whose kept outputs reach a page past the prompt's last one, or move a hybrid SWA pool's window
    (within them, the two digests read the same pages)."""
    case = kwargs.get("case")
    if not isinstance(case, ChecksumCase) or not case.rebootstrap:
        return False
    if -(-case.length // case.page_size) > -(-case.prompt // case.page_size):
        return True
    swa = case.decode_swa_pages
    return bool(case.sliding_window) and _swa_window(case, swa, case.prompt) != _swa_window(case, swa, case.length)


_F3_SWA_MESSAGE = re.compile(r"decode's digest read (swa|block_scale_swa) items \[([^\]]*)\]")


def _f3_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """X2's message when decode's digest reads only its pages of the prompt, ``[0, len(origin_input_ids))``: its KV
    pages, or a hybrid SWA pool's window over the prompt."""
    case = kwargs["case"]
    prompt_pages = list(case.decode_pages[: -(-case.prompt // case.page_size)])
    if message.startswith(f"decode's digest read pages {prompt_pages}, not the pages the transfer landed on"):
        return True
    m = _F3_SWA_MESSAGE.match(message)
    if m is None or not case.sliding_window:
        return False
    items = [int(x) for x in m.group(2).split(",") if x.strip()]
    return items == _swa_window(case, case.decode_swa_pages, case.prompt)


def _f4_shows(kwargs: Mapping[str, Any]) -> bool:
    """An MXFP8 KV pool that registers block scales for the transfer (``--kv-cache-dtype mxfp8``) and no SWA layers
    (an ``SWAKVPool`` gets state indices: F5)."""
    case = kwargs.get("case")
    return isinstance(case, ChecksumCase) and case.block_scales and not case.sliding_window


def _no_state_indices(kwargs: Mapping[str, Any], message: str) -> bool:
    """X2's message when a side's ``KvChecksumComputer.compute`` refused its registered state buffers without state
    indices (``checksum.py``'s ``assert state_indices_gpu is not None``: ``state_indices_for_request`` gave None) - F4
    and T22."""
    del kwargs
    first = message.split("\n", 1)[0]  # pytest's assertion rewriting appends its own explanation
    return first.startswith("the handoff raised: prefill: AssertionError at checksum.py:") and first.endswith(
        "`assert state_indices_gpu is not None`"
    )


def _t22_shows(kwargs: Mapping[str, Any]) -> bool:
    """A MiniMax-M3 sparse pool (``MiniMaxSparseKVPool``: it registers its indexer's keys and its dense layers' KV as
    state for the transfer)."""
    case = kwargs.get("case")
    return isinstance(case, ChecksumCase) and case.kv_pool == "minimax"


def _f5_shows(kwargs: Mapping[str, Any]) -> bool:
    """A hybrid SWA pool with block scales (``SWAKVPool`` over MXFP8 sub-pools): three state types, two index spaces."""
    case = kwargs.get("case")
    return isinstance(case, ChecksumCase) and case.block_scales and bool(case.sliding_window)


_F5_MESSAGE = re.compile(r"(prefill|decode)'s digest read block_scale items \[([^\]]*)\]")


def _f5_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """X2's message when a side digested the full-attention layers' block scales at its SWA pages of the window -
    the one state index vector ``state_indices_for_request`` gives every state type of an ``SWAKVPool`` - over the
    request (or, on decode, its prompt: F3's length)."""
    case = kwargs["case"]
    m = _F5_MESSAGE.match(message)
    if m is None:
        return False
    items = [int(x) for x in m.group(2).split(",") if x.strip()]
    swa = case.prefill_swa_pages if m.group(1) == "prefill" else case.decode_swa_pages
    return any(items == _swa_window(case, swa, length) for length in (case.length, case.prompt))


def _f6_shows(kwargs: Mapping[str, Any]) -> bool:
    """A hybrid linear pool with state besides the Mamba slot: DSA full-attention layers
    (``HybridLinearKVPool(use_dsa=True)``, GLM-5.3-Flash: the index keys by page, a compressed indexer's tail by
    request row) or a compressed QSA indexer (``QSATokenToKVPool``, Qwen4-Exp: the pending ring by request row, the
    compressed keys by page)."""
    case = kwargs.get("case")
    return isinstance(case, ChecksumCase) and case.kv_pool in ("mamba_dsa", "mamba_qsa")


_F6_MESSAGE = re.compile(r"(prefill|decode)'s digest read (dsa|dsa_tail|qsa_pending|qsa_compressed) items \[([^\]]*)\]")
_F6_OUT_OF_BOUNDS = re.compile(
    r"the handoff raised: (prefill|decode): the digest read \d+ bytes at address \d+, on no registered buffer's "
    r"item grid"
)


def _f6_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """X2's message when a side digested its DSA index keys (or its compression tail) or its QSA indexer's ring or
    compressed keys at its Mamba slot - the one
    state index ``state_indices_for_request`` gives every state type of a ``HybridLinearKVPool`` - or, with state of
    one item per request row (the compression tail, the pending ring), read past those rows (a Mamba slot id beyond
    the request rows: on a GPU an out-of-bounds read)."""
    case = kwargs["case"]
    first = message.split("\n", 1)[0]
    rows_read = case.dsa_index_kpool > 1 or case.kv_pool == "mamba_qsa"  # state with one item per request row
    if rows_read and _F6_OUT_OF_BOUNDS.match(first):
        return True
    m = _F6_MESSAGE.match(first)
    if m is None:
        return False
    slot = case.prefill_mamba_slot if m.group(1) == "prefill" else case.decode_mamba_slot
    return [int(x) for x in m.group(3).split(",") if x.strip()] == [slot]


def _f8_shows(kwargs: Mapping[str, Any]) -> bool:
    """A request in bootstrap room 0 (in the transfer queue, a transferred one): the value decode's metadata row reads
    as "prefill has not written it yet"."""
    case = kwargs.get("case")
    if isinstance(case, TransferQueueCase):
        return bool(_f8_stuck(case))
    return isinstance(case, ChecksumCase) and case.bootstrap_room == 0


def _f8_stuck(case: TransferQueueCase) -> set[int]:
    """The transfers F8 keeps queued: each whose receiver reports success in room 0 (on a PP stage's step, each the
    stages agreed good: the pass looks at no other)."""
    if case.pp_step:
        return {i for i, t in enumerate(case.transfers) if t.consensus == "good" and t.room == 0}
    return {i for i, t in enumerate(case.transfers) if t.poll == "success" and t.room == 0}


def _indices(text: str) -> set[int]:
    return {int(i) for i in re.findall(r"#(\d+)", text)}


def _ints(text: str) -> set[int]:
    """The integers of a printed list (Q7's freed decode slots)."""
    return {int(v) for v in re.findall(r"-?\d+", text)}


_Q7_LISTS = (
    re.compile(r"committed \[([^\]]*)\], expected every (?:successful|agreed good) transfer \[([^\]]*)\]"),
    re.compile(r"queue after the pass \[([^\]]*)\], expected the transfers (?:in flight|not agreed on) \[([^\]]*)\]"),
    re.compile(r"freed decode slots \[([^\]]*)\], expected those of the requests that left \[([^\]]*)\]"),
)


def _f8_q7_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """Q7's message when the transferred requests in room 0 - exactly those - stayed queued: missing from the
    committed ones, kept in the queue, their decode slots not freed."""
    case = kwargs["case"]
    stuck = _f8_stuck(case)
    line = message.split("\n", 1)[0]
    committed, queue, freed = (p.match(line) for p in _Q7_LISTS)
    if committed is not None:
        got, want = _indices(committed[1]), _indices(committed[2])
        return got <= want and want - got == stuck
    if queue is not None:
        got, want = _indices(queue[1]), _indices(queue[2])
        return want <= got and got - want == stuck
    if freed is not None:
        got, want = _ints(freed[1]), _ints(freed[2])
        return got <= want and want - got == {case.transfers[i].decode_slot for i in stuck}
    return False


_Q7_ABORTED = re.compile(r"aborted \[([^\]]*)\], expected the (?:failed|agreed bad) transfers \[([^\]]*)\]")


def _f11_shows(kwargs: Mapping[str, Any]) -> bool:
    """Q7 on a PP stage's step with a transfer the stages agreed failed whose receiver here succeeded."""
    case = kwargs.get("case")
    return (
        isinstance(case, TransferQueueCase)
        and case.pp_step
        and any(t.consensus == "bad" and t.poll == "success" for t in case.transfers)
    )


def _f11_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """Q7's message exactly as a step that hands the pass the agreed rids as one list (good + bad) gives it: the pass
    polls this stage's own receivers for them - a listed transfer whose receiver here succeeded is committed (or,
    in room 0 from 0.5.9, held by F8's gate), one whose receiver failed aborted, every other one kept - so a
    transfer agreed failed whose receiver here succeeded is not aborted."""
    from pdverify.properties.releases import DOMAIN

    if not _f11_shows(kwargs):
        return False
    case = kwargs["case"]
    # F8's room-0 hold where the release has it - or not, where F8's own fix is applied (a patched run)
    holds = (True, False) if DOMAIN.release in F8_RELEASES else (False,)
    return any(_f11_message(case, message, hold) for hold in holds)


def _f11_message(case: TransferQueueCase, message: str, f8: bool) -> bool:
    """Whether ``message`` is Q7's for the step that polls this stage's receivers (``f8``: room 0 held by F8)."""
    listed = {i: t for i, t in enumerate(case.transfers) if t.consensus is not None}
    commit = {i for i, t in listed.items() if t.poll == "success" and not (f8 and t.room == 0)}
    abort = {i for i, t in listed.items() if t.poll == "failed"}
    keep = set(range(len(case.transfers))) - commit - abort
    # the transfers agreed failed that this stage's receiver saw succeed: F11's, each committed or held, not aborted
    flipped = {i for i, t in listed.items() if t.consensus == "bad" and t.poll == "success"}
    line = message.split("\n", 1)[0]
    committed, queue, freed = (p.match(line) for p in _Q7_LISTS)
    aborted = _Q7_ABORTED.match(line)
    if committed is not None:
        got, want = _indices(committed[1]), _indices(committed[2])
        return got == commit and bool((got - want) & flipped)
    if aborted is not None:
        got, want = _indices(aborted[1]), _indices(aborted[2])
        return got == abort and bool((want - got) & flipped)
    if queue is not None:
        got, want = _indices(queue[1]), _indices(queue[2])
        return got == keep and bool((got - want) & flipped)
    if freed is not None:
        got, want = _ints(freed[1]), _ints(freed[2])
        slots = {case.transfers[i].decode_slot for i in flipped}
        return got == {case.transfers[i].decode_slot for i in commit | abort} and bool((want - got) & slots)
    return False


_F8_MESSAGE = re.compile(
    r"decode never committed the transfer of the request in room 0 \(prefill's slot \d+, decode's \d+\): still in "
    r"DecodeTransferQueue\.queue after \d+ pop_transferred polls, though its receiver reports the transfer done and "
    r"prefill's row landed \(bootstrap_room row \[0, 0\]\)"
)


def _f8_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """X2's message when decode's transfer queue keeps a transferred request of room 0 for ever: the metadata gate
    (and before it ``_commit_transfer_to_req``) reads the row's room 0 as "not yet written", though prefill wrote it."""
    return bool(_F8_MESSAGE.match(message.split("\n", 1)[0]))


def _t6_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """S16's message when the one digest covers the pages of ``[0, L)`` - the prefix decode held, never sent, too -
    by their physical ids or, on a translated pool, their virtual ones (F2 as well)."""
    case = kwargs["case"]
    ps = case.page_size
    virtual = tuple(loc // ps for loc in case.row[::ps])
    ids = [virtual]
    if case.translation is not None:
        ids.append(tuple(case.translation[p] for p in virtual))
    return any(message.startswith(f"digests [{pages!r}], expected one over the pages sent") for pages in ids)


def _t7_shows(kwargs: Mapping[str, Any]) -> bool:
    """S21 holding the early send back for a pending HiCache load-back."""
    hold = kwargs.get("hold")
    return isinstance(hold, Mapping) and hold.get("early_send_blocked") == "load_back"


def _t7_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """S21's message when the early send went out all the same: the request shipped its transfers as with an
    early send, or (under the overlap scheduler) one of them waits on the forward event the early send records."""
    return message.startswith(
        ("with the early send held back ({'early_send_blocked': 'load_back'}", "a transfer waits on a forward event")
    )


def _t8_shows(kwargs: Mapping[str, Any]) -> bool:
    """S17 with the KV cache sharded across the prefill ranks."""
    split = kwargs.get("split")
    return isinstance(split, tuple) and split[0] == "kv_shard"


def _t8_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """S17's message when a KV-sharded rank sends every page of the request by its global id: a page another rank
    owns, a position another rank sent, or a global id where the local one (``l // N``) is expected."""
    head = message.splitlines()[0] if message else ""
    if "(kv_shard)" not in head:
        return False
    value = re.match(r"position \d+: sent (\d+), expected (\d+): rank \d+ of (\d+) ", head)
    if value is not None:
        return int(value.group(1)) // int(value.group(3)) == int(value.group(2))
    return re.match(r"(page \d+ belongs to rank \d+|position \d+ sent twice)", head) is not None


def _t10_shows(kwargs: Mapping[str, Any]) -> bool:
    """S15 where its oracle expects a transfer to wait on the forward's event (``early_send_waits``: under the
    overlap scheduler, an early send of a device prefix past ``D``, page-aligned)."""
    case = kwargs.get("case")
    return isinstance(case, PrefillCase) and early_send_waits(case)


def _t10_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """S15's message when no transfer waits on the forward event the early send recorded."""
    m = re.match(r"transfers waiting on the forward \[([^\]]*)\], expected only the first to wait ", message)
    return m is not None and all(v.strip() == "False" for v in m.group(1).split(",") if v.strip())


def _t11_shows(kwargs: Mapping[str, Any]) -> bool:
    """A queue pass with a LoRA slot limit where the limit changes the pass: the oracle without the gate (every
    adapter fits) differs from the oracle with it."""
    from dataclasses import replace

    from pdverify.model.queue import DecodeQueueCase

    case = kwargs.get("case")
    if not isinstance(case, DecodeQueueCase) or case.max_loras is None:
        return False
    if _oracle(case) != _oracle(replace(case, max_loras=None)):
        return True
    # with the release's other queue defects (T3's raw lengths), where the gate alone changes nothing in the oracle
    return _pass_differs(
        _defective_queue_pass(case, lora_gate=False, raw_fill=True), _defective_queue_pass(case, raw_fill=True)
    )


_T11_FIELDS = {
    "failed": "failed",
    "receivers released for": "failed",
    "aborts streamed for": "streamed",
    "admitted": "admitted",
    "queue after the pass": "remaining",
    "radix locks held by": "locked",
}


def _pass_fields(message: str) -> tuple[str, list[int], list[int]] | None:
    """A pass-level queue message (``<what> <got>, expected <want>``, Q1, Q2, Q3 or Q5) as the pass field it names,
    the requests the release gave there and those the oracle expected; None for any other message."""
    m = re.match(r"([a-z ]+?) ([#\d, ]+|none),? expected ([#\d, ]+|none)\b", _own_message(message))
    if m is None or m.group(1) not in _T11_FIELDS:
        return None

    def names(text: str) -> list[int]:
        return [] if text == "none" else [int(n) for n in re.findall(r"#(\d+)", text)]

    return _T11_FIELDS[m.group(1)], names(m.group(2)), names(m.group(3))


def _pass_message(message: str) -> tuple[str, list[int]] | None:
    """A pass-level queue message as the pass field it names and the requests the release gave there."""
    fields = _pass_fields(message)
    return None if fields is None else (fields[0], fields[1])


def _budget_read_once() -> bool:
    """Whether the release under check reads the queue's budget once per pass (to 0.5.10.post1, before #19746): the
    form its queue findings' explanations replay. A check without a release is of the current form."""
    from pdverify.properties.releases import DOMAIN, FROM_BUDGET_REREAD

    return DOMAIN.release is not None and FROM_BUDGET_REREAD.not_applicable(DOMAIN.release) is not None


def _oracle(case: Any, *, budget_reread: bool | None = None) -> Any:
    """The queue oracle's pass under the rules of the release under check (as the properties call it): the budget
    read once to 0.5.10.post1, the SWA headroom charged with the radix cache off too to 0.5.13.post1, the SWA budget
    read once to 0.5.18."""
    from pdverify.oracle.decode_queue import expected_pass

    reread = not _budget_read_once() if budget_reread is None else budget_reread
    return expected_pass(
        case,
        budget_reread=reread,
        swa_headroom_always=_release_before("0.5.14"),
        swa_budget_reread=not _release_before("0.5.19"),
    )


def _t11_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """Q1, Q2, Q3 or Q5's message (``<what> <got>, expected <want>``) when what the pass did is exactly what it does
    without the LoRA gate: every request the limit should have passed over was taken as if its adapter fit."""
    from dataclasses import replace

    shown = _pass_message(message)
    if shown is None:
        return False
    case = kwargs["case"]
    field, got = shown
    # every release with T11 has T3 too: a pass can show both (both under the release's budget rule)
    passes = (
        _oracle(replace(case, max_loras=None)),
        _defective_queue_pass(case, lora_gate=False, raw_fill=True),
    )
    return any(_pass_shows(p, field, got) for p in passes)


def _pass_differs(a: Any, b: Any) -> bool:
    """Whether two passes (None: one that crashes) differ in what they admit, fail or keep."""
    if a is None or b is None:
        return (a is None) != (b is None)
    return any(list(getattr(a, f)) != list(getattr(b, f)) for f in ("admitted", "failed", "remaining"))


def _pass_shows(trace: Any, field: str, got: list[int]) -> bool:
    """Whether a pass's ``field`` is ``got`` (in order for the admitted and the remaining, as a set otherwise)."""
    if trace is None:
        return False
    want = list(getattr(trace, field))
    return got == want if field in ("admitted", "remaining") else sorted(got) == sorted(want)


class _SwaPagesShort(Exception):
    """The pass allocates an SWA tail the SWA pool has no pages for (``_pre_alloc``'s 'KV cache is full')."""


def _release_before(version: str) -> bool:
    """Whether the release under check is older than ``version`` (a check without a release: no)."""
    from packaging.version import InvalidVersion, Version

    from pdverify.properties.releases import DOMAIN

    try:
        return DOMAIN.release is not None and Version(DOMAIN.release) < Version(version)
    except InvalidVersion:
        return False


def _defective_queue_pass(
    case: Any,
    *,
    lora_gate: bool = True,
    raw_fill: bool = False,
    raw_swa: bool = False,
    read_once: bool | None = None,
    abort_scan: bool | None = None,
    retract_check: bool | None = None,
    skip_ready_polls: bool = False,
) -> Any:
    """The pass as a release with some of the queue's defects makes it, None where it crashes: without the LoRA gate
    (T11), a request without the radix cache charged its fill length where the allocator takes whole pages (T3), and a
    request's SWA tail charged its raw length against the SWA budget where the allocator takes whole pages, with no
    reclaim to turn a shortfall into a failure: the allocation then asserts (T14); without the abort scan (T18: aborted
    requests admitted like live ones), without the check that the running requests can still finish (T19).
    ``read_once``: the budget's form to 0.5.10.post1 (read at the start, each admission's charge and headroom taken from
    it; the SWA budget read once to 0.5.18). ``skip_ready_polls``: the receivers not polled while every queued one is
    ready (T23, T24; from 0.5.13 only while none has concluded its own abort, #25561) - off unless asked for, so that
    only T23's and T24's explanations (and T3's budget overshoot, which counts what the pass allocated) replay it.
    Unset, ``read_once``, ``abort_scan`` and ``retract_check`` are those of the release under check: the budget read
    once to 0.5.10.post1, no abort scan to 0.4.6.post4, no retractable-token check to 0.4.7."""
    from pdverify.model.queue import CLIP_MAX_NEW_TOKENS
    from pdverify.production.decode_queue import PreallocPass

    read_once = _budget_read_once() if read_once is None else read_once
    abort_scan = not _release_before("0.4.6.post5") if abort_scan is None else abort_scan
    retract_check = not _release_before("0.4.7.post1") if retract_check is None else retract_check
    headroom_always = _release_before("0.5.14")

    concluded_polls = not _release_before("0.5.13")

    swa_read_once = raw_swa or _release_before("0.5.19")  # T14 (the raw SWA charge) is of the read-once form only

    class Defective(PreallocPass):
        charged = 0
        swa_committed = 0

        def poll_receivers(self) -> None:
            reqs = self.case.requests
            aborted_receiver = concluded_polls and any(r.receiver_failed == "abort" for r in reqs)
            unpolled = skip_ready_polls and not self.case.pp_consensus  # a PP pass takes the consensus
            if not (unpolled and all(r.bootstrapped for r in reqs) and not aborted_receiver):
                super().poll_receivers()

        def fail_aborted(self) -> list[int]:
            return super().fail_aborted() if abort_scan else []

        def budget(self) -> int:
            return self.case.token_budget - self.charged if read_once else super().budget()

        def raw(self, i: int) -> bool:
            """Whether request ``i`` is charged its raw fill length (T3: the path without the radix cache)."""
            req = self.case.requests[i]
            return raw_fill and not (self.case.radix and not req.rebootstrap)

        def charge(self, i: int) -> int:
            """What admission charges request ``i``: its fresh tokens (raw, or in whole pages) and its headroom."""
            req, ps = self.case.requests[i], self.case.page_size
            fresh = req.fill_len if self.raw(i) else -(-req.fill_len // ps) * ps - self.prefix(i)
            return fresh + self.case.reserved_decode_tokens

        def allocate(self, i: int) -> tuple[int, list[int]]:
            self.charged += self.charge(i)
            return super().allocate(i)

        def lora_fits(self, req: Any) -> bool:
            return lora_gate is False or super().lora_fits(req)

        def required_tokens(self, i: int) -> int:
            req = self.case.requests[i]
            if not retract_check:
                return self.charge(i)
            if not self.raw(i):
                return super().required_tokens(i)
            room = min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS) - self.case.retractable_tokens
            return max(req.fill_len + self.case.reserved_decode_tokens, req.prefill_len + room)

        def swa_charge(self, i: int) -> int:
            """The SWA budget's charge: the raw tail (T14) or its whole pages, and the headroom with the radix cache
            (always, to 0.5.13.post1: before #28755)."""
            ps, tail = self.case.page_size, self.case.swa_tail_len(i)
            charge = tail if raw_swa else -(-tail // ps) * ps
            return charge + (self.case.reserved_decode_tokens if self.case.radix or headroom_always else 0)

        def swa_budget(self) -> int | None:
            """The SWA budget read once and each admission's charge taken from it (to 0.5.18), else re-read."""
            budget = self.case.swa_token_budget
            if swa_read_once and budget is not None:
                return budget - self.swa_committed
            return super().swa_budget()

        def reclaim_swa(self, i: int) -> bool:
            if not raw_swa:
                taken = super().reclaim_swa(i)
            else:
                count = -(-self.case.swa_tail_len(i) // self.case.page_size)
                if count > len(self.swa_free):
                    raise _SwaPagesShort
                self.swa_free = self.swa_free[count:]
                self.swa_allocated += count * self.case.page_size
                taken = True
            if taken:
                self.swa_committed += self.swa_charge(i)
            return taken

    try:
        return Defective(case, "cpu").run()
    except _SwaPagesShort:
        return None


def _t14_shows(kwargs: Mapping[str, Any]) -> bool:
    """A queue pass on a hybrid SWA pool with pages of more than one token and a request whose SWA tail is not
    page-aligned: only there does its raw length differ from the whole pages it takes."""
    from pdverify.model.queue import DecodeQueueCase

    case = kwargs.get("case")
    if not isinstance(case, DecodeQueueCase) or case.swa_free_pages is None or case.page_size == 1:
        return False
    return any(case.swa_tail_len(i) % case.page_size for i in range(len(case.requests)))


def _t14_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """A queue property's failure as the pass with raw SWA charges makes it - alone or with the release's other
    queue defects (T3, T11, and T23/T24's unpolled failed receivers): 'KV cache is full' where that pass allocates an
    SWA tail past the free SWA pages, or a pass-level message (``<what> <got>, expected <want>``) that is what that
    pass did."""
    from pdverify.properties.releases import DOMAIN

    case = kwargs["case"]
    skips = (False, True) if DOMAIN.release in T24_RELEASES else (False,)
    variants = [
        _defective_queue_pass(case, raw_swa=True, lora_gate=gate, raw_fill=raw, skip_ready_polls=skip)
        for gate in (True, False)
        for raw in (False, True)
        for skip in skips
    ]
    own = _own_message(message)
    if own.startswith("KV cache is full! Bug in memory estimation."):
        return any(v is None for v in variants)
    shown = _pass_message(message)
    return shown is not None and any(_pass_shows(v, *shown) for v in variants)


def _t12_shows(kwargs: Mapping[str, Any]) -> bool:
    """S12 with the staging buffer on (a grid): only there does a send have to end on ``D + k * grid``."""
    case = kwargs.get("case")
    return isinstance(case, PrefillCase) and case.grid is not None


def _t12_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """S12's grid clauses, and only as a send that ignores the grid gives them: a non-final send ending on a page
    boundary off the grid, or a send longer than the grid."""
    case: PrefillCase = kwargs["case"]
    off = re.match(r"a non-final send ends at token (\d+), not on an allowed boundary", message)
    if off is not None:
        return int(off.group(1)) % case.page_size == 0
    long = re.match(r"a send of (\d+) tokens > (\d+)$", message.splitlines()[0] if message else "")
    return long is not None and int(long.group(2)) == case.grid


def _t16_shows(kwargs: Mapping[str, Any]) -> bool:
    """Q1 with a request aborted while queued, or whose receiver failed (one the pass looks at)."""
    from pdverify.model.queue import DecodeQueueCase

    case = kwargs.get("case")
    return isinstance(case, DecodeQueueCase) and any(
        (r.aborted or case.handshake_failed(i)) and case.looked_at(i) for i, r in enumerate(case.requests)
    )


def _t16_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """Q1's receiver clause exactly as a pass that clears no aborted request's receiver gives it: the receivers
    released are the expected ones less every aborted request."""
    m = re.match(r"receivers released for ([#\d, ]+|none), expected ([#\d, ]+|none)$", _own_message(message))
    if m is None:
        return False
    case = kwargs["case"]
    got, want = ([int(n) for n in re.findall(r"#(\d+)", g)] for g in m.groups())
    aborted = [r.aborted or case.handshake_failed(i) for i, r in enumerate(case.requests)]  # by the handshake too
    return got != want and sorted(got) == sorted(i for i in want if not aborted[i])


def _t17_shows(kwargs: Mapping[str, Any]) -> bool:
    """A queue pass under priority scheduling where the priority order is not the arrival order."""
    from pdverify.model.queue import DecodeQueueCase

    case = kwargs.get("case")
    if not isinstance(case, DecodeQueueCase) or case.priority_order is None:
        return False
    sign = 1 if case.priority_order == "low_first" else -1
    order = sorted(range(len(case.requests)), key=lambda i: case.requests[i].priority * sign)
    return order != list(range(len(case.requests)))


def _t17_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """Q1, Q2, Q3 or Q5's message (``<what> <got>, expected <want>``) when what the pass did is what it does in
    arrival order - the priority sort missing - alone or with the release's other queue defects (no LoRA gate: T11;
    raw fill lengths: T3)."""
    from dataclasses import replace

    shown = _pass_message(message)
    if shown is None:
        return False
    arrival = replace(kwargs["case"], priority_order=None)
    passes = (
        _oracle(arrival),
        _defective_queue_pass(arrival, raw_fill=True),
        _defective_queue_pass(arrival, lora_gate=False),
        _defective_queue_pass(arrival, lora_gate=False, raw_fill=True),
    )
    return any(_pass_shows(p, *shown) for p in passes)


def _t15_shows(kwargs: Mapping[str, Any]) -> bool:
    """Q6 with the staging buffer on and a request that can receive on the device (one with a staging room)."""
    from pdverify.model.queue import DecodeQueueCase

    case = kwargs.get("case")
    return (
        isinstance(case, DecodeQueueCase)
        and case.staging
        and any(not case.to_host(i) for i in range(len(case.requests)))
    )


def _t15_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """Q6's message exactly as a release that registers the staging room after the handshake gives it: each admitted
    request's events in the expected order but with its ``staging`` registration moved behind its metadata (and the
    recompute request, where there is one)."""
    import ast

    m = re.match(r"handshake (\[.*?\]), expected (\[.*?\])$", _own_message(message).splitlines()[0])
    if m is None:
        return False
    got, want = (list(ast.literal_eval(g)) for g in m.groups())
    late: list[tuple[str, int]] = []
    for event in want:
        late.append(event)
        if event[0] != "staging" and len(late) > 1 and late[-2] == ("staging", event[1]):
            late[-2], late[-1] = late[-1], late[-2]
    return bool(got != want and got == late)


def _queue_defect_explains(kwargs: Mapping[str, Any], message: str, fixed_by: str) -> bool:
    """A pass-level queue message (Q1, Q2, Q3) exactly as the release's pass makes it - with every queue defect its
    form has (raw fill lengths: T3; no LoRA gate: T11; the budget read once; no abort scan to 0.4.6.post4; no
    retractable-token check to 0.4.7) - and not as the same pass makes it with ``fixed_by`` (``abort_scan``,
    ``retract_check``) fixed: the failure is that defect's."""
    fields = _pass_fields(message)
    case = kwargs["case"]
    if fields is None:
        return False
    field, got, expected = fields
    if not _pass_shows(_oracle(case), field, expected):
        return False  # not the failure of this pass against the oracle
    present = _defective_queue_pass(case, lora_gate=False, raw_fill=True, **{fixed_by: False})
    fixed = _defective_queue_pass(case, lora_gate=False, raw_fill=True, **{fixed_by: True})
    return _pass_shows(present, field, got) and not _pass_shows(fixed, field, got)


def _unpolled_failure(kwargs: Mapping[str, Any], form: str) -> bool:
    """A queue pass in which every queued receiver is ready and one the pass looks at has failed in ``form``
    (``QueuedRequest.receiver_failed``); from 0.5.13 (#25561) a receiver aborted by the client makes the pass poll."""
    from pdverify.model.queue import DecodeQueueCase

    case = kwargs.get("case")
    if not isinstance(case, DecodeQueueCase) or not all(r.bootstrapped for r in case.requests):
        return False
    if case.pp_consensus:  # the early return is a PP-less pass's (pp_size <= 1): a PP pass takes the consensus
        return False
    if form == "peer" and not _release_before("0.5.13") and any(r.receiver_failed == "abort" for r in case.requests):
        return False
    return any(r.receiver_failed == form and case.looked_at(i) for i, r in enumerate(case.requests))


def _t23_shows(kwargs: Mapping[str, Any]) -> bool:
    """A pass with every queued receiver ready and one the client's abort aborted (T23)."""
    return _unpolled_failure(kwargs, "abort")


def _t24_shows(kwargs: Mapping[str, Any]) -> bool:
    """A pass with every queued receiver ready and one whose failure prefill reported (T24)."""
    return _unpolled_failure(kwargs, "peer")


def _pass_variants(kwargs: Mapping[str, Any], message: str) -> tuple[tuple[str, list[int]], list[Any]] | None:
    """A pass-level queue message (``<what> <got>, expected <want>``) as the field it names and what the release gave
    there, with the cases an explanation replays: the case, and to 0.5.11 the case without priority order too (T17: no
    priority sort in the pass). None for another message."""
    from dataclasses import replace

    shown = _pass_message(message)
    if shown is None:
        return None
    case = kwargs["case"]
    return shown, [case, replace(case, priority_order=None)] if _release_before("0.5.12") else [case]


def _unpolled_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """Q1, Q2, Q3 or Q5's message (``<what> <got>, expected <want>``) exactly as the pass that does not poll while
    every queued receiver is ready makes it - alone or with the release's other queue defects (raw fill lengths: T3;
    no LoRA gate: T11; arrival order: T17 on 0.5.11) - and not as the same pass with the polling makes it."""
    replayed = _pass_variants(kwargs, message)
    if replayed is None:
        return False
    shown, cases = replayed
    for variant in cases:
        for gate in (True, False):
            for raw in (False, True):
                kw: dict[str, Any] = {"lora_gate": gate, "raw_fill": raw}
                skipped = _defective_queue_pass(variant, skip_ready_polls=True, **kw)
                polled = _defective_queue_pass(variant, skip_ready_polls=False, **kw)
                if _pass_shows(skipped, *shown) and not _pass_shows(polled, *shown):
                    return True
    return False


def _t33_shows(kwargs: Mapping[str, Any]) -> bool:
    """S25 with the stages agreed the request failed: a later stage's pass decides it by its own sender's poll -
    ready, it finalises it; late, it keeps it queued."""
    return kwargs.get("consensus") == "bad" and isinstance(kwargs.get("case"), PrefillCase)


def _t33_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """S25's message exactly as a stage whose own poll decides a request the stages agreed failed gives it: not
    dropped. The agreement lists the request failed once (the first stage drops it then, and no agreement names it
    again): a stage whose own sender is ready and whose metadata buffer is free bootstraps it and ships it; one whose
    buffer is still held, or whose sender is late (still bootstrapping), keeps it queued through every step the
    driver runs, shipping nothing."""
    waits, late = kwargs.get("waits"), kwargs.get("late", False)
    if not _t33_shows(kwargs) or not isinstance(waits, int) or not isinstance(late, bool):
        return False
    own = "late" if late else "ready"
    head = f"a request the PP stages agreed failed was not failed on this stage (its own sender {own}): "
    first_line = message.split("\n", 1)[0]  # pytest's assertion rewriting may append the failed expression below it
    if waits == 0 and not late:
        return first_line.startswith(f"{head}dropped False, bootstraps [True], shipped [(")
    return first_line == f"{head}dropped False, bootstraps {[False] * (waits + int(late) + 1)}, shipped []"


def _t34_shows(kwargs: Mapping[str, Any]) -> bool:
    """S25 with this stage's own sender late: the first stage popped the request (ready or failed) while this
    stage's sender still bootstraps."""
    return kwargs.get("late") is True and isinstance(kwargs.get("case"), PrefillCase)


def _t34_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """The release's own assert in ``pop_bootstrapped`` (``poll == WaitingForInput or poll == Failed`` for every rid
    the first stage popped), raised by the stage's bootstrap step."""
    return _t34_shows(kwargs) and bool(
        re.fullmatch(
            r"the PP stage's bootstrap step raised AssertionError at prefill\.py:\d+ "
            r"`assert poll == KVPoll\.WaitingForInput or poll == KVPoll\.Failed`",
            message,
        )
    )


def _pp_step_before_consensus(case: Any) -> Any:
    """What a PP decode stage's pre-allocation step made of the stages' consensus to 0.5.16 (before #31869): a pass
    given ``rids_to_check`` = good + bad that polls the stage's own receivers - a good-listed request's receiver
    ready unless it failed since (the consensus is the stages' ready polls), a bad-listed one's as it is."""
    from dataclasses import replace

    reqs = tuple(
        replace(r, checked=r.consensus is not None, bootstrapped=case.ready(i), consensus=None)
        for i, r in enumerate(case.requests)
    )
    return replace(case, requests=reqs, pp_consensus=False, restrict=True, microbatch_loras=())


def _t32_shows(kwargs: Mapping[str, Any]) -> bool:
    """A PP stage's step given a consensus this stage's own receivers may not follow: a bad-listed request (failed
    on some stage, or this stage's poll of it skipped) or a good-listed one whose receiver here failed since."""
    from pdverify.model.queue import DecodeQueueCase

    case = kwargs.get("case")
    if not isinstance(case, DecodeQueueCase) or not case.pp_consensus:
        return False
    return any(r.consensus == "bad" or (r.consensus == "good" and r.receiver_failed) for r in case.requests)


def _t32_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """Q1, Q2, Q3 or Q5's message (``<what> <got>, expected <want>``) exactly as the step makes it that hands the pass
    the consensus as ``rids_to_check`` (the stage's own polls decide: ``_pp_step_before_consensus``) - alone or with
    the release's other queue defects (the skipped polls of T23/T24, raw fill lengths: T3, no LoRA gate: T11,
    arrival order: T17 on 0.5.11, raw SWA-tail charges: T14 on 0.5.12-0.5.16) - and not as the same pass given the
    consensus makes it."""
    from pdverify.properties.releases import DOMAIN

    replayed = _pass_variants(kwargs, message)
    if replayed is None:
        return False
    shown, cases = replayed
    raw_swas = (False, True) if DOMAIN.release in T14_RELEASES else (False,)
    for variant in cases:
        step = _pp_step_before_consensus(variant)
        for kw in (
            {"skip_ready_polls": skip, "lora_gate": gate, "raw_fill": raw, "raw_swa": raw_swa}
            for skip in (False, True)
            for gate in (True, False)
            for raw in (False, True)
            for raw_swa in raw_swas
        ):
            own, agreed = _defective_queue_pass(step, **kw), _defective_queue_pass(variant, **kw)
            if _pass_shows(own, *shown) and not _pass_shows(agreed, *shown):
                return True
    return False


def _t18_shows(kwargs: Mapping[str, Any]) -> bool:
    """A queue pass with an aborted request it looks at."""
    from pdverify.model.queue import DecodeQueueCase

    case = kwargs.get("case")
    if not isinstance(case, DecodeQueueCase):
        return False
    return any(r.aborted and case.looked_at(i) for i, r in enumerate(case.requests))


def _t18_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """The pass without the abort scan: aborted requests are admitted like live ones, none fails or is streamed."""
    return _queue_defect_explains(kwargs, message, "abort_scan")


def _t19_shows(kwargs: Mapping[str, Any]) -> bool:
    """A queue pass with a request whose room to finish (what prefill sends + its new tokens - the running requests'
    retractable tokens) needs more than its pages and headroom: only there does the missing check change admission."""
    from pdverify.model.queue import CLIP_MAX_NEW_TOKENS, DecodeQueueCase

    case = kwargs.get("case")
    if not isinstance(case, DecodeQueueCase):
        return False
    ps = case.page_size
    return any(
        r.prefill_len + min(r.max_new_tokens, CLIP_MAX_NEW_TOKENS) - case.retractable_tokens
        > -(-r.fill_len // ps) * ps + case.reserved_decode_tokens
        for r in case.requests
    )


def _t19_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """The pass without the check that a request can finish with the running requests retracted."""
    return _queue_defect_explains(kwargs, message, "retract_check")


def _s19_case(kwargs: Mapping[str, Any]) -> Any:
    """S19's effective case: the drawn one with its settings (and the default attention DP) applied, as the property
    builds it."""
    from dataclasses import replace

    case, settings = kwargs.get("case"), kwargs.get("settings") or {}
    if not isinstance(case, PrefillCase):
        return None
    case = replace(case, **{**settings, "deferred_room": None})
    return case if case.attention_dp is not None else replace(case, attention_dp=(2, 0, "query", False))


def _t13_shows(kwargs: Mapping[str, Any]) -> bool:
    """S19 with a request the router placed on a DP rank (``disagg_prefill_dp_rank``): the sender is not told."""
    case = _s19_case(kwargs)
    return case is not None and case.attention_dp[3]


def _t13_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """S19's message exactly as a sender that treats a placed request as unplaced gives it: in query mode the
    registration of its own rank (nothing expected), following the room a failure where its rank is not room % DP."""
    case = _s19_case(kwargs)
    ranks, rank, method, placed = case.attention_dp
    if not placed:
        return False
    if method == "query":
        return message.startswith(f"registered [({case.bootstrap_room}, {rank})], expected []")
    return rank != case.bootstrap_room % ranks and message.startswith("statuses ") and "must not fail" in message


def _s17_split(kwargs: Mapping[str, Any]) -> tuple[Any, str, int] | None:
    """S17's drawn case and rank split, as the property takes them."""
    case, split = kwargs.get("case"), kwargs.get("split")
    if not isinstance(case, PrefillCase) or split is None:
        return None
    return case, split[0], split[1]


def _scattered(case: PrefillCase) -> bool:
    """Whether the request's pages after ``D`` are not one ascending run of page ids: the layout on which a filter by
    global page id (which assumes ``[first_page, first_page + total_pages)``) and one by position disagree."""
    from pdverify.oracle.prefill_exchange import main_pages

    pages = main_pages(case)
    return pages != list(range(pages[0], pages[0] + len(pages))) if pages else False


def _t20_shows(kwargs: Mapping[str, Any]) -> bool:
    """All CP ranks sharing the transfer of a request whose pages are scattered (the pool's usual state)."""
    got = _s17_split(kwargs)
    return got is not None and got[1] == "cp_all" and _scattered(got[0])


_T20_MESSAGES = ("rank ", "position ", "positions sent ", "CP shares out of rank order")


def _t20_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """S17's partition messages (a rank's share not contiguous, a position sent twice or never, shares out of order)
    for all CP ranks over scattered pages: each rank keeps the pages whose *ids* fall in its share of
    ``[first page id, first + total)``, so on scattered pages the shares overlap and leave gaps."""
    return _t20_shows(kwargs) and message.startswith(_T20_MESSAGES) and "belongs to rank" not in message


def _t21_shows(kwargs: Mapping[str, Any]) -> bool:
    """S19 with the load balancer following the bootstrap room and an unplaced request on a rank other than room %
    DP (a request routed to a DP rank, ``routed_dp_rank``)."""
    case = _s19_case(kwargs)
    if case is None:
        return False
    ranks, rank, method, placed = case.attention_dp
    return method == "follow_room" and not placed and rank != case.bootstrap_room % ranks


def _t21_explains(kwargs: Mapping[str, Any], message: str) -> bool:
    """S19's 'must fail' message where the sender lets such a request through (no follow-room conflict check)."""
    return _t21_shows(kwargs) and message.startswith("statuses ") and "must fail" in message


QUEUE_READ_ONCE = ("0.4.7.post1", "0.4.8", "0.4.8.post1", "0.4.9", "0.4.9.post1", "0.4.9.post2", "0.4.9.post3",
                   "0.4.9.post4", "0.4.9.post5", "0.4.9.post6", "0.4.10", "0.4.10.post1", "0.4.10.post2", "0.5.1",
                   "0.5.1.post1", "0.5.1.post2", "0.5.1.post3", "0.5.2", "0.5.3", "0.5.3.post1", "0.5.3.post2",
                   "0.5.3.post3", "0.5.4", "0.5.4.post1", "0.5.4.post2", "0.5.4.post3", "0.5.5", "0.5.5.post1",
                   "0.5.5.post2", "0.5.5.post3", "0.5.6", "0.5.6.post1", "0.5.6.post2", "0.5.7", "0.5.8",
                   "0.5.8.post1", "0.5.9", "0.5.10", "0.5.10.post1")  # fmt: skip
"""The releases the queue driver reaches before 0.5.11 (from 0.4.7.post1), whose pass reads its budget once (no decode
prefix): T3, T11 and T16 were already present there, T17 from 0.5.3 (priority scheduling), T15 from 0.5.10 (the
staging buffer)."""

QUEUE_NO_RETRACT = ("0.4.4.post2", "0.4.4.post3", "0.4.4.post4", "0.4.5", "0.4.5.post1", "0.4.5.post2",
                    "0.4.5.post3", "0.4.6", "0.4.6.post1", "0.4.6.post2", "0.4.6.post3", "0.4.6.post4", "0.4.6.post5",
                    "0.4.7")  # fmt: skip
"""The releases the queue driver reaches before 0.4.7.post1: no check that a running request can still finish (T19),
and to 0.4.6.post4 no abort scan (T18); T3, T11 and T16 (from 0.4.6.post5) already there too."""

T3_LATE = ("0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21")
"""T3's releases past ``QUEUE_EARLY`` (fixed in 0.5.22)."""

QUEUE_EARLY = ("0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1",
               "0.5.16")  # fmt: skip
"""The releases the queue driver reaches before 0.5.17 (from 0.5.11, the first with a decode prefix): where T3 and T11
were already present (T14 from 0.5.12, with SWA-tail pre-allocation) and the staging room was registered after the
metadata (T15)."""

T29_MOONCAKE = ("0.4.6.post5", "0.4.7", "0.4.7.post1", "0.4.8")
"""PD logprobs (#6558) with Mooncake's aux transfer of the first metadata buffer only, to 0.4.8 (#7516)."""
T29_RELEASES = (
    *T29_MOONCAKE,
    *("0.4.8.post1", "0.4.9", "0.4.9.post1", "0.4.9.post2", "0.4.9.post3", "0.4.9.post4", "0.4.9.post5", "0.4.9.post6"),
    *("0.4.10", "0.4.10.post1", "0.4.10.post2", "0.5.1", "0.5.1.post1", "0.5.1.post2", "0.5.1.post3", "0.5.2", "0.5.3"),
)
"""With NIXL's aux transfer of the first metadata buffer only, to 0.5.3 (#11375)."""
F11_RELEASES = (
    *("0.5.7", "0.5.8", "0.5.8.post1", "0.5.9", "0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1"),
    *("0.5.13", "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19"),
    *("0.5.20", "0.5.21", "0.5.22", "0.5.23"),
)
"""F11's releases: every release with the decode PP event loop (#14945, 0.5.7) - none fixes it."""
F8_RELEASES = (
    *("0.5.9", "0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14"),
    *("0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"),
)
"""The releases with #17430's room check (0.5.9 on; none fixes it yet)."""
T3_RELEASES = (*QUEUE_NO_RETRACT[QUEUE_NO_RETRACT.index("0.4.5.post2") :], *QUEUE_READ_ONCE, *QUEUE_EARLY, *T3_LATE)
"""T3's releases: from 0.4.5.post2, paged allocation's first (#5561: the first page size above 1), to 0.5.21."""


def _unpolled_failure_defect(
    fid: str, releases: tuple[str, ...], what: str, shows: Callable[[Mapping[str, Any]], bool]
) -> KnownDefect:
    """T23 or T24: decode's pre-allocation does not poll its KV receivers while every queued one is ready, and a failed
    receiver's request (``what``) goes on as a live one; Q1 sees it not failed, Q2 admitted, Q3 left queued, Q5 (with
    the decode radix cache, from 0.5.11) take a row a request with a locked prefix needed."""
    return KnownDefect(
        fid,
        "Q1",
        "sglang",
        releases,
        f"decode's pre-allocation does not poll its KV receivers while every queued one is ready: {what}",
        shows,
        _unpolled_explains,
        also=("Q2", "Q3", "Q5"),
        narrower=(("Q5", releases[releases.index("0.5.11") :]),),
    )


QUEUE_RELEASES = (*QUEUE_NO_RETRACT, *QUEUE_READ_ONCE, *QUEUE_EARLY, "0.5.17", "0.5.18", "0.5.19")
"""Every release the queue driver reaches to 0.5.19, oldest first."""

T24_RELEASES = QUEUE_RELEASES[QUEUE_RELEASES.index("0.4.6.post5") :]
"""T24's releases: from 0.4.6.post5 (a failed receiver aborts its request, #6504) to 0.5.19 (fixed in 0.5.20)."""

T23_RELEASES = QUEUE_RELEASES[QUEUE_RELEASES.index("0.4.9.post5") : QUEUE_RELEASES.index("0.5.13")]
"""T23's releases: from 0.4.9.post5 (the abort handler aborts a queued request's receiver) to 0.5.12.post1."""

T14_RELEASES = (*QUEUE_EARLY[QUEUE_EARLY.index("0.5.12") :], "0.5.17")
"""T14's releases: from 0.5.12 (SWA-tail pre-allocation, #24857) to 0.5.17 (fixed in 0.5.18, upstream #33794)."""

T32_RELEASES = (*QUEUE_READ_ONCE[QUEUE_READ_ONCE.index("0.5.7") :], *QUEUE_EARLY)
"""T32's releases: from 0.5.7 (the decode PP event loop, #14945) to 0.5.16 (fixed in 0.5.17, upstream #31869)."""

T25_RELEASES = (*QUEUE_NO_RETRACT, *QUEUE_READ_ONCE, *QUEUE_EARLY)
"""T25's releases: every release to 0.5.16 (fixed in 0.5.17, upstream #31973)."""

T33_RELEASES = T25_RELEASES[T25_RELEASES.index("0.5.1") :]
"""T33's releases: from 0.5.1 (the prefill PP event loop, #8846) to 0.5.16 (fixed in 0.5.17, upstream #31869)."""

T34_RELEASES = T33_RELEASES[: T33_RELEASES.index("0.5.7")]
"""T34's releases: from 0.5.1 (the prefill PP event loop, #8846) to 0.5.6.post2 (0.5.7's asynchronous PP loop, upstream
#11852, dropped the assert: each stage's own poll joins the bootstrap consensus)."""

T27_RELEASES = T25_RELEASES[: T25_RELEASES.index("0.5.14")]
"""T27's releases: every release to 0.5.13.post1 (0.5.14's ``SamplingParams.normalize`` refuses ``min_new_tokens``
without a tokenizer, upstream #27882)."""

T28_RELEASES = (*T25_RELEASES, "0.5.17", "0.5.18")
"""T28's releases: every release to 0.5.18 (0.5.19's penalizer holds the request's eos ids back too, upstream
#31378)."""

T26_RELEASES = (*QUEUE_RELEASES[QUEUE_RELEASES.index("0.5.3") :], "0.5.20")
"""T26's releases: from 0.5.3 (deterministic inference and the sampling seed, #10645/#10678) to 0.5.20 (0.5.21's
``SamplingParams.verify`` refuses a seed outside a signed 64-bit integer)."""

F7_RELEASES = (*T28_RELEASES, "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
"""F7's releases: every release (no release's ``SamplingParams.verify`` checks ``stop_token_ids`` against the
vocabulary; upstream #27398 and #31561, which proposed it, were closed unmerged)."""
F9_RELEASES = F7_RELEASES[F7_RELEASES.index("0.4.6.post5") :]
"""PD logprobs (#6558, 0.4.6.post5) on: no release bounds ``top_logprobs_num`` by the metadata row's 128."""
T30_RELEASES = F7_RELEASES[F7_RELEASES.index("0.4.6.post5") : F7_RELEASES.index("0.5.23")]
"""PD logprobs (#6558, 0.4.6.post5) to 0.5.22: 0.5.23's commit reserves the first token's token-ids row."""
F10_RELEASES = F7_RELEASES[F7_RELEASES.index("0.4.5.post3") :]
"""A batch's requests carry their bootstrap fields (#5531, 0.4.5.post3) on: no release gives parallel samples rooms
of their own (upstream #24223, #26486, #30723 and #40297, which proposed it, were closed unmerged)."""
T31_RELEASES = ("0.4.5.post1", "0.4.5.post2")
"""The first releases with a bootstrap room, before #5531 (0.4.5.post3) handed a batch's requests their fields."""

PREBUILT_OBSERVERS = ("P20", "P21", "P21b", "P23", "P24", "P25", "P26", "P27", "P29", "P30")
"""The prebuilt properties besides P19 that run a drawn batch through ``prepare_for_prebuilt`` to 0.5.17 (P22,
P22b, P28 and B3 hold #35070's contract, from 0.5.18): each sees a crash of its sampling info."""

PREBUILT_35070 = ("P22", "P22b", "P28", "B3")
"""The prebuilt properties of #35070's contract (from 0.5.18): they see T26 on 0.5.18-0.5.20."""


def _sampling_info_crash(releases: tuple[str, ...]) -> dict[str, Any]:
    """``also`` and ``narrower`` of a defect that crashes the sampling info ``prepare_for_prebuilt`` builds, found by
    P19 on ``releases`` (oldest first): every other prebuilt property sees the crash too - P24 from 0.5.6 (its
    contract, the retracted stain), and #35070's properties from 0.5.18 where ``releases`` reach it."""
    late = releases[releases.index("0.5.18") :] if "0.5.18" in releases else ()
    return {
        "also": (*PREBUILT_OBSERVERS, *(PREBUILT_35070 if late else ())),
        "narrower": (("P24", releases[releases.index("0.5.6") :]), *((pid, late) for pid in PREBUILT_35070 if late)),
    }


T5_RELEASES = ("0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1",
               "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22")  # fmt: skip

KNOWN: dict[str, KnownDefect] = {
    d.id: d
    for d in (
        KnownDefect(
            "T1",
            "P19",
            "sglang",
            ("0.5.11",),
            "prepare_for_prebuilt slices out_cache_loc from the row's start while decode holds a cached prefix "
            "(fixed in 0.5.12, upstream #24230)",
            _t1_shows,
            _t1_explains,
        ),
        KnownDefect(
            "T25",
            "P19",
            "sglang",
            T25_RELEASES,
            "a request that asks for min_new_tokens on a server whose tokenizer has no end-of-sequence token: the "
            "min_new_tokens penalizer puts the tokenizer's None eos into its int64 stop-token tensor, "
            "SamplingBatchInfo.from_schedule_batch raises TypeError and the decode scheduler's PREBUILT batch - and "
            "the scheduler - dies (fixed in 0.5.17, upstream #31973)",
            _t25_shows,
            _t25_explains,
            **_sampling_info_crash(T25_RELEASES),
        ),
        KnownDefect(
            "T27",
            "P19",
            "sglang",
            T27_RELEASES,
            "a request that asks for min_new_tokens on a server started with --skip-tokenizer-init: the decode "
            "scheduler hands the request no tokenizer (None), the min_new_tokens penalizer reads its stop tokens, "
            "SamplingBatchInfo.from_schedule_batch raises AttributeError and the decode scheduler's PREBUILT batch - "
            "and the scheduler - dies (fixed in 0.5.14, whose SamplingParams.normalize refuses such a request, "
            "upstream #27882)",
            _t27_shows,
            _t27_explains,
            **_sampling_info_crash(T27_RELEASES),
        ),
        KnownDefect(
            "T29",
            "Q7",
            "sglang",
            T29_RELEASES,
            "a PD request that asks for logprobs gets a first-token logprob of 0.0 for token id 0 from decode, and "
            "from 0.5.3 every request reports 0 cached tokens: the KV transport's send_aux copies only the first "
            "registered metadata buffer (the output ids), so the logprob and cached-token buffers MetadataBuffers "
            "registers (#6558, #10192) never reach decode, which reads its own cleared rows (Mooncake's fixed in "
            "0.4.8.post1 by #7516, NIXL's in 0.5.3.post1 by #11375)",
            _t29_shows,
            _t29_explains,
        ),
        KnownDefect(
            "F9",
            "Q8",
            "sglang",
            F9_RELEASES,
            "a request asking for more top logprobs than decode's metadata row holds (top_logprobs_num > 128, e.g. "
            "OpenAI top_logprobs=200): the PD server admits it - no release bounds the count - and when its KV "
            "transfer completes prefill's MetadataBuffers.set_buf raises (0.5.16 on: 'exceeds disaggregation metadata "
            "capacity'; before, a tensor size mismatch) inside the prefill scheduler's loop, which nothing catches: "
            "the prefill server dies with every request in flight (SGLang's own 'TODO: abort top_logprobs_num > 128 "
            "in PD'; not fixed, upstream #30894 open)",
            _f9_shows,
            _f9_explains,
        ),
        KnownDefect(
            "F10",
            "Q9",
            "sglang",
            F10_RELEASES,
            "a PD generate call asking for n > 1 parallel samples (e.g. an OpenAI chat completion with n=4): the "
            "tokenizer manager sends every sample of a prompt - and its prefix-caching warm-up - as a copy of the "
            "prompt's first expanded request, so all of them carry one bootstrap room, although the request's own "
            "normalisation gives each expanded request a room of its own (room + k, 0.5.2 on); prefill and decode "
            "meet one transfer per room, so the other samples wait out their bootstrap timeout or their KV and "
            "metadata rows cross (not fixed: upstream #24223, #26486, #30723 and #40297 were closed unmerged)",
            _f10_shows,
            _f10_explains,
        ),
        KnownDefect(
            "T31",
            "Q9",
            "sglang",
            T31_RELEASES,
            "a PD generate call the server expands into several requests (a batch of prompts, or n > 1 samples): "
            "GenerateReqInput.__getitem__ hands each request no bootstrap host, port or room, so each reaches the "
            "scheduler with bootstrap_room None and names no KV transfer (fixed in 0.4.5.post3 by upstream #5531, "
            "'[PD] Fix server crash when using batch requests')",
            _t31_shows,
            _t31_explains,
        ),
        KnownDefect(
            "T30",
            "Q7",
            "sglang",
            T30_RELEASES,
            "a PD request that asks for logprobs and names token ids (token_ids_logprob): decode's commit of the "
            "first token appends its row to the token and top logprob lists but none to the token-ids logprob lists, "
            "which the output streamer slices with the same offset - so every streamed token-ids row belongs to the "
            "next token, and the last token gets none (fixed in 0.5.23, whose _commit_transfer_to_req reserves an "
            "empty row: 'reserve a row for the streaming offset')",
            _t30_shows,
            _t30_explains,
        ),
        KnownDefect(
            "T28",
            "P27",
            "sglang",
            T28_RELEASES,
            "a request that asks for min_new_tokens, on a model whose configuration names end-of-sequence ids the "
            "tokenizer's eos is not (Llama-3.1-Instruct's generation config: three): the min_new_tokens penalizer "
            "holds back the request's stop tokens and the tokenizer's eos but not the model's eos ids "
            "(req.eos_token_ids), on which finish detection ends the request - it can end before its minimum "
            "(fixed in 0.5.19, upstream #31378)",
            _t28_shows,
            _t28_explains,
        ),
        KnownDefect(
            "T26",
            "P19",
            "sglang",
            T26_RELEASES,
            "with --enable-deterministic-inference, a request whose sampling seed the scheduler's seed tensor cannot "
            "hold (past 32 bits to 0.5.6, past 64 bits to 0.5.20, or a string; the native API passes any value and "
            "verify checks neither type nor range): SamplingBatchInfo.from_schedule_batch raises and the decode "
            "scheduler dies (fixed in 0.5.21, whose SamplingParams.verify refuses a seed that is not an integer in a "
            "signed 64-bit range)",
            _t26_shows,
            _t26_explains,
            **_sampling_info_crash(T26_RELEASES),
        ),
        KnownDefect(
            "F7",
            "P19",
            "sglang",
            F7_RELEASES,
            "a request whose stop_token_ids name an id outside the vocabulary (a client's stop ids for another "
            "model, e.g. Qwen's <|im_end|> 151645 sent to a DeepSeek decode server of vocabulary 129280), in a batch "
            "with a request that asks for min_new_tokens: SamplingParams.verify checks logit_bias against the "
            "vocabulary but not stop_token_ids, the min_new_tokens penalizer scatters every request's stop ids into "
            "its (n, vocab_size + 1) table, SamplingBatchInfo.from_schedule_batch raises (on a GPU a device-side "
            "assert) and the decode scheduler - every request on it - dies",
            _f7_shows,
            _f7_explains,
            **_sampling_info_crash(F7_RELEASES),
        ),
        KnownDefect(
            "T2",
            "P23",
            "sglang",
            ("0.5.11", "0.5.12", "0.5.12.post1"),
            "prepare_for_prebuilt leaves cached_tokens_device where it was when decode's radix cache supplies a "
            "prefix: the device hit is not counted (fixed in 0.5.13, upstream #25973)",
            _t2_shows,
            _t2_explains,
        ),
        KnownDefect(
            "T4",
            "P26",
            "sglang",
            T4_RELEASES,
            "prepare_for_prebuilt_extend never sets batch.multimodal_inputs: a vision-language model's decode batch "
            "fails (fixed in 0.4.10.post2, upstream #8094)",
            _t4_shows,
            _t4_explains,
        ),
        KnownDefect(
            "T3",
            "Q4",
            "sglang",
            T3_RELEASES,
            "decode's pre-allocation admits a request (radix cache off, or rebootstrapped) against the token budget "
            "by its fill length, while the allocator takes whole pages: a pass allocates past the budget (fixed in "
            "0.5.22)",
            _t3_shows,
            _t3_explains,
            also=("Q3", "Q2", "Q1"),
            explains_also=_t3_overadmits,
            # Q1 where the request admitted past the budget then finds no SWA pages for its tail and fails (503)
            # instead of waiting: a rebootstrapped request (the raw-length path) on a hybrid SWA pool with the decode
            # radix cache, whose SWA budget counts the tree's evictable pages - accepted from 0.5.19 (#27770)
            narrower=(("Q1", T3_LATE[T3_LATE.index("0.5.19") :]),),
        ),
        KnownDefect(
            "T11",
            "Q2",
            "sglang",
            (*QUEUE_NO_RETRACT, *QUEUE_READ_ONCE, *QUEUE_EARLY, "0.5.17", "0.5.18", "0.5.19"),
            "decode's pre-allocation admits requests whatever their LoRA adapters: a batch can need more adapters "
            "than --max-loras-per-batch, and the forward's fetch_new_loras asserts (fixed in 0.5.20, upstream "
            "#39332)",
            _t11_shows,
            _t11_explains,
            also=("Q1", "Q3", "Q5"),
            # Q5 sees it where the pass admits a request past the limit instead of a later one with a prefix (its
            # lock): with the decode radix cache, 0.5.11 on. Q1 where the request admitted past the limit finds no
            # SWA pages for its tail and fails (or takes the last ones a later request needed): 0.5.19's SWA-tail
            # reclaim, the first release that fails such a request rather than asserting (the ci draws meet it with a
            # PP stage's other microbatch holding the adapter)
            narrower=(("Q5", (*QUEUE_EARLY, "0.5.17", "0.5.18", "0.5.19")), ("Q1", ("0.5.19",))),
        ),
        KnownDefect(
            "T14",
            "Q2",
            "sglang",
            T14_RELEASES,  # SWA-tail pre-allocation (#24857)
            "decode's pre-allocation charges a hybrid SWA request its raw SWA tail against the SWA budget while the "
            "allocator takes whole pages: a pass admits more tails than the SWA pool holds, and _pre_alloc asserts "
            "'KV cache is full' (fixed in 0.5.18, upstream #33794)",
            _t14_shows,
            _t14_explains,
            also=("Q1", "Q3", "Q4", "Q5", "Q6"),
        ),
        KnownDefect(
            "T17",
            "Q2",
            "sglang",
            (*QUEUE_READ_ONCE[QUEUE_READ_ONCE.index("0.5.3") :], "0.5.11"),  # priority scheduling (#8746)
            "with --enable-priority-scheduling, decode's pre-allocation ignores the requests' priorities: it fails, "
            "admits and keeps them in arrival order, so a high-priority request waits behind lower ones for decode "
            "memory (fixed in 0.5.12, upstream #25062)",
            _t17_shows,
            _t17_explains,
            also=("Q1", "Q3", "Q5"),
            narrower=(("Q5", ("0.5.11",)),),  # Q5 is about radix locks: no decode radix cache before 0.5.11
        ),
        KnownDefect(
            "T18",
            "Q1",
            "sglang",
            QUEUE_NO_RETRACT[: QUEUE_NO_RETRACT.index("0.4.6.post5")],
            "decode's pre-allocation has no scan for aborted requests: a request aborted while queued (a prompt too "
            "long, a bad logprob start, an unknown session - the scheduler aborts and still queues it) is "
            "pre-allocated and transferred like a live one, and its slot and KV pages are never freed (fixed in "
            "0.4.6.post5, upstream #6535 and #6558)",
            _t18_shows,
            _t18_explains,
            also=("Q2", "Q3"),
        ),
        KnownDefect(
            "T19",
            "Q3",
            "sglang",
            QUEUE_NO_RETRACT,
            "decode's pre-allocation admits a request without checking that it can finish with the running requests "
            "retracted (what prefill sends + its new tokens - their retractable tokens): a running request can run "
            "out of memory while the admitted ones sit in the transfer queue, which cannot be retracted (fixed in "
            "0.4.7.post1, upstream #7196)",
            _t19_shows,
            _t19_explains,
            also=("Q2",),
        ),
        KnownDefect(
            "T16",
            "Q1",
            "sglang",
            ("0.4.6.post5", "0.4.7", *QUEUE_READ_ONCE, *QUEUE_EARLY[: QUEUE_EARLY.index("0.5.14")]),  # the abort scan
            "decode's pre-allocation fails a request aborted while queued without clearing its KV receiver: the "
            "receiver's per-room state (request status, transfer infos) stays behind for every such abort (fixed in "
            "0.5.14, upstream #28022)",
            _t16_shows,
            _t16_explains,
        ),
        _unpolled_failure_defect(
            "T23",
            T23_RELEASES,
            "a request the client aborted while queued (the abort handler aborts its receiver) is not failed - it is "
            "pre-allocated and its destinations published like a live one, or, with KV allocation blocked, it stays "
            "queued and its abort waits until the transfer (fixed in 0.5.13, upstream #25561)",
            _t23_shows,
        ),
        _unpolled_failure_defect(
            "T24",
            T24_RELEASES,
            "(from 0.5.13: and none has been aborted) a request whose transfer prefill reported failed is not failed "
            "- it is pre-allocated and its destinations published to the failed peer, or, with KV allocation "
            "blocked, it stays queued, until the transfer phase rejects it (fixed in 0.5.20, upstream #37483)",
            _t24_shows,
        ),
        KnownDefect(
            "T32",
            "Q1",
            "sglang",
            T32_RELEASES,
            "a pipeline-parallel decode stage's pre-allocation step hands the pass the stages' consensus as "
            "rids_to_check (good + bad) and the pass polls the stage's own receivers again: a request another stage "
            "failed is pre-allocated here, one this stage saw fail after the stages agreed is failed here while the "
            "others take it, and one the pass does not poll stays queued - the stages diverge (fixed in 0.5.17, "
            "upstream #31869)",
            _t32_shows,
            _t32_explains,
            also=("Q2", "Q3", "Q5"),
            narrower=(("Q5", QUEUE_EARLY),),
        ),
        KnownDefect(
            "T33",
            "S25",
            "sglang",
            T33_RELEASES,
            "a later stage of a pipeline-parallel prefill server bootstraps a request by its own sender's poll, not "
            "by what the stages agreed: its PP loop hands the pass the agreed rids as rids_to_check - to 0.5.6.post2 "
            "every rid the first stage popped, bootstrapped or failed alike; from 0.5.7 the consensus good + bad - so "
            "a request another stage failed is bootstrapped and prefilled here while the others drop it, and the "
            "stages' batches diverge; one whose sender here still bootstraps is kept here, and no agreement names it "
            "again (fixed in 0.5.17, upstream #31869)",
            _t33_shows,
            _t33_explains,
        ),
        KnownDefect(
            "T34",
            "S25",
            "sglang",
            T34_RELEASES,
            "a later stage of a pipeline-parallel prefill server asserts that its own KV sender has finished "
            "bootstrapping (WaitingForInput or Failed) for every request the first stage popped: the PP loop hands "
            "it the first stage's rids as rids_to_check, and each stage's sender bootstraps with decode on its own, "
            "so a sender that decode's destinations reach after the first stage's takes the stage down "
            "(AssertionError in pop_bootstrapped; gone in 0.5.7, whose consensus takes every stage's own poll, "
            "upstream #11852)",
            _t34_shows,
            _t34_explains,
        ),
        KnownDefect(
            "T15",
            "Q6",
            "sglang",
            ("0.5.10", "0.5.10.post1", *QUEUE_EARLY),  # the staging buffer came in 0.5.10 (#19890)
            "with the staging buffer on, decode registers a request's staging room after sending its metadata: "
            "prefill's STAGING_REQ prefetch, which the metadata triggers, is dropped for a room not yet registered, "
            "and the chunk's transfer waits for a staging slot that never comes (fixed in 0.5.17, upstream #31217)",
            _t15_shows,
            _t15_explains,
        ),
        KnownDefect(
            "T13",
            "S19",
            "sglang",
            (
                "0.5.10",
                "0.5.10.post1",
                "0.5.11",
                "0.5.12",
                "0.5.12.post1",
                "0.5.13",
                "0.5.13.post1",
                "0.5.14",
                "0.5.15",
                "0.5.15.post1",
            ),
            "a request the router placed on a prefill DP rank (disagg_prefill_dp_rank) is handled as an unplaced one: "
            "when the load balancer follows the bootstrap room, prefill aborts it unless its rank is room % DP (from "
            "0.5.11, #22901); in "
            "query mode it registers its rank, which decode never asks for (fixed in 0.5.16, upstream #27546)",
            _t13_shows,
            _t13_explains,
        ),
        KnownDefect(
            "T20",
            "S17",
            "sglang",
            ("0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1"),
            "with all attention-CP ranks sharing the transfer (SGLANG_DISAGGREGATION_ALL_CP_RANKS_TRANSFER), each rank "
            "keeps the pages whose ids fall in its share of [first page id, first + pages of the send): on a request's "
            "scattered pages the ranks' shares overlap and leave gaps - decode's pages for the gaps never receive KV "
            "(fixed in 0.5.14, upstream #28718)",
            _t20_shows,
            _t20_explains,
        ),
        KnownDefect(
            "T21",
            "S19",
            "sglang",
            ("0.5.10", "0.5.10.post1"),
            "with attention DP and --load-balance-method follow_bootstrap_room, a request routed to a prefill DP rank "
            "other than bootstrap_room % DP is neither failed nor registered, while decode takes room % DP as its "
            "prefill rank (fixed in 0.5.11, upstream #22901)",
            _t21_shows,
            _t21_explains,
        ),
        KnownDefect(
            "T12",
            "S12",
            "sglang",
            ("0.5.17",),
            "with the staging buffer on, prefill's send_kv_chunk ignores the staging grid: a non-final send ends on "
            "any page boundary and may span several slots, while decode's staging handler places each send by its "
            "start slot - KV lands in the wrong place or the request fails (fixed in 0.5.18, upstream #30545)",
            _t12_shows,
            _t12_explains,
        ),
        KnownDefect(
            "T9",
            "P10",
            "sglang",
            ("0.4.5.post2",),
            "the first paged PD transfer sends each chunk with its token slice as the destination in decode's page "
            "list and does not defer a non-last chunk's partial page (fixed in 0.4.5.post3, upstream #5589)",
            _t9_shows,
            _t9_explains,
            also=("P11", "P12", "S10", "S11", "S12", "X1"),
            explains_also=_t9_explains_also,
        ),
        KnownDefect(
            "T5",
            "P16",
            "sglang",
            T5_RELEASES,
            "the DSA and MiniMax index-K state lists go from position 0 on both sides: prefill writes its prefix's "
            "index pages into the pages decode's tree holds for that prefix (fixed in 0.5.23)",
            _t5_shows,
            _t5_explains,
            also=("P18", "P18p", "D1"),
            # decode's pre-allocation and prefill's exchange reach 0.5.11, the first release with a decode prefix (DSA
            # as the NSA pool's one payload there); P18p pairs the per-type lists, from 0.5.12 (#24932)
            narrower=(("P18p", T5_RELEASES[T5_RELEASES.index("0.5.12") :]),),
        ),
        KnownDefect(
            "T6",
            "S16",
            "sglang",
            ("0.5.21", "0.5.22"),
            "with the KV checksum on, both sides digest the request's pages from 0, the prefix decode held and prefill "
            "never sent included (fixed in 0.5.23)",
            _t6_shows,
            _t6_explains,
            also=("X2",),
            explains_also=_t6_explains_x2,
        ),
        KnownDefect(
            "T7",
            "S21",
            "sglang",
            ("0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22"),
            "prefill's early cached-prefix send goes out while a HiCache load-back of the same batch may still be "
            "writing those prefix pages: decode receives stale KV (fixed in 0.5.23, #44070)",
            _t7_shows,
            _t7_explains,
        ),
        KnownDefect(
            "T8",
            "S17",
            "sglang",
            ("0.5.22",),
            "a KV-sharded prefill rank (--enable-kv-cache-sharding, PD prefill only) sends every page of the request "
            "by its global id: the transfer ignores the sharding (fixed in 0.5.23)",
            _t8_shows,
            _t8_explains,
        ),
        KnownDefect(
            "T10",
            "S15",
            "sglang",
            ("0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21"),
            "under the overlap scheduler prefill's early cached-prefix send records the prior forward's CUDA event, "
            "but Mooncake's sender never passes it to the transfer (0.5.15 records none): the transfer may read prefix "
            "pages the in-flight forward is still writing (fixed in 0.5.22)",
            _t10_shows,
            _t10_explains,
        ),
        KnownDefect(
            "F1",
            "D1",
            "sglang",
            ("0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"),
            "decode's full-from-0 state lists name page 0 or a stale page for prefix positions whose HiCache restore "
            "is pending",
            _f1_shows,
            _f1_explains,
        ),
        KnownDefect(
            "F2",
            "S16",
            "sglang",
            ("0.5.21", "0.5.22", "0.5.23"),
            "the KV checksum digests the untranslated (virtual) page ids on a unified-memory pool",
            _f2_shows,
            _f2_explains,
        ),
        KnownDefect(
            "F3",
            "X2",
            "sglang",
            ("0.5.21", "0.5.22", "0.5.23"),
            "with the KV checksum on, decode verifies a PD-rebootstrapped request over its prompt alone while prefill "
            "recomputed, sent and digested prompt + kept outputs: a byte-exact transfer is rejected",
            _f3_shows,
            _f3_explains,
        ),
        KnownDefect(
            "F4",
            "X2",
            "sglang",
            ("0.5.21", "0.5.22", "0.5.23"),
            "with the KV checksum on, a pool that registers block scales for the transfer (--kv-cache-dtype mxfp8) "
            "gets no state indices for them: KvChecksumComputer.compute asserts and prefill's scheduler crashes on "
            "the first request",
            _f4_shows,
            _no_state_indices,
        ),
        KnownDefect(
            "F5",
            "X2",
            "sglang",
            ("0.5.21", "0.5.22", "0.5.23"),
            "with the KV checksum on, a hybrid SWA pool with block scales (--kv-cache-dtype mxfp8) digests every state "
            "type at the SWA window's pages: the full-attention layers' block scales are read at SWA page ids, so "
            "decode rejects byte-exact transfers (or accepts with the real scales unchecked)",
            _f5_shows,
            _f5_explains,
        ),
        KnownDefect(
            "F6",
            "X2",
            "sglang",
            ("0.5.21", "0.5.22", "0.5.23"),
            "with the KV checksum on, a hybrid linear pool with state besides the Mamba slot (DSA layers: "
            "HybridLinearKVPool(use_dsa=True), GLM-5.3-Flash; a compressed QSA indexer: QSATokenToKVPool, Qwen4-Exp) "
            "digests every state type at the request's Mamba slot: the DSA index keys and QSA compressed keys are "
            "read at a slot id instead of their KV pages, the DSA tail and the QSA pending ring instead of the "
            "request row, so decode rejects byte-exact transfers, and a slot id past the tail rows reads out of bounds",
            _f6_shows,
            _f6_explains,
        ),
        KnownDefect(
            "F11",
            "Q7",
            "sglang",
            F11_RELEASES,
            "a pipeline-parallel decode stage's transfer step hands the pass the rids every stage finished - succeeded "
            "or failed alike (_pp_pd_get_decode_transferred_ids) - and the pass polls the stage's own receivers: a "
            "transfer another stage's receiver failed is committed here when this stage's succeeded, and runs in "
            "this stage's decode batch while the failing stage aborts it - the stages' batches diverge (from the "
            "decode PP event loop, #14945, 0.5.7; not fixed in 0.5.23)",
            _f11_shows,
            _f11_explains,
        ),
        KnownDefect(
            "F8",
            "Q7",
            "sglang",
            F8_RELEASES,
            "a request whose bootstrap room is 0 never leaves decode's transfer queue: decode reads a metadata row "
            'whose room is 0 as "prefill has not written it yet" (_apply_metadata_gate keeps its poll at '
            "Transferring; before the gate, _commit_transfer_to_req waits), so the transferred request - a room any "
            "router may draw, 1 in 2**31 for the gRPC PD router - hangs for ever, holding its KV pages and metadata "
            "slot (from #17430's room check, 0.5.9)",
            _f8_shows,
            _f8_q7_explains,
            also=("X2",),
            explains_also=_f8_explains,
            narrower=(("X2", ("0.5.21", "0.5.22", "0.5.23")),),
        ),
        KnownDefect(
            "T22",
            "X2",
            "sglang",
            ("0.5.21", "0.5.22"),
            "with the KV checksum on, a MiniMax-M3 sparse pool (MiniMaxSparseKVPool), which registers its indexer's "
            "keys and dense layers' KV as state for the transfer, gets no state indices for them: "
            "KvChecksumComputer.compute asserts and prefill's scheduler crashes on the first request (fixed in 0.5.23)",
            _t22_shows,
            _no_state_indices,
        ),
    )
}


def recorded(property_id: str, target: Any) -> list[KnownDefect]:
    """The known defects of ``property_id`` recorded for ``target``'s release (none for a target that is not one)."""
    return [d for d in KNOWN.values() if property_id in d.properties() and d.recorded_for(target, property_id)]
