"""Version-aware contracts, the release-aware pieces that run without SGLang, and the release matrix's gate."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import zipfile
from array import array
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from packaging.version import InvalidVersion

from pdverify.production import page_index
from pdverify.properties.releases import ALL_RELEASES, DOMAIN, FROM_35070, Contract, bind_release
from pdverify.runner import load_properties, run_property
from pdverify.strategies import batches
from pdverify.targets import TargetError, load_target
from pdverify.targets.layouts import FillIds
from pdverify.targets.sglang_release import host_input, sglang_release_target
from tests.ci_scripts import load_ci_script

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / "ci" / "conformance_matrix.py"


@pytest.fixture
def release_domain() -> Any:
    yield bind_release
    bind_release(None)


def test_contract_ranges() -> None:
    c = Contract("x", "0.5.16", "0.5.20")
    current = Contract("y", "0.5.16")
    # not a release (a port, a user target) or an unversioned build: held to the current contracts, none that ended
    assert current.not_applicable(None) is None and current.not_applicable("main-dev") is None
    assert "a past contract, x" in (c.not_applicable(None) or "")
    assert c.not_applicable("main-dev") == c.not_applicable(None)
    assert c.not_applicable("0.5.16") is None and c.not_applicable("0.5.19.post1") is None
    assert "contract before x" in (c.not_applicable("0.5.15.post1") or "")
    assert "contract after x" in (c.not_applicable("0.5.20") or "")
    assert ALL_RELEASES.not_applicable("0.4.4") is None and str(FROM_35070).startswith("upstream #35070")
    with pytest.raises(InvalidVersion):
        Contract("bad", "five")


def test_prop_rejects_a_contract_that_is_not_one() -> None:
    from pdverify.properties.registry import prop

    with pytest.raises(TypeError, match="contract must be"):
        prop("Z1", "t", needs=(), contract="from 0.5.18")  # type: ignore[arg-type]


def test_bind_release_sets_the_input_domain(release_domain: Any) -> None:
    assert (release_domain("0.5.10").decode_prefix, DOMAIN.rebootstrap) == (False, False)
    assert (release_domain("0.5.11").decode_prefix, DOMAIN.rebootstrap) == (True, False)
    assert (release_domain("0.5.16").decode_prefix, DOMAIN.rebootstrap) == (True, True)
    assert (release_domain("not-a-version").decode_prefix, DOMAIN.rebootstrap) == (True, True)
    assert (release_domain(None).decode_prefix, DOMAIN.rebootstrap) == (True, True)


def test_already_computed_is_seeded_only_from_0_5_13(release_domain: Any) -> None:
    """Before #25973 (0.5.13) nothing seeds already_computed: an unstained request reaches prepare_for_prebuilt
    with 0; from 0.5.13 decode seeds it from prefill's cached tokens."""
    computed: list[int] = []

    @settings(max_examples=150, database=None, derandomize=True)
    @given(batch=batches())
    def draw(batch: Any) -> None:
        computed.extend(r.already_computed for r in batch.reqs if not r.retracted_stain)

    for release, seeded in (("0.5.12.post1", False), ("0.5.13", True), (None, True)):
        assert release_domain(release).seeded_computed is seeded
        computed.clear()
        draw()
        assert computed and (max(computed) > 0) is seeded, (release, max(computed))


def test_strategies_draw_only_the_release_domain(release_domain: Any) -> None:
    release_domain("0.5.10")
    seen: list[int] = []

    @settings(max_examples=150, database=None, derandomize=True)
    @given(batch=batches())
    def old(batch: Any) -> None:
        for r in batch.reqs:
            assert r.prefix_len == 0, "a decode prefix before 0.5.11"
            assert r.extend_end == r.seq_len, "a rebootstrap before 0.5.16"
            seen.append(r.extend_len)

    old()
    assert seen and max(seen) > 0
    release_domain(None)
    prefixes: list[int] = []

    @settings(max_examples=150, database=None, derandomize=True)
    @given(batch=batches())
    def current(batch: Any) -> None:
        prefixes.extend(r.prefix_len for r in batch.reqs)

    current()
    assert max(prefixes) > 0, "the current contract draws decode prefixes"


