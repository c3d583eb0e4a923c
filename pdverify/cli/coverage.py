"""``pdverify coverage``: reports of the disaggregation paths from coverage.py data.

Combines labelled runs (``coverage run --context=cpu`` / ``--context=cuda`` or data files from several
runners, paths mapped by ``[tool.coverage.paths]``), writes an HTML report, a Cobertura XML and a Markdown
summary per function under test (lines and branches, from coverage's own per-function JSON regions).
"""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

FUNCTION_SETS: dict[str, list[str]] = {
    "pdverify": [
        "pdverify.production.page_index:kv_to_page_indices",
        "pdverify.production.page_index:suffix_page_indices",
        "pdverify.production.page_index:kv_to_page_num",
        "pdverify.production.page_index:page_align_floor",
        "pdverify.production.page_index:minimax_index_transfer_pages",
        "pdverify.production.transfer:select_chunk",
        "pdverify.production.transfer:decode_page_indices",
        "pdverify.production.prebuilt:prepare_for_prebuilt",
        "pdverify.production.fast:kv_to_page_indices_int32",
        "pdverify.production.fast:prepare_for_prebuilt",
        "pdverify.production.prefill_sender:prefill_exchange",
        "pdverify.production.prefill_sender:send_kv_chunk",
        "pdverify.production.prefill_sender:maybe_send_cached_prefix_chunk",
        "pdverify.production.prefill_sender:grid_segments",
        "pdverify.production.wire:build_frames",
        "pdverify.production.wire:parse_frames",
        "pdverify.production.decode_prealloc:decode_prealloc",
        "pdverify.production.translate:translate_token_ids",
        "pdverify.production.decode_queue:PreallocPass.run",
        "pdverify.production.decode_queue:PreallocPass.verdict",
        "pdverify.production.decode_queue:PreallocPass.fail_aborted",
        "pdverify.production.decode_queue:PreallocPass.allocate",
    ],
    "sglang": [
        "sglang.srt.disaggregation.decode_schedule_batch_mixin:ScheduleBatchDisaggregationDecodeMixin.prepare_for_prebuilt",
        "sglang.srt.mem_cache.common:kv_to_page_indices",
        "sglang.srt.mem_cache.common:suffix_page_indices",
        "sglang.srt.mem_cache.common:kv_to_page_num",
        "sglang.srt.mem_cache.common:page_align_floor",
        "sglang.srt.disaggregation.minimax:minimax_index_transfer_pages",
        "sglang.srt.disaggregation.prefill:PrefillBootstrapQueue.ensure_metadata_buffer",
        "sglang.srt.disaggregation.prefill:PrefillBootstrapQueue.finalize_bootstrap",
        "sglang.srt.disaggregation.prefill:PrefillBootstrapQueue._num_pages_to_send",
        "sglang.srt.disaggregation.prefill:SchedulerDisaggregationPrefillMixin.maybe_send_cached_prefix_chunk",
        "sglang.srt.disaggregation.prefill:SchedulerDisaggregationPrefillMixin.send_kv_chunk",
        "sglang.srt.disaggregation.prefill:SchedulerDisaggregationPrefillMixin._send_kv_chunk",
        "sglang.srt.disaggregation.common.conn:CommonKVSender.__init__",
        "sglang.srt.disaggregation.common.conn:CommonKVSender.init",
        "sglang.srt.disaggregation.common.conn:CommonKVSender.pop_decode_prefix_len",
        "sglang.srt.disaggregation.common.conn:CommonKVSender.get_max_transfer_tokens",
        "sglang.srt.disaggregation.common.conn:CommonKVSender.should_send_kv_chunk",
        "sglang.srt.disaggregation.common.conn:CommonKVSender._prepare_send_indices",
        "sglang.srt.disaggregation.common.conn:CommonKVSender.send",
        "sglang.srt.disaggregation.common.staging_buffer:compute_grid_segments",
        "sglang.kernels.ops.memory.virtual_slot:translate_token_ids",
        "sglang.srt.disaggregation.common.staging_buffer:staging_grid_tokens",
        "sglang.srt.disaggregation.mooncake.conn:MooncakeKVManager.build_receiver_metadata_message",
        "sglang.srt.disaggregation.mooncake.conn:TransferInfo.from_zmq",
        "sglang.srt.disaggregation.common.utils:pack_int_lists",
        "sglang.srt.disaggregation.common.utils:unpack_int_lists",
        "sglang.srt.disaggregation.common.utils:pack_list_of_buffers",
        "sglang.srt.disaggregation.common.utils:unpack_list_of_buffers",
        "sglang.srt.disaggregation.decode:DecodePreallocQueue.pop_preallocated",
        "sglang.srt.disaggregation.decode:DecodePreallocQueue._pre_alloc",
        "sglang.srt.disaggregation.decode:DecodePreallocQueue._pre_alloc_fill_len",
        "sglang.srt.disaggregation.decode:DecodePreallocQueue._rebootstrap_prefill_len",
        "sglang.srt.disaggregation.decode:DecodePreallocQueue._required_alloc_tokens",
        "sglang.srt.disaggregation.decode:DecodePreallocQueue._required_admission_tokens",
        "sglang.srt.disaggregation.decode:DecodePreallocQueue._prealloc_reservation_fits",
        "sglang.srt.disaggregation.decode:DecodePreallocQueue._send_kv_metadata",
        "sglang.srt.disaggregation.decode:DecodePreallocQueue._transfer_page_indices",
        "sglang.srt.disaggregation.decode:DecodePreallocQueue._match_prefix_and_lock",
        "sglang.srt.mem_cache.common:match_kv_cache",
        "sglang.srt.disaggregation.decode:alloc_for_decode_prealloc",
        "sglang.srt.disaggregation.decode:DecodeTransferQueue.pop_transferred",
        "sglang.srt.disaggregation.decode:DecodeTransferQueue._commit_transfer_to_req",
        "sglang.srt.disaggregation.utils:_apply_metadata_gate",
        "sglang.srt.disaggregation.decode_hicache_mixin:DecodeHiCachePreallocMixin._start_hicache_prefetch",
        "sglang.srt.disaggregation.decode_hicache_mixin:DecodeHiCachePreallocMixin._hicache_pending_restore_tokens",
        "sglang.srt.managers.io_struct:GenerateReqInput._normalize_bootstrap_params",
        "sglang.srt.managers.tokenizer_manager:TokenizerManager._handle_batch_request",
    ],
}


