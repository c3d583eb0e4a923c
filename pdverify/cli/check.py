"""``pdverify check``: run the property suite on a target through pytest and report every property.

A thin layer: pytest collects and runs ``pdverify/properties`` with the pdverify plugin; a collector plugin
reads each test's outcome, examples, counterexample and classification back; this module prints the table,
writes the JSON report and (on request) exports each failure as a standalone regression test.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.metadata
import io
import random
import re
import shlex
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pdverify.cli import exitcodes, interrupt
from pdverify.cli.render import Progress, compact, id_order, render_table, terminal_width, use_colour
from pdverify.cli.report import PropertyResult, build_report, version_of, write_report
from pdverify.plugin import NOT_APPLICABLE
from pdverify.profiles import PROFILES, restoring_default_profile
from pdverify.properties.registry import EXAMPLES, PROPERTIES, all_discarded, discarded_message
from pdverify.runner import load_properties
from pdverify.targets import FUNCTIONS, Target

PROPERTIES_DIR = Path(__file__).resolve().parent.parent / "properties"


class Collector:
    """Reads pytest's per-test reports back into ``PropertyResult``s.

    Everything it reads travels in the reports' ``user_properties`` (plain values), so the same collector
    serves a serial run and a pytest-xdist run, where the reports come from worker processes.
    """

    def __init__(self, progress: Progress | None = None) -> None:
        self.results: dict[str, PropertyResult] = {}
        self.progress = progress
        self.collected: list[str] = []
        """The node ids selected to run, in order (known once collection finished)."""
        self.finished: set[str] = set()
        """The node ids whose run protocol completed (setup, call, teardown)."""
        self.fields: dict[str, int] = {}
        """Registered request fields and how many times the run drew each."""

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.items:  # a pytest-xdist controller collects nothing itself: XdistCollection tells it
            self.selected([item.nodeid for item in session.items])

    def selected(self, nodeids: list[str]) -> None:
        if not self.collected:
            self.collected = list(nodeids)
            if self.progress is not None:
                self.progress.total = len(nodeids)

    def _result(self, item_or_report: Any) -> PropertyResult:
        nodeid = item_or_report.nodeid
        if nodeid not in self.results:
            name = nodeid.split("::")[-1]
            test, _, device = name.partition("[")
            self.results[nodeid] = PropertyResult(test, "", test, device.rstrip("]") or "-", "passed", 0, 0.0)
        return self.results[nodeid]

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        if self.progress is not None:
            self.progress.start(nodeid.split("::")[-1])

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        self.finished.add(nodeid)
        if self.progress is not None:
            self.progress.finish()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        res = self._result(report)
        res.seconds += report.duration
        props: dict[str, Any] = dict(report.user_properties)
        res.examples = max(res.examples, int(props.get("pdverify_examples", 0) or 0))
        res.outside = max(res.outside, int(props.get("pdverify_outside", 0) or 0))
        res.refused = max(res.refused, int(props.get("pdverify_refused", 0) or 0))
        res.inputs = str(props.get("pdverify_inputs") or res.inputs)
        res.findings = dict(props.get("pdverify_findings") or res.findings)
        for name, count in (props.get("pdverify_fields") or {}).items():
            self.fields[name] = self.fields.get(name, 0) + int(count)
        if props.get("pdverify_first_failure") is not None:
            res.first_failure = int(props["pdverify_first_failure"])
        res.calls = sorted(set(res.calls) | set(props.get("pdverify_calls") or ()))
        res.clauses = list(props.get("pdverify_clauses") or res.clauses)
        if report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            reason = reason.removeprefix("Skipped: ")
            res.status = str(
                props.get("pdverify_status") or ("not applicable" if NOT_APPLICABLE in reason else "skipped")
            )
            res.message = reason
        elif report.failed and report.when == "call" and all_discarded(res.examples, res.outside, res.refused):
            res.status = "no examples"
            res.message = discarded_message(res.examples, res.outside, res.refused, props.get("pdverify_refusal", ""))
        elif report.failed:
            res.status = str(props.get("pdverify_status", "error" if report.when != "call" else "failed"))
            text = report.longreprtext
            failures = list(props.get("pdverify_failures") or ())
            res.message = str(props.get("pdverify_error_in") or _headline(text))
            res.counterexample = _counterexample(text) if len(failures) < 2 else failures[0]["counterexample"]
            res.failures = failures if len(failures) > 1 else []
            res.kwargs = props.get("pdverify_args")
        elif report.when == "call" and props.get("pdverify_status") == "known defect":
            res.status = "known defect"
            res.message = (
                "; ".join(
                    f"{fid} reproduced on {n['reproduced']} examples (of {n['matched']} in its signature)"
                    for fid, n in res.findings.items()
                    if n["reproduced"]
                )
                + f"; no other failure in {res.examples} examples"
            )
        elif report.when == "call" and res.status == "passed" and res.examples == 0 and props.get("pdverify_property"):
            res.status = "no examples"
            res.message = "no example executed: every generated input was filtered or the run stopped at once"
        undriven = list(props.get("pdverify_undriven") or ())
        if report.when == "call" and undriven and res.status in ("passed", "known defect"):
            res.status = "vacuous"
            res.message = (
                f"unit(s) {', '.join(undriven)} entered no function of the release under test in {res.examples} "
                "examples: the verdict says nothing about the release's code (a stand-in answered for it)"
            )

    def interrupted(self, signal_name: str) -> None:
        """Mark what an interrupt left unfinished: a property that started but did not complete is
        ``interrupted`` (never ``passed``), one that never started ``not run``."""
        for nodeid, res in self.results.items():
            if nodeid not in self.finished:
                res.status = "interrupted"
                res.message = f"interrupted by {signal_name} after {res.examples} examples: unfinished, not a pass"
        for nodeid in self.collected:
            if nodeid not in self.results:
                res = self._result(SimpleNamespace(nodeid=nodeid))
                res.status, res.message = "not run", f"not run: the run was interrupted by {signal_name}"


class XdistCollection:
    """Under pytest-xdist: the controller learns the selected node ids from the first worker's collection."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.collector.selected(list(ids))


