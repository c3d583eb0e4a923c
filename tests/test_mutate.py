"""``pdverify mutate``: the catalogue is killed; a weakened property lets a mutant survive and the gate fails."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pdverify.cli import exitcodes
from pdverify.cli.main import main
from pdverify.cli.mutate import run_mutate
from pdverify.mutants.catalogue import load_all
from pdverify.oracle.transfer import decode_pages
from pdverify.properties import test_transfer
from pdverify.properties.registry import PROPERTIES, PropertyInfo, prop
from pdverify.runner import load_properties
from pdverify.strategies import PDPair, pd_pairs
from pdverify.targets import Target

SAMPLE = ["KV05", "SC01", "PB02", "DP01", "PN01", "MM01"]


def test_catalogue_is_large_and_covers_every_function() -> None:
    cat = load_all()
    assert len(cat) >= 40
    assert {m.function for m in cat.values()} == {
        "kv_to_page_indices", "suffix_page_indices", "kv_to_page_num", "page_align_floor",
        "minimax_index_transfer_pages", "translate_token_ids", "send_kv_chunk", "decode_page_indices",
        "prepare_for_prebuilt",
        "prefill_exchange", "kv_sender", "bootstrap", "decode_prealloc", "decode_queue", "transfer_queue",
        "generate_dispatch",
        "wire_roundtrip", "kv_checksum",
    }  # fmt: skip
    assert all(m.description and m.fault_class for m in cat.values())


@pytest.mark.parametrize("mutant", SAMPLE)
def test_sample_of_catalogue_killed(mutant: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.json"
    assert main(["mutate", "--only", mutant, "--jobs", "1", "--json", str(out)]) == exitcodes.OK
    (row,) = json.loads(out.read_text())["mutants"]
    assert row["status"] == "killed" and row["killed_by"] and row["examples_to_kill"] >= 1
    assert "mutation score 1/1 = 100.0%" in capsys.readouterr().out


def test_no_mutant_ran_is_a_failure(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mutate", "--only", "NOPE"]) == exitcodes.FAILED
    assert "nothing ran" in capsys.readouterr().out


def _weakened_p14() -> PropertyInfo:
    """P14 with its int32 assertion deleted: the decode list's dtype is no longer checked."""
    saved = PROPERTIES.pop("P14-weak", None)
    assert saved is None

    @prop("P14-weak", "P14 without its dtype assertion", needs=test_transfer.NEEDS, pair=pd_pairs())
    def weakened(target: Target, device: str, pair: PDPair) -> None:
        ex = test_transfer.run_exchange(target, pair, device)
        expected = decode_pages(ex.decode_locs, pair.prefix_len, pair.length, pair.page_size)
        assert np.asarray(ex.decode).tolist() == expected  # the dtype check is gone

    return PROPERTIES.pop("P14-weak")


def test_deleting_an_assertion_makes_mutate_fail(capsys: pytest.CaptureFixture[str]) -> None:
    props = dict(load_properties())
    assert run_mutate(profile="mutate", only="DP01", jobs=1, json_path=None, props=props) == exitcodes.OK
    capsys.readouterr()
    props["P14"] = _weakened_p14()
    del props["W1"]  # the wire round trip also sees an int64 page list come back doubled
    assert run_mutate(profile="mutate", only="DP01", jobs=1, json_path=None, props=props) == exitcodes.FAILED
    assert "survived: DP01" in capsys.readouterr().out


def test_parallel_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mutate", "--only", "AF0", "--jobs", "2"]) == exitcodes.OK
    assert "3/3 = 100.0%" in capsys.readouterr().out


def test_generation_only_measures_examples_to_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Explicit examples off, seeded: each run reports the generated examples up to the first failing one."""
    out, md = tmp_path / "g.json", tmp_path / "g.md"
    code = main(["mutate", "--generation-only", "--only", "KV05", "--seeds", "2", "--jobs", "1", "--json", str(out),
                 "--md", str(md)])  # fmt: skip
    data = json.loads(out.read_text())
    (row,) = data["mutants"]
    assert code == exitcodes.OK and row["id"] == "KV05" and len(row["examples_to_failure"]) == 2
    assert all(isinstance(n, int) and n >= 1 for n in row["examples_to_failure"]), row
    assert data["summary"]["overall"]["kill_rate"] == 1.0 and data["seeds"] == [20261201, 20261202]
    assert "| **all** | 1 | 1 (100%) | 2/2 |" in md.read_text()


def test_generation_only_reports_a_survivor(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutant no generated example exposes within the budget is reported as not killed, and the run fails."""
    from pdverify.cli import mutate

    def nothing_fails(mutant_id: str, seeds: list[int]) -> mutate.GenerationResult:
        return mutate.GenerationResult(mutant_id, "f", "fam", seeds, [None] * len(seeds), [None] * len(seeds), 0.0)

    monkeypatch.setattr(mutate, "kill_by_generation", nothing_fails)
    lines: list[str] = []
    assert (
        mutate.run_generation_only(only="KV05", jobs=1, seeds=[1], json_path=None, md_path=None, echo=lines.append) == 1
    )
    assert "| **all** | 1 | 0 (0%) | 0/1 |" in lines[0] and "* KV05 (f): -; killed by -" in lines[0]
    assert mutate.percentile([], 0.5) != mutate.percentile([], 0.5)  # nan: no runs killed