UNREACHABLE = "unreachable on CPU"
NOT_DRIVEN = "not driven"
REFUSED = "refused by the server"
"""A branch only configurations the release refuses to start with can take (``targets.ServerRefuses``): out of
the reachable total, as a branch unreachable on CPU is."""
NO_CALLER = "no caller"
"""A branch only an argument no caller in the release passes can take (the unit still takes it:
``releases.UNMADE_FROM``): out of the reachable total too."""
OUT_OF_REACH = (UNREACHABLE, REFUSED, NO_CALLER)
UNEXPLAINED = "UNEXPLAINED"


@dataclass(frozen=True)
class Unreached:
    """A branch the run did not take, and why (an entry of the ``--unreached`` file, or ``UNEXPLAINED``)."""

    function: str
    line: int
    target: int
    source: str
    kind: str
    reason: str


@dataclass(frozen=True)
class FunctionCoverage:
    function: str
    statements: int
    covered_lines: int
    branches: int
    covered_branches: int
    contexts: tuple[str, ...] = ()
    unreachable: int = 0
    """Branches not taken that cannot be taken on CPU (``--unreached`` entries of that kind)."""

    @property
    def reachable_pct(self) -> float:
        reachable = self.branches - self.unreachable
        return 100.0 * self.covered_branches / reachable if reachable else 100.0

    @property
    def line_pct(self) -> float:
        return 100.0 * self.covered_lines / self.statements if self.statements else 100.0

    @property
    def branch_pct(self) -> float:
        return 100.0 * self.covered_branches / self.branches if self.branches else 100.0


def _module_file(module: str) -> str:
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        spec = None
    if spec is None or spec.origin is None:
        raise ValueError(f"cannot locate module {module!r} (is it installed in this environment?)")
    return os.path.realpath(spec.origin)