UNREACHABLE: dict[str | None, set[str]] = {"0.5.12": {"state_lists"}}
"""Input features in a release's domain that no server of it makes: 0.5.12's StateType is MAMBA, SWA and NSA, so no
pool it builds registers two of the types the exchange models (the Mamba state is not one) and its per-type lists
carry one modelled list - the state_lists input (several, or a later type) (pdverify.model.pools)."""

DECODE_FEATURES = ("paged_transfer", "decode_prefixes", "decode_hicache", "state_payloads", "state_lists",
                   "swa_paged_pool", "swa_tail_prealloc", "swa_whole_paged")  # fmt: skip


@pytest.mark.parametrize(
    ("release", "absent"),
    [
        ("0.4.5.post1", DECODE_FEATURES),
        ("0.5.3", DECODE_FEATURES[1:]),
        (
            "0.5.7",
            (
                "decode_prefixes",
                "decode_hicache",
                "state_lists",
                "swa_paged_pool",
                "swa_tail_prealloc",
                "swa_whole_paged",
            ),
        ),
        ("0.5.10", ("decode_prefixes", "decode_hicache", "state_lists", "swa_tail_prealloc")),
        ("0.5.11", ("decode_hicache", "state_lists", "swa_tail_prealloc")),
        ("0.5.12", ("decode_hicache", "swa_whole_paged")),
        (None, ("swa_whole_paged",)),
    ],
)
def test_decode_cases_draw_only_the_release_domain(release_domain: Any, release: str | None,
                                                   absent: tuple[str, ...]) -> None:  # fmt: skip
    """What a release's decode pre-allocation can be given: page size 1 before paged transfer (0.4.5.post2), no
    state before state payloads (0.5.3.post3), no paged SWA pool before 0.5.8, no decode prefix before 0.5.11, one
    pool-typed state payload before the per-type lists (0.5.12), no SWA tail pre-allocation before 0.5.12 (a hybrid
    SWA pool holds the whole sequence there, and from it never at a page size above 1), no host hit before decode
    HiCache (0.5.13). Each feature absent from the release is never drawn; each present one is drawn."""
    from pdverify.strategies import decode_cases

    release_domain(release)
    used: set[str] = set()

    @settings(max_examples=300, database=None, derandomize=True)
    @given(case=decode_cases())
    def draw(case: Any) -> None:
        features = set(case.input_features())
        assert not features & set(absent), (release, features & set(absent), case)
        used.update(features)

    draw()
    missing = set(DECODE_FEATURES) - set(absent) - UNREACHABLE.get(release, set()) - used
    assert not missing, (release, missing)


PREFILL_FEATURES = ("paged_transfer", "state_payloads", "staging_buffer", "attention_cp", "dp_rank_query",
                    "decode_prefixes", "state_lists", "early_send")  # fmt: skip


@pytest.mark.parametrize(
    ("release", "absent"),
    [
        ("0.4.5.post1", PREFILL_FEATURES),
        ("0.5.3", PREFILL_FEATURES[1:]),
        ("0.5.5", PREFILL_FEATURES[2:]),
        ("0.5.10", PREFILL_FEATURES[5:]),
        ("0.5.12", ("early_send",)),
        (None, ()),
    ],
)
def test_prefill_cases_draw_only_the_release_domain(release_domain: Any, release: str | None,
                                                    absent: tuple[str, ...]) -> None:  # fmt: skip
    """What a release's prefill exchange can be given: page size 1 before paged transfer (0.4.5.post2), no state
    before state payloads (0.5.3.post3) and one payload, SWA's or DSA's, before the per-type lists (0.5.12), no
    staging buffer, attention CP or DP rank registration before 0.5.10, no decode prefix before 0.5.11, no early
    send before 0.5.15. Each feature absent from the release is never drawn; each present one is drawn."""
    from pdverify.strategies import bootstrap_settings, prefill_cases, rank_splits

    release_domain(release)
    used: set[str] = set()

    splits = rank_splits() if "attention_cp" not in absent else st.none()  # none to draw before attention CP

    @settings(max_examples=300, database=None, derandomize=True)
    @given(case=prefill_cases(), split=splits, settings_=bootstrap_settings())
    def draw(case: Any, split: tuple[str, int] | None, settings_: dict[str, Any]) -> None:
        if split is not None:
            case = replace(case, rank_split=(split[0], 0, split[1]))
        case = replace(case, attention_dp=settings_["attention_dp"])
        features = set(case.input_features())
        assert not features & set(absent), (release, features & set(absent), case)
        if "state_lists" in absent:  # before the per-type lists: at most one state type, SWA or DSA
            assert case.state_types in ((), ("SWA",), ("DSA",)), (release, case.state_types)
        used.update(features)

    draw()
    missing = set(PREFILL_FEATURES) - set(absent) - UNREACHABLE.get(release, set()) - used
    assert not missing, (release, missing)


