"""Hypothesis strategies for pdverify's domain: paged layouts, PD pairs, chunk schedules, requests, batches.

Import as ``from strategies import paged_rows, batches``; every strategy validates its arguments and raises
``hypothesis.errors.InvalidArgument`` on bad ones.
"""

from strategies.layouts import (
    PDPair,
    chunk_schedules,
    index_dtypes,
    page_sizes,
    paged_rows,
    pd_pairs,
    token_index_lists,
)

__all__ = [
    "PDPair",
    "chunk_schedules",
    "index_dtypes",
    "page_sizes",
    "paged_rows",
    "pd_pairs",
    "token_index_lists",
]
