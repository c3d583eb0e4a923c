"""The translation case rejects inputs outside its contract; the port names a bad argument; the strategy
validates its own."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from hypothesis.errors import InvalidArgument

from pdverify.model.translation import TranslateCase
from pdverify.oracle.translation import translated
from pdverify.production.translate import translate_token_ids
from pdverify.strategies import token_translations


def case(**kw: Any) -> TranslateCase:
    base: dict[str, Any] = {"page_size": 4, "loc": ((4, 5),), "v2p": (0, 9)}
    return TranslateCase(**{**base, **kw})


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"dtype": "int16"}, "dtype='int16' must be 'int32' or 'int64'"),
        ({"loc": ()}, "loc must hold at least one row"),
        ({"loc": ((1,), (2, 3)), "two_d": True}, "all rows of one length"),
        ({"loc": ((1,), (2,))}, "a 1-D loc is one row, got 2"),
        ({"v2p": ()}, "v2p must hold at least the sink entry 0"),
        ({"dcp_size": 2, "dcp_rank": 2}, "dcp_rank=2 must be in [0, dcp_size=2)"),
        ({"out_mode": "inplace"}, "out_mode='inplace' must be one of"),
        ({"out_mode": "out_width", "out_width": 1}, "out_width=1 must be at least the 2 ids"),
        ({"out_mode": "out_width", "out_width": 2, "two_d": True, "loc": ((1,), (2,))}, "loc must be 1-D"),
    ],
)
def test_out_of_contract_cases_are_rejected(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        case(**kw)


def test_oracle_on_the_spec_table() -> None:
    got = translated(case(loc=((4, 5, 9, 13, -1, 16),), v2p=(0, 12, 0, 2**29 + 5)))
    assert got == [[48, 49, 1, (2**29 + 5) * 4 + 1, 0, 0]]
    # DCP 2, rank 1: even ids are rank 0's; 1 -> 0 (page 0, the sink), 3 -> 1 (page 0, offset 1), 9 -> 4 (page 2)
    assert translated(case(loc=((0, 1, 2, 3, 8, 9),), v2p=(0, 3, 9), page_size=2, dcp_size=2, dcp_rank=1)) == [
        [0, 0, 0, 1, 0, 18]
    ]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"out": torch.zeros(2, dtype=torch.int32)}, "out: dtype must be int64"),
        ({"out": torch.zeros(3, dtype=torch.int64)}, "out: shape (3,) must match loc's (2,)"),
        ({"out": torch.zeros(2, 2, dtype=torch.int64), "out_width": 2}, "needs a packed 1-D out"),
        ({"out": torch.zeros(4, dtype=torch.int64), "out_width": 1}, "out_width: 1 is under the 2 ids"),
    ],
)
def test_the_port_names_a_bad_argument(kw: dict[str, Any], message: str) -> None:
    loc, v2p = torch.tensor([4, 5]), torch.tensor([0, 9])
    with pytest.raises(ValueError, match=re.escape(message)):
        translate_token_ids(loc=loc, v2p=v2p, page_size=4, **kw)


def test_the_port_needs_a_packed_loc_for_out_width() -> None:
    loc = torch.arange(8).reshape(2, 4)[:, :2]
    with pytest.raises(ValueError, match="loc: out_width writes a packed lane range"):
        translate_token_ids(loc=loc, v2p=torch.tensor([0, 9]), page_size=4, out=torch.zeros(8, dtype=torch.int64),
                            out_width=4)  # fmt: skip


def test_an_empty_width_returns_out_untouched() -> None:
    out = torch.full((2,), 5, dtype=torch.int64)
    got = translate_token_ids(loc=torch.tensor([], dtype=torch.int64), v2p=torch.tensor([0]), page_size=4, out=out,
                              out_width=0)  # fmt: skip
    assert got is out and out.tolist() == [5, 5]


@pytest.mark.parametrize("bad", [{"max_ids": -1}, {"max_pages": 0}, {"max_page_size": 0}])
def test_strategy_arguments(bad: dict[str, int]) -> None:
    with pytest.raises(InvalidArgument, match=next(iter(bad))):
        token_translations(**bad).validate()