@pytest.mark.parametrize(("release", "modes"), [("0.5.9", None), ("0.5.10", {"cp_rank0", "cp_all"}),
                                               ("0.5.22", {"cp_rank0", "cp_all", "kv_shard"})])  # fmt: skip
def test_rank_splits_only_where_ranks_share_a_transfer(release_domain: Any, release: str,
                                                       modes: set[str] | None) -> None:  # fmt: skip
    """Prefill ranks share a request's transfer only with attention CP (0.5.10) or KV cache sharding (0.5.22): an
    earlier release is never given a split, and drawing one there is an error that names the release."""
    from pdverify.strategies import rank_splits

    release_domain(release)
    seen: set[str] = set()

    @settings(max_examples=60, database=None, derandomize=True)
    @given(split=rank_splits())
    def draw(split: tuple[str, int]) -> None:
        seen.add(split[0])

    if modes is None:
        with pytest.raises(InvalidArgument, match=f"sglang {release} has no way for prefill ranks to share"):
            draw()
    else:
        draw()
        assert seen == modes, (release, seen)


@pytest.mark.parametrize(("release", "unaligned"), [("0.5.16", False), ("0.5.17", True), (None, True)])
def test_unaligned_early_prefixes_only_with_prefill_dcp(release_domain: Any, release: str | None,
                                                        unaligned: bool) -> None:  # fmt: skip
    """An early-send prefix past D that ends off the page is prefill-side DCP's (#32837, 0.5.17): 0.5.15 and 0.5.16
    assert it aligned and are never given one; later releases are, and skip it."""
    from pdverify.strategies import prefill_cases

    release_domain(release)
    seen: list[bool] = []

    @settings(max_examples=300, database=None, derandomize=True)
    @given(case=prefill_cases())
    def draw(case: Any) -> None:
        off = case.early_prefix is not None and case.early_prefix > case.decode_prefix
        if off:
            seen.append(case.early_prefix % case.page_size != 0)
        assert ("dcp_prefill" in case.input_features()) == (off and case.early_prefix % case.page_size != 0)

    draw()
    assert seen and any(seen) is unaligned, (release, len(seen), sum(seen))


def test_decode_case_names_its_features() -> None:
    """``DecodeCase.input_features`` names each release feature a case uses (the gate ``within_release`` reads)."""
    from dataclasses import replace

    from pdverify.model.exchange import DecodeCase

    base = DecodeCase(1, 4, 0, (), 0, (0,) * 5, (1, 2, 3, 4, 5))
    assert base.input_features() == ()
    paged = DecodeCase(4, 8, 0, (4, 5, 6, 7), 4, (0,) * 12, (2, 3, 5))
    assert set(paged.input_features()) == {"paged_transfer", "decode_prefixes"}
    hicache = DecodeCase(4, 8, 0, (), 4, (0,) * 12, (2, 3, 5))
    assert {"decode_prefixes", "decode_hicache"} <= set(hicache.input_features())
    assert "state_lists" not in replace(base, state_types=("DSA",)).input_features()
    assert {"state_payloads", "state_lists"} <= set(replace(base, state_types=("SWA",)).input_features())
    assert "state_lists" in replace(base, state_types=("DSA", "SWA")).input_features()
    swa = replace(paged, decode_prefix=0, l1_row=(), state_types=("SWA",), swa_free_pages=(1, 2, 3, 4))
    assert {"state_payloads", "swa_paged_pool"} <= set(swa.input_features())
    assert "state_lists" not in swa.input_features()


