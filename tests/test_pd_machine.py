"""M1 finds faulty senders and decoders with short event sequences (issue: model-based test of the exchange)."""

from __future__ import annotations

import pytest

from pdverify.cli.check import COUNTEREXAMPLE
from pdverify.mutants.catalogue import mutant_target
from pdverify.runner import load_properties, run_property

FAULTY = {
    "SC03": "destination offset off by one page after the first chunk",
    "SC06": "the last chunk's partial page dropped",
    "SC01": "a non-last chunk also sends its partial page (sent twice)",
    "SC02": "start_send_idx not advanced after a send",
    "DP02": "decode pre-allocates from 0 instead of from D",
}


def shrunk_steps(message: str) -> int:
    """Rule calls in the first falsifying sequence (invariant checks, setup and teardown not counted)."""
    block = COUNTEREXAMPLE.split(message, maxsplit=1)[-1].split("Explanation:")[0]
    calls = [line for line in block.splitlines() if "state." in line]
    return sum(
        1 for c in calls if not any(k in c for k in ("setup(", "teardown(", "start_send_idx_", "transferred_kv_"))
    )


@pytest.mark.parametrize("mutant", sorted(FAULTY))
def test_machine_catches_faulty_exchange(mutant: str) -> None:
    result = run_property(load_properties()["M1"], mutant_target(mutant), profile="mutate")
    assert result.status == "failed", f"M1 missed {mutant} ({FAULTY[mutant]})"
    steps = shrunk_steps(result.message)
    assert 1 <= steps <= 12, f"shrunk sequence has {steps} steps:\n{result.message}"
