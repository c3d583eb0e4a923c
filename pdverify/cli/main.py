"""The ``pdverify`` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from pdverify.cli import exitcodes
from pdverify.profiles import PROFILES, default_profile

BENCH_DEFAULT = "legacy,pdverify,fast,sglang"


class _Parser(argparse.ArgumentParser):
    """Bad input is one line naming the problem, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(exitcodes.USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _writable_dir(path: str) -> Path:
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / ".pdverify-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise _OutputError(f"cannot write to directory {path!r}: {exc.strerror or exc}") from None
    return p


def _writable_file(path: str) -> Path:
    p = Path(path)
    _writable_dir(str(p.parent) if str(p.parent) else ".")
    if p.is_dir():
        raise _OutputError(f"report path {path!r} is a directory")
    return p


class _OutputError(Exception):
    pass


def _number(kind: type[int] | type[float], minimum: float, *, above: bool = False) -> Callable[[str], int | float]:
    """An argparse type: a number of ``kind`` at least ``minimum`` (more than it, with ``above``)."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if value < minimum or (above and value == minimum):
            raise argparse.ArgumentTypeError(f"{text} must be {'>' if above else '>='} {minimum:g}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _early_errors(args: argparse.Namespace) -> str | None:
    """What is wrong with the command line, found before torch or any property module is imported (the target's
    form, the ``-k`` selection); None when nothing is."""
    from pdverify.cli.selection import BUILTIN_TARGETS, matches, target_spec_error

    if getattr(args, "target", None) is not None:
        problem = target_spec_error(args.target)
        if problem:
            return f"--target: {problem}"
    if args.command == "bench":
        unknown = [n for n in args.targets.split(",") if n and target_spec_error(n)]
        if unknown or not [n for n in args.targets.split(",") if n]:
            return (
                f"--targets: unknown target(s) {', '.join(map(repr, unknown)) or '(none given)'}; use "
                f"{', '.join(BUILTIN_TARGETS)}, mutant:ID or package.module:attr"
            )
    for module in [m for m in (getattr(args, "fields", "") or "").split(",") if m]:
        import importlib.util

        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return f"--fields: no module {module!r} on the path (a module that registers request fields)"
    keyword = getattr(args, "keyword", None)
    if keyword is not None:
        try:
            selected = matches(keyword)
        except ValueError as exc:
            return str(exc)
        if selected is not None and not selected:
            return f"-k {keyword!r} selects no property (pdverify list shows each property's -k name)"
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="pdverify",
        description="Property-based verification of SGLang's PD disaggregation data paths.",
        epilog=exitcodes.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    check = sub.add_parser(
        "check",
        help="run the property suite on a target",
        epilog=exitcodes.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument(
        "--target", default="pdverify", help="pdverify, legacy, pr35070, fast, sglang, mutant:ID or module:attr"
    )
    check.add_argument("--profile", choices=sorted(PROFILES), default=None, help="Hypothesis settings profile")
    check.add_argument("--device", choices=("all", "cpu", "cuda"), default="all")
    check.add_argument("-k", dest="keyword", default=None, help="only properties matching this pytest -k expression")
    check.add_argument("--seed", type=int, default=None, help="Hypothesis seed (profiles that are not derandomized)")
    check.add_argument(
        "--timeout", type=_number(float, 0), default=60.0, help="per-example time limit in seconds (0: none)"
    )
    check.add_argument(
        "--fields",
        default="",
        metavar="MODULES",
        help="comma-separated modules that register request fields (imported in every worker); see docs/guide.md",
    )
    check.add_argument(
        "--known-findings",
        choices=("apply", "ignore"),
        default="apply",
        help="apply: failures a recorded finding explains are counted and the search goes on; ignore: plain failures",
    )
    check.add_argument("--report", default="pdverify-report.json", help="JSON run report path ('' for none)")
    check.add_argument("--export-regressions", metavar="DIR", default=None, help="write each failure as a pytest file")
    check.add_argument(
        "-n",
        "--jobs",
        type=_number(int, 0),
        default=0,
        metavar="N",
        help="run properties in N pytest-xdist workers (0: serial)",
    )

    fuzz = sub.add_parser("fuzz", help="a HypoFuzz campaign over the property suite for a fixed time")
    fuzz.add_argument("--target", default="pdverify", help="as for check")
    fuzz.add_argument("--minutes", type=_number(float, 0, above=True), default=10.0, help="campaign length")
    fuzz.add_argument("--workers", type=_number(int, 1), default=min(2, os.cpu_count() or 1), help="fuzzing processes")
    fuzz.add_argument("-k", dest="keyword", default=None, help="only properties matching this pytest -k expression")
    fuzz.add_argument(
        "--sample", type=_number(float, 0, above=True), default=30.0, help="seconds between progress samples"
    )
    fuzz.add_argument("--json", default=None, help="write the campaign's figures as JSON here")

    sub.add_parser("list", help="the properties: id, title, the target units they need, the contract they encode")

    mutate = sub.add_parser("mutate", help="run the suite against every catalogued mutant and print the mutation score")
    mutate.add_argument("--profile", choices=sorted(PROFILES), default="mutate")
    mutate.add_argument(
        "--only",
        default=None,
        help="only mutants whose id or function contains this text (several: comma-separated, e.g. XO01,XQ2)",
    )
    mutate.add_argument("--jobs", type=_number(int, 1), default=min(2, os.cpu_count() or 1), help="worker processes")
    mutate.add_argument("--json", default=None, help="write the per-mutant results as JSON here")
    mutate.add_argument(
        "--generation-only",
        action="store_true",
        help="measure examples-to-failure with generated examples alone (no explicit examples), per seed",
    )
    mutate.add_argument("--seeds", type=_number(int, 1), default=3, help="seeds per mutant (--generation-only)")
    mutate.add_argument("--md", default=None, help="write the Markdown table here (--generation-only)")

    bench = sub.add_parser(
        "bench", help="legacy, pdverify, fast and sglang side by side: bytes, copies, launches, time"
    )
    bench.add_argument("--targets", default=BENCH_DEFAULT, help="comma-separated target names")
    bench.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    bench.add_argument("--quick", action="store_true", help="a reduced grid (CI)")
    bench.add_argument("--repeats", type=_number(int, 1), default=5)
    bench.add_argument("--json", default=None, help="write the cells as JSON here")

    cover = sub.add_parser("coverage", help="HTML, Cobertura XML and a per-function Markdown summary of coverage data")
    cover.add_argument("--data", default=".coverage", help="coverage data file (combined into, with --combine)")
    cover.add_argument("--combine", nargs="*", default=[], help="data files of labelled runs to combine first")
    cover.add_argument("--functions", nargs="+", default=["pdverify"],
                       help="function sets (pdverify, sglang) or module:qualname entries")  # fmt: skip
    cover.add_argument("--out", default="reports/coverage", help="output directory")
    cover.add_argument("--title", default="Coverage of the PD disaggregation paths")
    cover.add_argument("--include", nargs="*", default=None, help="file patterns the reports are restricted to")
    cover.add_argument("--unreached", default=None,
                       help="JSON file explaining each branch not taken")  # fmt: skip
    cover.add_argument("--require-explained", action="store_true",
                       help="exit 1 when a branch not taken has no entry in --unreached")  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = _early_errors(args)
    if problem:
        code = exitcodes.TARGET if problem.startswith("--target:") else exitcodes.USAGE
        print(f"pdverify {args.command}: error: {problem}", file=sys.stderr)
        return code
    try:
        if args.command == "check":
            return _check(args)
        if args.command == "coverage":
            return _coverage(args)
        if args.command == "bench":
            return _bench(args)
        if args.command == "list":
            return _list()
        if args.command == "fuzz":
            return _fuzz(args)
        return _mutate(args)
    except _OutputError as exc:
        print(f"pdverify: error: {exc}", file=sys.stderr)
        return exitcodes.OUTPUT


def _check(args: argparse.Namespace) -> int:
    """``pdverify check``; a SIGINT or SIGTERM at any point (imports and target loading included) ends it with
    exit 130 / 143 and, when a report was asked for, a report whose status is ``interrupted``."""
    from pdverify.cli import interrupt

    with interrupt.interruptible():
        try:
            return _check_run(args)
        except KeyboardInterrupt:
            print(f"pdverify check: interrupted by {interrupt.describe()} before any property ran", file=sys.stderr)
            if args.report:
                _write_interrupted_report(args, interrupt.exit_code())
            return interrupt.exit_code()


def _write_interrupted_report(args: argparse.Namespace, code: int) -> None:
    import datetime as dt
    import json

    report = {
        "schema": "pdverify-report/1",
        "target": {"spec": args.target, "name": args.target, "description": "", "package": "", "package_version": None,
                   "supplies": []},
        "device": args.device, "profile": args.profile or default_profile(), "seed": args.seed or "derandomized",
        "started": dt.datetime.now(dt.UTC).isoformat(), "duration_s": 0.0, "exit_code": code, "status": "interrupted",
        "message": "interrupted before any property ran",
        "versions": {"pdverify": None, "torch": None, "numpy": None, "hypothesis": None, "python": None},
        "summary": {}, "properties": [],
    }  # fmt: skip
    Path(args.report).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")


def _check_run(args: argparse.Namespace) -> int:
    from pdverify.cli.check import run_check
    from pdverify.devices import cuda_available
    from pdverify.targets import TargetError, load_target

    profile = args.profile or default_profile()
    if profile not in PROFILES:
        print(f"pdverify: error: unknown profile {profile!r} (from PDVERIFY_PROFILE)", file=sys.stderr)
        return exitcodes.USAGE
    if args.device == "cuda" and not cuda_available():
        print("pdverify: error: --device cuda but torch.cuda.is_available() is False here", file=sys.stderr)
        return exitcodes.USAGE
    if args.jobs:
        import importlib.util

        if importlib.util.find_spec("xdist") is None:
            print("pdverify: error: -n needs pytest-xdist (pip install pytest-xdist)", file=sys.stderr)
            return exitcodes.USAGE
    report = _writable_file(args.report) if args.report else None
    export = _writable_dir(args.export_regressions) if args.export_regressions else None
    try:
        target = load_target(args.target)
    except TargetError as exc:
        print(f"pdverify: error: {exc}", file=sys.stderr)
        return exitcodes.TARGET
    return run_check(
        target,
        args.target,
        profile=profile,
        device=args.device,
        keyword=args.keyword,
        seed=args.seed,
        timeout=args.timeout,
        known_findings=args.known_findings,
        fields=args.fields,
        report_path=report,
        export_dir=export,
        jobs=args.jobs,
    )


def _fuzz(args: argparse.Namespace) -> int:
    from pdverify.cli.fuzz import run_fuzz

    out = _writable_file(args.json) if args.json else None
    return run_fuzz(
        target=args.target,
        minutes=args.minutes,
        workers=args.workers,
        keyword=args.keyword,
        sample=args.sample,
        json_path=out,
    )


def _list() -> int:
    from pdverify.cli.render import render_list, use_colour
    from pdverify.runner import load_properties

    print(render_list(list(load_properties().values()), colour=use_colour(sys.stdout)))
    return exitcodes.OK


def _bench(args: argparse.Namespace) -> int:
    from pdverify.cli.bench import run_bench
    from pdverify.devices import cuda_available

    if args.device == "cuda" and not cuda_available():
        print("pdverify: error: --device cuda but torch.cuda.is_available() is False here", file=sys.stderr)
        return exitcodes.USAGE
    out = _writable_file(args.json) if args.json else None
    names = [n for n in args.targets.split(",") if n]
    # targets named on the command line must load; the default list skips a release that is not installed
    explicit = args.targets != BENCH_DEFAULT
    return run_bench(
        names=names, device=args.device, quick=args.quick, repeats=args.repeats, json_path=out, strict=explicit
    )


def _coverage(args: argparse.Namespace) -> int:
    from pdverify.cli.coverage import FUNCTION_SETS, run_coverage

    functions: list[str] = []
    for name in args.functions:
        if name in FUNCTION_SETS:
            functions += FUNCTION_SETS[name]
        elif ":" in name:
            functions.append(name)
        else:
            print(
                f"pdverify: error: unknown function set {name!r} (known: {', '.join(FUNCTION_SETS)})", file=sys.stderr
            )
            return exitcodes.USAGE
    data = Path(args.data)
    if not data.exists() and not args.combine:
        print(f"pdverify: error: no coverage data at {args.data!r}", file=sys.stderr)
        return exitcodes.USAGE
    out = _writable_dir(args.out)
    unreached = Path(args.unreached) if args.unreached else None
    if unreached is not None and not unreached.is_file():
        print(f"pdverify: error: --unreached: no file {args.unreached!r}", file=sys.stderr)
        return exitcodes.USAGE
    return run_coverage(
        data,
        functions,
        out,
        [Path(p) for p in args.combine],
        args.title,
        include=args.include,
        unreached_file=unreached,
        require_explained=args.require_explained,
    )


def _mutate(args: argparse.Namespace) -> int:
    from pdverify.cli.mutate import run_mutate

    out = _writable_file(args.json) if args.json else None
    if args.generation_only:
        from pdverify.cli.mutate import run_generation_only

        md = _writable_file(args.md) if args.md else None
        seeds = [20261201 + k for k in range(args.seeds)]
        return run_generation_only(only=args.only, jobs=args.jobs, seeds=seeds, json_path=out, md_path=md)
    return run_mutate(profile=args.profile, only=args.only, jobs=args.jobs, json_path=out)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