def test_pd_pairs_draw_only_the_release_domain(release_domain: Any) -> None:
    """Decode prefixes came in 0.5.11 and int64 (translated) tables with unified-memory PD in 0.5.18; a prompt has a
    token in every release (SGLang refuses an empty one). A pair's input features name what it uses."""
    from pdverify.strategies import PDPair, pd_pairs

    def draw(release: str | None) -> list[PDPair]:
        release_domain(release)
        pairs: list[PDPair] = []

        @settings(max_examples=150, database=None, derandomize=True)
        @given(pair=pd_pairs())
        def collect(pair: PDPair) -> None:
            pairs.append(pair)

        collect()
        return pairs

    old = draw("0.5.10")
    assert all(p.prefix_len == 0 and p.dtype == torch.int32 and p.length >= 1 for p in old)
    assert all(p.input_features() == () for p in old) and max(p.page_size for p in old) > 1
    mid = draw("0.5.17")
    assert any(p.prefix_len for p in mid) and all(p.dtype == torch.int32 for p in mid)
    now = draw(None)
    assert {p.dtype for p in now} == {torch.int32, torch.int64} and min(p.length for p in now) == 1
    features = {f for p in now for f in p.input_features()}
    assert features == {"decode_prefixes", "translated_ids"}, features


def test_sender_strategies_draw_only_the_release_domain(release_domain: Any) -> None:
    """State lists came with hybrid-model state payloads (0.5.3.post3), decode-side prefixes in 0.5.11: an earlier
    release's sender and bootstrap cases carry neither, a later one's both."""
    from pdverify.strategies.sender import bootstrap_cases, sender_cases

    for release, stateful, prefixed in (("0.5.3.post2", False, False), ("0.5.10", True, False), (None, True, True)):
        release_domain(release)
        seen: list[tuple[int, int]] = []

        @settings(max_examples=100, database=None, derandomize=True)
        @given(sender=sender_cases(), boot=bootstrap_cases())
        def draw(sender: Any, boot: Any) -> None:
            seen.append((len(sender.state), boot.decode_prefix))  # noqa: B023 - run before the next iteration
            assert sender.input_features() == (("state_payloads",) if sender.state else ())

        draw()
        assert (max(s for s, _ in seen) > 0, max(d for _, d in seen) > 0) == (stateful, prefixed), release


def test_a_release_outside_a_contract_is_not_applicable_never_passed(release_domain: Any) -> None:
    old = load_target("pdverify").derive("old", release="0.5.10")
    release_domain(old.release)
    props = load_properties()
    p22 = run_property(props["P22"], old)
    assert p22.status == "not applicable" and "contract before upstream #35070" in p22.message
    p19 = run_property(props["P19"], old)
    assert p19.status == "passed" and p19.examples > 0


def test_check_reports_out_of_range_properties_as_not_applicable(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "pdverify.cli.main", "check", "--target", "tests.user_targets:old_release"]
    cmd += ["--profile", "ci", "--device", "cpu", "-k", "p22 or p19 or p1_", "--report", str(report)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = {p["id"]: p for p in json.loads(report.read_text())["properties"]}
    assert got["P22"]["status"] == "not applicable" and "sglang 0.5.10 < 0.5.18" in got["P22"]["message"]
    assert got["P19"]["status"] == "passed" and got["P1"]["status"] == "passed"


def test_fill_ids_concatenate_as_list_or_array() -> None:
    ids = FillIds([5, 6, 7])
    assert isinstance(ids[1:], FillIds) and ids[0] == 5
    assert sum([ids[1:], ids], []) == [6, 7, 5, 6, 7]  # noqa: RUF017 - how releases before 0.5.7 concatenate
    got = sum([ids[1:], ids], array("q"))
    assert isinstance(got, array) and list(got) == [6, 7, 5, 6, 7]
    assert ids.__radd__(3) is NotImplemented


def test_host_input_calls_a_numpy_era_function_as_its_call_sites_did() -> None:
    seen: list[Any] = []

    def old_kv_to_page_indices(kv: Any, page_size: int) -> Any:
        seen.append(kv)
        return kv[::page_size] // page_size

    wrapped = host_input(old_kv_to_page_indices)
    out = wrapped(torch.arange(8, dtype=torch.int32), 4)
    assert isinstance(seen[0], np.ndarray) and seen[0].dtype == np.int32
    np.testing.assert_array_equal(out, page_index.kv_to_page_indices(torch.arange(8, dtype=torch.int32), 4))
    assert wrapped.__name__ == "old_kv_to_page_indices" and wrapped(np.arange(4), 2).tolist() == [0, 1]


def test_release_target_without_sglang_names_the_fix() -> None:
    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("sglang is installed here")
    with pytest.raises(TargetError, match=r"build-sglang-env\.sh"):
        sglang_release_target()


# --- the environment builder -----------------------------------------------------------------------------


def test_release_env_matching_and_pins(tmp_path: Path) -> None:
    env = load_ci_script("sglang_release_env")
    assert env._matches("0.4.9.post2", "0.4") and env._matches("0.5.1", "0.5.1") and env._matches("0.5.23", "")
    assert not env._matches("0.5.10", "0.5.1") and not env._matches("0.5.1.post1", "0.5.1")
    wheel = tmp_path / "sglang-0.5.6-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(
            "sglang-0.5.6.dist-info/METADATA",
            "Name: sglang\nRequires-Dist: transformers==4.57.1\nRequires-Dist: torch==2.9.1\n"
            'Requires-Dist: flashinfer==0.5 ; extra == "cuda"\nRequires-Dist: numpy>=1.26\n',
        )
    assert env.release_pins(wheel) == {"transformers": "4.57.1", "torch": "2.9.1"}
    for shim in ("sgl_kernel", "vllm", "decord"):
        assert (env.SHIM_DIR / shim / "__init__.py").exists()
    assert (env.SHIM_DIR / "sitecustomize.py").exists()


