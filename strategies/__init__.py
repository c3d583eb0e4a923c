"""Hypothesis strategies for pdverify's domain: paged layouts, PD pairs, chunk schedules, requests,
batches, scheduler-level cases (one request on either side, decode's pre-allocation and transfer queues), and the
generate calls a PD router sends.

Import as ``from pdverify.strategies import paged_rows, batches``; every strategy validates its arguments and raises
``hypothesis.errors.InvalidArgument`` on bad ones.
"""

from pdverify.strategies.checksum import checksum_cases
from pdverify.strategies.dispatch import generate_calls
from pdverify.strategies.exchange import (
    bootstrap_settings,
    decode_cases,
    pd_exchanges,
    prefill_cases,
    rank_splits,
    state_lists,
)
from pdverify.strategies.fields import REGISTRY, RequestField, register_field, registered, unregister_field
from pdverify.strategies.layouts import (
    PDPair,
    chunk_schedules,
    index_dtypes,
    page_sizes,
    paged_rows,
    pd_pairs,
    token_index_lists,
)
from pdverify.strategies.queue import decode_queues
from pdverify.strategies.requests import batches, requests
from pdverify.strategies.sender import bootstrap_cases, sender_cases
from pdverify.strategies.transfer_queue import transfer_queues
from pdverify.strategies.translation import token_translations

__all__ = [
    "REGISTRY",
    "PDPair",
    "RequestField",
    "batches",
    "bootstrap_cases",
    "bootstrap_settings",
    "checksum_cases",
    "chunk_schedules",
    "decode_cases",
    "decode_queues",
    "generate_calls",
    "index_dtypes",
    "page_sizes",
    "paged_rows",
    "pd_exchanges",
    "pd_pairs",
    "prefill_cases",
    "rank_splits",
    "register_field",
    "registered",
    "requests",
    "sender_cases",
    "state_lists",
    "token_index_lists",
    "token_translations",
    "transfer_queues",
    "unregister_field",
]
