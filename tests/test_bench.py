"""``pdverify bench``: the side-by-side numbers have the shape the upstream changes promise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdverify.cli import bench
from pdverify.cli.main import main
from pdverify.targets import load_target


def test_send_bytes_ratio_is_page_size_to_one_to_half() -> None:
    targets = [load_target(n) for n in ("legacy", "pdverify", "fast")]
    cells = {(c.size, c.variant): c for c in bench.bench_send(targets, "cpu", (4096,), repeats=1)}
    for ps in bench.PAGE_SIZES:
        size = f"4096 tokens, ps {ps}"
        legacy, port, fast = (cells[(size, v)].d2h_bytes for v in ("legacy", "pdverify", "fast"))
        assert legacy == ps * port
        assert fast == port // 2 + 4  # int32 pages plus the guard word


def test_prebuilt_cells(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "QUICK_SEND_TOKENS", (256,))
    monkeypatch.setattr(bench, "QUICK_BATCHES", ((4, 64),))
    out = tmp_path / "b.json"
    assert main(["bench", "--quick", "--repeats", "1", "--targets", "legacy,pdverify,fast", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "HOST wall time" in text
    cells = {(c["bench"], c["variant"]): c for c in json.loads(out.read_text())["cells"]}
    legacy, port = cells[("prepare_for_prebuilt", "legacy")], cells[("prepare_for_prebuilt", "pdverify")]
    assert legacy["h2d_bytes"] > 4 * 64 * 4 > port["h2d_bytes"]  # the prompt went across before #35070
    assert cells[("prepare_for_prebuilt", "fast")]["copies"] == 3  # one metadata copy + two host mirrors


def test_bench_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--targets", "nosuch"]) == 2  # an unknown name: a usage error before anything runs
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--repeats", "0"])
    assert exit_info.value.code == 2


def test_bench_skips_only_a_default_target_that_is_not_installed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = bench.run_bench

    def missing(*, names: list[str], strict: bool, **kw: object) -> int:
        return real(names=["pdverify", "tests.user_targets:nothing_here"], strict=strict, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(bench, "run_bench", missing)
    monkeypatch.setattr(bench, "QUICK_SEND_TOKENS", (256,))
    monkeypatch.setattr(bench, "QUICK_BATCHES", ((1, 16),))
    assert main(["bench", "--quick", "--repeats", "1"]) == 0  # the default list: a target that cannot load is skipped
    assert "skipping tests.user_targets:nothing_here" in capsys.readouterr().out