def test_kernel_shim_imports_and_raises_on_call(tmp_path: Path) -> None:
    code = (
        "import sgl_kernel, vllm\n"
        "from sgl_kernel.kvcacheio import transfer_kv\n"
        "from vllm._custom_ops import scaled_fp8_quant\n"
        "class Config(vllm.QuantConfig): pass\n"
        "assert Config.__mro__[1] is object\n"
        "print(sgl_kernel.scalar_types.uint4b8)\n"
        "try:\n    scaled_fp8_quant(1)\nexcept RuntimeError as e:\n    print('raised', e)\n"
    )
    env = {"PYTHONPATH": str(ROOT / "ci" / "sglang-shims"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "vllm._custom_ops.scaled_fp8_quant is a CUDA kernel" in proc.stdout
    assert "sgl_kernel.scalar_types.uint4b8" in proc.stdout


# --- the matrix and its triage gate ----------------------------------------------------------------------


def _fake_run(
    out: Path, release: str, statuses: dict[str, str], findings: dict[str, dict[str, dict[str, int]]] | None = None
) -> None:
    (out / release).mkdir(parents=True)
    props: list[dict[str, Any]] = [
        {"id": k, "status": v, "message": f"{k} msg", "test": f"test_{k.lower()}", "counterexample": "f(x=1)",
         "clauses": [{"name": "main", "status": v}], "findings": (findings or {}).get(k, {})}
        for k, v in statuses.items()
    ]  # fmt: skip
    units = {"prepare_for_prebuilt": "sglang...mixin.prepare_for_prebuilt", "decode_queue": "no driver for it: why",
             "translate_token_ids": f"sglang {release} has no translate_token_ids"}  # fmt: skip
    report = {"summary": {"passed": 1}, "properties": props, "target": {"package_version": release, "units": units}}
    (out / release / "check.json").write_text(json.dumps(report))


def _assemble(tmp_path: Path, triage: list[dict[str, Any]]) -> tuple[int, str]:
    (tmp_path / "triage.json").write_text(json.dumps({"triage": triage}))
    cmd = [sys.executable, str(MATRIX), "0.5.11", "0.5.12", "0.4.4.post2", "--assemble"]
    cmd += ["--out", str(tmp_path / "out"), "--triage", str(tmp_path / "triage.json"), "--root", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_matrix_gate_needs_every_failure_triaged(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _fake_run(out, "0.5.11", {"P1": "passed", "P19": "failed", "P22": "not applicable"})
    _fake_run(out, "0.5.12", {"P1": "passed", "P19": "passed", "P22": "not applicable"})
    entry = {"id": "T1", "kind": "upstream defect", "property": "P19", "releases": ["0.5.11"]}
    code, text = _assemble(tmp_path, [])
    assert code == 1 and "0.5.11: P19 failed and not triaged" in text
    code, text = _assemble(tmp_path, [entry])
    assert code == 0, text
    matrix = json.loads((out / "matrix.json").read_text())
    assert matrix["0.5.11"] == {"P1": "passed", "P19": "failed", "P22": "not applicable"}
    assert set(matrix["0.4.4.post2"].values()) == {"not importable"}
    md = (out / "matrix.md").read_text()
    assert "**FAIL** (T1)" in md and "0.4.4.post2: no report from this release's job" in md
    assert (
        "* **0.5.11**: defects: T1 (1 passed of 2 checked properties, 1 of 2 clauses); not applicable: 1 no such "
        "code; units: 1 driven of 2 present (not driven: decode_queue)"
    ) in md
    assert "* **0.5.12**: sound on 2 of 2 checked properties" in md
    assert "| 0.5.12 | prepare_for_prebuilt | decode_queue: no driver for it: why | translate_token_ids |" in md
    assert "| 0.5.11 | 1 | P19 (T1) | 1 |" in (out / "summary.md").read_text()
    page = (out / "matrix.html").read_text()
    assert "href='#0.5.11-P19'" in page and "PYTHONPATH=.sglang-releases/0.5.11" in page and "f(x=1)" in page
    code, text = _assemble(tmp_path, [entry, {**entry, "id": "T2", "releases": ["0.5.12"]}])
    assert code == 1 and "0.5.12: P19 is triaged but passed now" in text


def test_every_finding_on_a_property_is_named_and_must_reproduce(tmp_path: Path) -> None:
    """Two findings recorded on one property (0.5.22's S16: F2 and T6): the verdict names both, and one that no
    longer reproduces fails the gate even while the other keeps the property a known defect."""
    out = tmp_path / "out"
    both = {"S16": {"F2": {"matched": 12, "reproduced": 2}, "T6": {"matched": 24, "reproduced": 24}}}
    _fake_run(out, "0.5.11", {"P1": "passed", "S16": "known defect"}, both)
    _fake_run(out, "0.5.12", {"P1": "passed", "S16": "known defect"}, {"S16": {**both["S16"], "T6": {"matched": 3}}})
    triage = [{"id": i, "kind": "upstream defect", "property": "S16", "releases": ["0.5.11", "0.5.12"]}
              for i in ("F2", "T6")]  # fmt: skip
    code, text = _assemble(tmp_path, triage)
    assert code == 1 and "0.5.12: S16: T6 is triaged but no longer reproduces (3 examples in its signature)" in text
    assert "0.5.11: S16: F2" not in text and "0.5.11: S16: T6" not in text, text
    md = (out / "matrix.md").read_text()
    assert "* **0.5.11**: defects: F2, T6 (" in md and "* **0.5.12**: defects: F2 (" in md, md
    assert "**known defect** (F2, T6)" in md and "| 0.5.11 | 1 | S16 (F2, T6) | 0 |" in (out / "summary.md").read_text()


def test_matrix_rejects_an_unknown_release(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(MATRIX), "9.9.9", "--assemble"], capture_output=True, text=True)
    assert proc.returncode == 2 and "9.9.9" in proc.stderr


def test_triage_file_explains_known_failures() -> None:
    triage = json.loads((ROOT / "findings" / "triage.json").read_text())["triage"]
    for t in triage:
        assert t["kind"] in ("upstream defect", "contract change"), t
        assert t["property"] in load_properties() and t["releases"] and t["what"], t
        if t["kind"] == "upstream defect":
            assert t["reachable"] and "first_fixed" in t, t


FAKE_RELEASE = {
    "sglang/__init__.py": '__version__ = "0.5.10"\n',
    "sglang/srt/__init__.py": "",
    "sglang/srt/disaggregation/__init__.py": "",
    "sglang/srt/disaggregation/utils.py": (
        "import numpy\n\n"
        "def kv_to_page_indices(kv_indices, page_size):\n"
        "    assert isinstance(kv_indices, numpy.ndarray), 'a numpy-era function given a tensor'\n"
        "    return kv_indices if page_size == 1 else kv_indices[::page_size] // page_size\n\n"
        "def kv_to_page_num(num_kv_indices, page_size):\n"
        "    return (num_kv_indices + page_size - 1) // page_size\n"
    ),
    "sglang/srt/disaggregation/decode_schedule_batch_mixin.py": (
        "class ScheduleBatchDisaggregationDecodeMixin:\n"
        "    def prepare_for_prebuilt_extend(self):\n"
        "        raise RuntimeError('not called here')\n"
    ),
}


def fake_release(tmp_path: Path, version: str, code: str) -> tuple[Any, dict[str, str]]:
    """``code``'s JSON output, run over ``FAKE_RELEASE`` as sglang ``version`` in ``tmp_path``; and its environment."""
    for rel, text in {**FAKE_RELEASE, "sglang/__init__.py": f'__version__ = "{version}"\n'}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), env


def test_release_target_says_a_release_without_a_transport_has_no_sender_or_wire(tmp_path: Path) -> None:
    """0.4.4.post2-0.4.5 ship placeholder KVSender / KVReceiver classes only: the KV sender and the wire are code the
    release does not have (absent), never 'no driver': the bootstrap queue initialises a placeholder sender."""
    code = (
        "import json\n"
        "from pdverify.targets.sglang_release import sglang_release_target\n"
        "print(json.dumps(dict(sglang_release_target().unit_sources)))\n"
    )
    sources, _ = fake_release(tmp_path, "0.4.5", code)
    for unit in ("kv_sender", "bootstrap", "wire_roundtrip", "send_kv_chunk", "decode_page_indices"):
        assert "sglang 0.4.5 has no KV transport" in sources[unit] and "no driver" not in sources[unit], sources[unit]


def test_release_target_resolves_an_old_release_layout(tmp_path: Path) -> None:
    """The release-aware target on a stand-in 0.5.10 tree: page helpers from disaggregation/utils.py called on
    host arrays, prepare_for_prebuilt_extend over the all-era request layout, every other unit absent with why."""
    code = (
        "import json\n"
        "from pdverify.targets.sglang_release import sglang_release_target\n"
        "t = sglang_release_target()\n"
        "print(json.dumps({'release': t.release, 'layout': t.layout, 'sources': dict(t.unit_sources),\n"
        "                  'supplies': [u for u in ('kv_to_page_indices', 'kv_to_page_num', 'page_align_floor',\n"
        "                               'prepare_for_prebuilt', 'send_kv_chunk') if t.supplies(u)]}))\n"
    )
    got, env = fake_release(tmp_path, "0.5.10", code)
    assert got["release"] == "0.5.10" and got["layout"] == "sglang-any"
    # the chunk sender's drivers cover 0.5.10's inline forms (sglang_inline_units): supplied, run at call time
    assert got["supplies"] == ["kv_to_page_indices", "kv_to_page_num", "prepare_for_prebuilt", "send_kv_chunk"]
    sources = got["sources"]
    assert sources["kv_to_page_indices"].endswith("utils.kv_to_page_indices (on .cpu().numpy(), as its call sites)")
    assert sources["prepare_for_prebuilt"].endswith(
        "ScheduleBatchDisaggregationDecodeMixin.prepare_for_prebuilt_extend"
    )
    assert sources["send_kv_chunk"].endswith("sglang_inline_send_kv_chunk (drives sglang 0.5.10's own methods)")
    assert sources["decode_queue"].endswith("sglang_decode_queue (drives sglang 0.5.10's own methods)")
    assert sources["prefill_exchange"].endswith("sglang_prefill_exchange (drives sglang 0.5.10's own methods)")
    # every unit without a driver says which form the release's code has there
    undriven = {u: why for u, why in sources.items() if "no driver" in why}
    assert sources["decode_prealloc"].endswith("sglang_decode_prealloc (drives sglang 0.5.10's own methods)")
    assert not undriven, undriven  # every unit 0.5.10 has is driven (the prefill exchange too, since stop 39)
    assert "has no page_align_floor" in sources["page_align_floor"]
    report = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "pdverify.cli.main", "check", "--target", "sglang", "--profile", "ci", "--device",
           "cpu", "-k", "p1_ or p6_ or s21_ or p22", "--report", str(report)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    statuses = {p["id"]: (p["status"], p["message"]) for p in json.loads(report.read_text())["properties"]}
    assert statuses["P1"][0] == "passed"
    assert statuses["P6"][0] == "not applicable" and "has no page_align_floor" in statuses["P6"][1]
    assert "contract before the early cached-prefix send" in statuses["S21"][1]
    assert "contract before upstream #35070" in statuses["P22"][1]
