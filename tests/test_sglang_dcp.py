"""The DCP pack limit on the ``sglang`` target is SGLang's own: each decode peer's ``requires_dcp_relayout`` comes
from ``CommonKVManager.requires_dcp_relayout`` (prefill's DCP size 1, an MLA model, the peer's DCP size), the limit
from ``_init_dcp_pack_buffers_once`` (the prefill buffer ceiling the case publishes, rounded up to a page), and the
sender asks ``get_max_transfer_tokens``. S24 passes as released and fails on each step planted wrong: every peer
relayouting, the ceiling not rounded up, the limit applied whatever the room's peer.

Runs in the conformance environment (``.venv-sglang``, SGLang 0.5.23 or a release on ``PYTHONPATH``); skipped
where SGLang is not installed.
"""

from __future__ import annotations

from typing import Any

import pytest

conn = pytest.importorskip("sglang.srt.disaggregation.common.conn", reason="needs SGLang (the conformance env)")


def _s24() -> tuple[Any, Any]:
    from tests.sglang_release import passing_as_released

    return passing_as_released("S24", "the DCP pack limit came in 0.5.21")


def _fails(target: Any, s24: Any, seen: str) -> None:
    from pdverify.runner import run_property

    got = run_property(s24, target)
    assert got.status == "failed" and seen in got.message, got.message


def test_every_peer_relayouting_fails_s24(monkeypatch: pytest.MonkeyPatch) -> None:
    target, s24 = _s24()
    monkeypatch.setattr(conn.CommonKVManager, "requires_dcp_relayout", lambda self, size, rank: True)
    _fails(target, s24, "the room's peer needs no relayout")


def test_a_ceiling_not_rounded_up_fails_s24(monkeypatch: pytest.MonkeyPatch) -> None:
    target, s24 = _s24()
    monkeypatch.setattr(conn, "ceil_align", lambda tokens, page_size: tokens)
    _fails(target, s24, "split the sends")


def test_a_limit_whatever_the_rooms_peer_fails_s24(monkeypatch: pytest.MonkeyPatch) -> None:
    target, s24 = _s24()
    monkeypatch.setattr(conn.CommonKVSender, "get_max_transfer_tokens", lambda self: self.kv_mgr._dcp_pack_max_tokens)
    _fails(target, s24, "the room's peer needs no relayout")