def _headline(text: str) -> str:
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    firsts = [e for e in errors if e and not e.startswith(("+", "|", "assert", "where"))]
    return (firsts or errors or [text.strip().splitlines()[-1] if text.strip() else ""])[0][:500]


COUNTEREXAMPLE = re.compile(r"(Falsifying|Failing)( explicit)? (example|test case)")
"""How Hypothesis introduces a counterexample (the wording changed across releases)."""


def _counterexample(text: str) -> str:
    lines = [line[1:].rstrip() if line.startswith("E") else line.rstrip() for line in text.splitlines()]
    for i, line in enumerate(lines):
        if COUNTEREXAMPLE.search(line):
            block = [line]
            for nxt in lines[i + 1 :]:
                block.append(nxt)
                if nxt.strip() == ")":
                    break
            return textwrap.dedent("\n".join(block))
    return ""


def run_check(
    target: Target,
    spec: str,
    *,
    profile: str,
    device: str,
    keyword: str | None,
    seed: int | None,
    timeout: float,
    report_path: Path | None,
    known_findings: str = "apply",
    fields: str = "",
    export_dir: Path | None,
    jobs: int = 0,
    echo: Any = print,
) -> int:
    """Run the suite on ``target`` through pytest (``jobs`` > 0: that many pytest-xdist workers), print the
    table and failures, write the report and the regression files; return the exit code."""
    derandomized = bool(PROFILES[profile].get("derandomize"))
    chosen_seed: int | str = "derandomized" if derandomized else (seed if seed is not None else random.getrandbits(32))
    args = [
        str(PROPERTIES_DIR),
        "-p",
        "no:cacheprovider",
        "-q",
        "--tb=short",
        "--no-header",
        "-o",
        "python_files=test_*.py",
        f"--rootdir={PROPERTIES_DIR}",
        "--pdverify-target",
        spec,
        "--pdverify-device",
        device,
        "--pdverify-timeout",
        str(timeout),
        "--hypothesis-profile",
        profile,
        "--pdverify-known-findings",
        known_findings,
        "--pdverify-fields",
        fields,
    ]
    if not derandomized:
        args += ["--pdverify-seed", str(chosen_seed)]
    if keyword:
        args += ["-k", keyword]
    if jobs:
        args += ["-n", str(jobs)]
    if not importlib.metadata.entry_points(group="pytest11", name="pdverify"):
        args += ["-p", "pdverify.pytest_plugin"]  # run from a source tree (PYTHONPATH), not installed
    progress = Progress(total=0)
    collector = Collector(progress if progress.active else None)
    log = io.StringIO()
    started = dt.datetime.now(dt.UTC)
    t0 = time.perf_counter()
    # the nested pytest run loads its own profile; the caller's comes back afterwards
    with (
        restoring_default_profile(),
        progress,
        contextlib.redirect_stdout(log),
        contextlib.redirect_stderr(log),
    ):
        EXAMPLES.progress = progress.example if progress.active and not jobs else None
        saved = EXAMPLES.timeout, EXAMPLES.seed, EXAMPLES.known_findings
        plugins: list[Any] = [collector, XdistCollection(collector)] if jobs else [collector]
        try:
            code = pytest.main(args, plugins=plugins)
        except KeyboardInterrupt:  # outside the session pytest guards (its start or its end)
            code = pytest.ExitCode.INTERRUPTED
        finally:
            # the run's limit and seed stay with the run (an in-process caller runs properties afterwards)
            EXAMPLES.progress = None
            EXAMPLES.timeout, EXAMPLES.seed, EXAMPLES.known_findings = saved
            for info in PROPERTIES.values():
                if hasattr(info.test, "_hypothesis_internal_use_seed"):
                    info.test._hypothesis_internal_use_seed = None
    duration = time.perf_counter() - t0
    stopped = code == pytest.ExitCode.INTERRUPTED or bool(interrupt.RECEIVED)
    if stopped:
        collector.interrupted(interrupt.describe())
    # titles and declaration order, read after the run: importing the property modules before pytest loads the
    # profile would not change which profile runs (pdverify.plugin.bind_profile), but under xdist the
    # controller never imports them
    load_properties()
    results = sorted((_identify(r, target.release) for r in collector.results.values()), key=_id_order)
    base = ["pdverify", "check", "--target", spec, "--profile", profile]
    if not derandomized:
        base += ["--seed", str(chosen_seed)]
    for r in results:
        if r.status not in ("passed", "not applicable", "skipped"):
            again = ["--known-findings", "ignore"] if r.status == "known defect" else []
            r.reproduce = shlex.join([*base, "--device", r.device if r.device != "-" else device, *again, "-k", r.test])
    ran = [r for r in results if r.status not in ("not applicable", "skipped")]
    bad = [r for r in ran if r.status != "passed"]
    message = ""
    never_drawn = sorted(name for name, n in collector.fields.items() if not n)
    nothing_selected = code == pytest.ExitCode.NO_TESTS_COLLECTED and bool(keyword)
    if stopped:
        message = (
            f"interrupted by {interrupt.describe()} after {duration:.1f}s: unfinished and unrun properties are marked "
            "so; this run verified nothing past that point"
        )
    elif nothing_selected:
        message = f"-k {keyword!r} selects no property (pdverify list shows each property's -k name)"
    elif code in (pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR):
        message = f"pytest could not run the suite: {log.getvalue().strip().splitlines()[-1:]}"
    elif ran and never_drawn:
        message = (
            f"registered request field(s) {', '.join(never_drawn)} never drawn by the properties that ran: no property "
            "checked them (run the request-building properties, e.g. without -k)"
        )
    elif not ran:
        message = "no property ran on this target (all not applicable, deselected or skipped): nothing was verified"
    if stopped:
        exit_code = interrupt.exit_code()
    elif nothing_selected:
        exit_code = exitcodes.USAGE
    else:
        exit_code = exitcodes.FAILED if (bad or not ran or message) else exitcodes.OK

    width = terminal_width()

    interactive = bool(getattr(sys.stdout, "isatty", lambda: False)())

    def wrapped(text: str, indent: str = "  ") -> str:
        """Prose wrapped to the terminal; in a pipe or a CI log one line per message, for grep (a reproduce command
        always stays on one line, to copy)."""
        if not interactive:
            return text
        return "\n".join(textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False)) or text

    echo(
        wrapped(f"pdverify check: target {target.name!r} ({target.description}), profile {profile}, seed {chosen_seed}")
    )
    echo(render_table(results, colour=use_colour(sys.stdout)))
    unrun = [r for r in bad if r.status == "not run"]
    for r in bad:
        if r.status == "not run":
            continue
        echo("\n" + wrapped(f"[{r.status}] {r.id} {r.test}[{r.device}]: {r.message}"))
        if r.counterexample and not r.failures:
            echo("  " + compact(r.counterexample).replace("\n", "\n  "))
        for k, failure in enumerate(r.failures, 1):
            echo(wrapped(f"  failure {k} of {len(r.failures)} [{failure['status']}]: {failure['message']}", "    "))
            if failure["counterexample"]:
                echo("    " + compact(failure["counterexample"]).replace("\n", "\n    "))
        echo(f"  reproduce: {r.reproduce}")
    if unrun:
        echo(f"\n[not run] {len(unrun)} properties: " + ", ".join(f"{r.id}[{r.device}]" for r in unrun))
    counts = {s: sum(1 for r in results if r.status == s) for s in dict.fromkeys(r.status for r in results)}
    echo("\n" + ", ".join(f"{n} {s}" for s, n in counts.items()) + f" in {duration:.1f}s")
    if message:
        echo(f"pdverify check: {message}")

    if export_dir is not None:
        from pdverify.cli.export import export_regressions

        written, skipped = export_regressions(export_dir, spec, bad)
        for path in written:
            echo(f"exported regression: {path}")
        for why in skipped:
            echo(f"regression {why}")
    if report_path is not None:
        meta = {
            "target": {
                "spec": spec,
                "name": target.name,
                "description": target.description,
                "package": target.package,
                "package_version": version_of(target.package),
                "supplies": [f for f in FUNCTIONS if target.supplies(f)],
                "units": dict(target.unit_sources),
            },
            "device": device,
            "profile": profile,
            "seed": chosen_seed,
            "keyword": keyword,
            "known_findings": known_findings,
            "fields": dict(sorted(collector.fields.items())),
            "started": started.isoformat(),
            "duration_s": round(duration, 3),
            "exit_code": exit_code,
            "status": "interrupted" if stopped else "completed",
            "command": shlex.join(base + ["--device", device] + (["-k", keyword] if keyword else [])),
            "message": message,
        }
        write_report(report_path, build_report(meta, results))
        echo(f"report: {report_path}")
    return exit_code


def _identify(r: PropertyResult, release: str | None) -> PropertyResult:
    """The property id and title of a result (a test that is not a declared property keeps its name), and its
    clauses where the run reported none (a property that did not run: each clause not applicable, skipped or not
    run as the property was)."""
    info = next((p for p in PROPERTIES.values() if p.name == r.test), None)
    r.id, r.title = (info.id, info.title) if info else ("upstream", f"regression test {r.test}")
    if info is not None and not r.clauses:
        r.clauses = [
            {"name": c.name, "title": c.title, "contract": str(c.contract), "examples": 0,
             "why": c.contract.not_applicable(release) or "",
             "status": "not applicable" if c.contract.not_applicable(release) else r.status}
            for c in info.clauses
        ]  # fmt: skip
    return r


def _id_order(r: PropertyResult) -> tuple[bool, tuple[str, int, str], str, str]:
    """Properties by id (natural order: P2 before P10), then devices, tests that are not properties last: the same
    table for a serial and a parallel run."""
    return (r.id == "upstream", id_order(r.id), r.test, r.device)