def summarize(
    report: dict[str, Any], functions: list[str], contexts: dict[str, set[str]] | None = None
) -> list[FunctionCoverage]:
    """Per-function coverage out of a coverage.py JSON report (``files[...]["functions"]``)."""
    by_path = {os.path.realpath(k): v for k, v in report["files"].items()}
    out = []
    for spec in functions:
        module, _, qualname = spec.partition(":")
        try:
            entry = by_path.get(_module_file(module))
        except ValueError:
            entry = None
        region = (entry or {}).get("functions", {}).get(qualname)
        if region is None:
            out.append(FunctionCoverage(spec, 0, 0, 0, 0))
            continue
        s = region["summary"]
        out.append(
            FunctionCoverage(
                spec, s["num_statements"], s["covered_lines"], s.get("num_branches", 0), s.get("covered_branches", 0),
                tuple(sorted((contexts or {}).get(spec, set()))),
            )
        )  # fmt: skip
    return out


def load_unreached(path: Path) -> list[dict[str, Any]]:
    """The ``--unreached`` file's entries: ``function`` (a qualname suffix), ``branch`` (a substring of the line
    the branch leaves), optional ``line``, ``kind`` (``unreachable on CPU``, ``not driven``, ``refused by the
    server`` or ``no caller``) and ``reason``."""
    entries: list[dict[str, Any]] = json.loads(path.read_text())["entries"]
    for i, e in enumerate(entries):
        missing = [k for k in ("function", "branch", "kind", "reason") if not e.get(k)]
        if missing or e["kind"] not in (*OUT_OF_REACH, NOT_DRIVEN):
            raise ValueError(
                f"{path}: entry {i} needs function, branch, reason and a kind of {UNREACHABLE!r}, {NOT_DRIVEN!r}, "
                f"{REFUSED!r} or {NO_CALLER!r}: {e}"
            )
    return entries


def _regions(report: dict[str, Any], functions: list[str]) -> list[tuple[str, str, dict[str, Any]]]:
    """``(spec, real path, coverage region)`` of each function the report measured."""
    by_path = {os.path.realpath(k): v for k, v in report["files"].items()}
    out = []
    for spec in functions:
        module, _, qualname = spec.partition(":")
        try:
            path = _module_file(module)
        except ValueError:
            continue
        region = by_path.get(path, {}).get("functions", {}).get(qualname)
        if region:
            out.append((spec, path, region))
    return out


def stale_entries(unreached: list[Unreached], entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries that explain no branch the run left untaken: the branch is taken now (or the entry never matched),
    so the explanation no longer describes the run and must go."""
    chosen = set()
    for u in unreached:
        qualname = u.function.partition(":")[2]
        first = next((k for k, e in enumerate(entries) if _matches(e, qualname, u.source, u.line)), None)
        if first is not None:
            chosen.add(first)
    return [e for k, e in enumerate(entries) if k not in chosen]


def _matches(entry: dict[str, Any], qualname: str, source: str, line: int) -> bool:
    return bool(qualname.endswith(entry["function"]) and entry["branch"] in source and entry.get("line", line) == line)


def unreached_branches(report: dict[str, Any], functions: list[str], entries: list[dict[str, Any]]) -> list[Unreached]:
    """Every branch of ``functions`` the run did not take, each matched to its explanation."""
    import linecache

    out = []
    for spec, path, region in _regions(report, functions):
        qualname = spec.partition(":")[2]
        for line, target in region.get("missing_branches", []):
            source = linecache.getline(path, line).strip()
            match = next((e for e in entries if _matches(e, qualname, source, line)), None)
            kind, reason = (match["kind"], match["reason"]) if match else (UNEXPLAINED, "no entry explains it")
            out.append(Unreached(spec, line, target, source, kind, reason))
    return out


def markdown(rows: list[FunctionCoverage], title: str, unreached: list[Unreached] | None = None) -> str:
    explained = unreached is not None
    head = "| function | lines | branches | run labels |"
    if explained:
        head = "| function | lines | branches | of the branches reachable on CPU | run labels |"
    lines = [f"### {title}", "", head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        if r.statements == 0:
            lines.append(f"| `{r.function}` | not measured | not measured |{' |' if explained else ''} |")
            continue
        reach = f" {r.covered_branches}/{r.branches - r.unreachable} ({r.reachable_pct:.0f}%) |" if explained else ""
        lines.append(
            f"| `{r.function}` | {r.covered_lines}/{r.statements} ({r.line_pct:.0f}%) | "
            f"{r.covered_branches}/{r.branches} ({r.branch_pct:.0f}%) |{reach} {', '.join(r.contexts) or '-'} |"
        )
    if unreached is not None:
        covered = sum(r.covered_branches for r in rows)
        total = sum(r.branches for r in rows)
        reachable = total - sum(r.unreachable for r in rows)
        kinds = {k: sum(1 for u in unreached if u.kind == k) for k in (*OUT_OF_REACH, NOT_DRIVEN, UNEXPLAINED)}
        lines += [
            "",
            f"All functions: {covered}/{total} branches ({100.0 * covered / max(total, 1):.1f}%); of the {reachable} "
            f"reachable on CPU in a configuration the release starts with and from an input its callers make, "
            f"{covered} ({100.0 * covered / max(reachable, 1):.1f}%). Branches not taken: "
            f"{kinds[UNREACHABLE]} unreachable on CPU, {kinds[REFUSED]} refused by the server (configurations the "
            f"release does not start with), {kinds[NO_CALLER]} taken only by an argument no caller in the release "
            f"passes, {kinds[NOT_DRIVEN]} not driven, "
            f"{kinds[UNEXPLAINED]} unexplained.",
            "",
            "#### Branches not taken",
            "",
            "| function | line | leaves | kind | why |",
            "|---|---|---|---|---|",
        ]
        for u in unreached:
            src = u.source.replace("|", "\\|")[:90]
            lines.append(f"| `{u.function.split(':')[-1]}` | {u.line}->{u.target} | `{src}` | {u.kind} | {u.reason} |")
    return "\n".join(lines) + "\n"


def _contexts_per_function(cov: Any, report: dict[str, Any], functions: list[str]) -> dict[str, set[str]]:
    """Which run labels (coverage contexts) executed each function's lines."""
    data = cov.get_data()
    out: dict[str, set[str]] = {}
    measured = {os.path.realpath(f): f for f in data.measured_files()}
    for spec, path, region in _regions(report, functions):
        if path not in measured:
            continue
        lines = set(region.get("executed_lines", []))
        per_line = data.contexts_by_lineno(measured[path])
        labels = {c for ln in lines for c in per_line.get(ln, []) if c}
        out[spec] = labels
    return out


def run_coverage(
    data: Path,
    functions: list[str],
    out: Path,
    combine: list[Path],
    title: str,
    echo: Any = print,
    include: list[str] | None = None,
    unreached_file: Path | None = None,
    require_explained: bool = False,
) -> int:
    import coverage

    cov = coverage.Coverage(data_file=str(data))
    if combine:
        cov.combine([str(p) for p in combine], keep=True)
        cov.save()
    cov.load()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        json_path = Path(tmp) / "coverage.json"
        cov.json_report(outfile=str(json_path), show_contexts=True, include=include)
        report = json.loads(json_path.read_text())
    cov.html_report(directory=str(out / "html"), show_contexts=True, include=include)
    cov.xml_report(outfile=str(out / "coverage.xml"), include=include)
    rows = summarize(report, functions, _contexts_per_function(cov, report, functions))
    unreached = None
    stale: list[dict[str, Any]] = []
    if unreached_file is not None:
        entries = load_unreached(unreached_file)
        unreached = unreached_branches(report, functions, entries)
        stale = stale_entries(unreached, entries)
        cannot = {f: sum(1 for u in unreached if u.function == f and u.kind in OUT_OF_REACH) for f in functions}
        rows = [replace(r, unreachable=cannot.get(r.function, 0)) for r in rows]
    text = markdown(rows, title, unreached)
    (out / "summary.md").write_text(text)
    echo(text)
    echo(f"html: {out / 'html' / 'index.html'}\ncobertura xml: {out / 'coverage.xml'}\nmarkdown: {out / 'summary.md'}")
    missing = [r.function for r in rows if r.statements == 0]
    if missing:
        echo(f"not measured (not imported or outside --source): {', '.join(missing)}")
        return 1
    unexplained = [u for u in unreached or [] if u.kind == UNEXPLAINED]
    for u in unexplained:
        echo(f"UNEXPLAINED branch {u.function}:{u.line}->{u.target} ({u.source})")
    for e in stale:
        echo(f"STALE entry in {unreached_file}: {e['function']} '{e['branch']}' explains no branch left untaken")
    return 1 if require_explained and (unexplained or stale) else 0
