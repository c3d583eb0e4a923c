"""How ``pdverify check`` and ``pdverify list`` look: a table with titles wrapped at word boundaries (never cut),
statuses coloured on a terminal (``NO_COLOR`` respected), the rows of an absent device folded into one line,
and a progress line while properties run (terminal only).

Terminal output goes through Rich. Rich is optional: where it is not installed (an offline GPU runner that has
only the suite's core packages) the same table is printed as plain text, wrapped with ``textwrap``.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import sys
import textwrap
import time
from collections.abc import Sequence
from typing import IO, Any

from pdverify.cli.report import PropertyResult

STATUS_STYLE = {
    "passed": "green",
    "failed": "bold red",
    "known defect": "magenta",
    "interrupted": "bold yellow",
    "not run": "yellow",
    "error": "bold red",
    "timeout": "bold red",
    "flaky": "bold magenta",
    "no examples": "bold red",
    "vacuous": "bold red",
    "not applicable": "dim",
    "skipped": "yellow",
    "skipped (CUDA OOM)": "yellow",
}
TITLE_WIDTH = 64
ABSENT_DEVICE = "not available"
"""Words in the skip reason of a device that is not present (``pdverify.plugin``)."""


def _rich() -> Any:
    try:
        import rich.console
        import rich.markup
        import rich.table
    except ImportError:  # pragma: no cover - exercised on runners without rich (ci/gpu.sh --quick)
        return None
    return rich


def use_colour(stream: IO[str]) -> bool:
    """Colour only on a terminal, and never with ``NO_COLOR`` set (https://no-color.org)."""
    return bool(getattr(stream, "isatty", lambda: False)()) and not os.environ.get("NO_COLOR")


def fold_absent_devices(results: Sequence[PropertyResult]) -> tuple[list[PropertyResult], list[str]]:
    """The rows to print, and one line per device whose every row was skipped because it is absent."""
    by_device: dict[str, list[PropertyResult]] = {}
    for r in results:
        by_device.setdefault(r.device, []).append(r)
    folded = {
        dev
        for dev, rows in by_device.items()
        if rows and all(r.status == "skipped" and ABSENT_DEVICE in r.message for r in rows)
    }
    lines = [f"{dev}: {len(by_device[dev])} properties skipped ({by_device[dev][0].message})" for dev in sorted(folded)]
    return [r for r in results if r.device not in folded], lines


def terminal_width() -> int:
    """The width to lay tables out in: the terminal's (``COLUMNS`` first, as ``shutil`` reads it), 120 when the
    output is not a terminal."""
    return max(40, shutil.get_terminal_size(fallback=(120, 24)).columns)


def id_order(property_id: str) -> tuple[str, int, str]:
    """Natural order of property ids: B1 < B2 < D1 < P2 < P10 < P18 < P18p < S9."""
    match = re.fullmatch(r"([A-Za-z]*)(\d*)(.*)", property_id)
    assert match is not None
    letters, number, rest = match.groups()
    return (letters, int(number) if number else -1, rest)


def compact(text: str, edge: int = 3) -> str:
    """A counterexample as a terminal shows it: every run of more than ``2 * edge`` one-number lines (a long list
    Hypothesis printed one element per line) folded, numpy style, into its first and last ``edge`` elements and a
    count. The run report keeps the full text."""
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        if len(run) > 2 * edge:
            indent = run[0][: len(run[0]) - len(run[0].lstrip())]
            values = [line.strip().rstrip(",") for line in run]
            out.append(f"{indent}{', '.join(values[:edge])}, ..., {', '.join(values[-edge:])},  # {len(run)} items")
        else:
            out.extend(run)
        run.clear()

    for line in text.splitlines():
        if re.fullmatch(r"\s*-?\d+,?", line):
            run.append(line)
            continue
        flush()
        out.append(line)
    flush()
    return "\n".join(out)


def render_table(results: Sequence[PropertyResult], *, colour: bool, width: int | None = None) -> str:
    """The results table as text (with ANSI styles when ``colour``), ``width`` columns wide (default: the
    terminal's); titles wrap at word boundaries, never cut."""
    width = width or terminal_width()
    rows, folded = fold_absent_devices(results)
    rich = _rich()
    if rich is None:  # pragma: no cover - see _rich
        return _plain_table(rows, folded, width)
    table = rich.table.Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    table.add_column("property", no_wrap=True)
    table.add_column("title", max_width=TITLE_WIDTH, overflow="fold")
    table.add_column("device", no_wrap=True)
    table.add_column("examples", justify="right", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    escape = rich.markup.escape  # titles hold brackets ("dst[curr : curr + n]") that are not markup
    for r in rows:
        style = STATUS_STYLE.get(r.status, "")
        table.add_row(
            escape(r.id),
            escape(r.title),
            r.device,
            _examples(r),
            f"[{style}]{escape(r.status)}[/]",
            f"{r.seconds:.2f}s",
        )
    out = io.StringIO()
    console = rich.console.Console(
        file=out, force_terminal=colour, no_color=not colour, width=width, highlight=False, soft_wrap=False
    )
    console.print(table)
    for line in folded:
        console.print(rich.markup.escape(line), style="dim")
    return _strip(out.getvalue())


def _strip(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.rstrip("\n").splitlines())


def _plain_table(rows: Sequence[PropertyResult], folded: Sequence[str], width: int = 120) -> str:
    header = ("property", "title", "device", "examples", "result", "time")
    cells = [(r.id, r.title, r.device, _examples(r), r.status, f"{r.seconds:.2f}s") for r in rows]
    widths = [max([len(header[i])] + [len(c[i]) for c in cells]) for i in range(6)]
    others = sum(widths) - widths[1] + 2 * 5
    widths[1] = max(16, min(widths[1], TITLE_WIDTH, width - others))
    lines = []
    for row in [header, *cells]:
        wrapped = textwrap.wrap(row[1], widths[1], break_long_words=False) or [""]
        first = [row[0], wrapped[0], *row[2:]]
        lines.append("  ".join(c.ljust(w) for c, w in zip(first, widths, strict=True)).rstrip())
        for more in wrapped[1:]:
            lines.append(("  ".join(["".ljust(widths[0]), more])).rstrip())
    return "\n".join([*lines, *folded])


class Progress:
    """A one-line status on a terminal while properties run: which property, how many examples so far.

    Does nothing when ``stream`` is not a terminal (a log, CI, a pipe). Rich's live display draws it; its
    refresh thread never writes to the streams pytest's output is redirected to.
    """

    def __init__(self, stream: IO[str] | None = None, total: int = 0) -> None:
        self.stream = stream if stream is not None else sys.__stderr__
        self.total, self.done, self.current, self.examples = total, 0, "", 0
        self._started = time.monotonic()
        self._live: Any = None
        self._last = 0.0
        rich = _rich()
        if rich is not None and self.stream is not None and self.stream.isatty():
            from rich.live import Live

            console = rich.console.Console(file=self.stream, no_color=bool(os.environ.get("NO_COLOR")), highlight=False)
            self._live = Live(
                "", console=console, transient=True, refresh_per_second=8, redirect_stdout=False, redirect_stderr=False
            )

    @property
    def active(self) -> bool:
        return self._live is not None

    def __enter__(self) -> Progress:
        if self._live is not None:
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def start(self, name: str) -> None:
        self.current, self.examples = name, 0
        self._draw(force=True)

    def finish(self) -> None:
        self.done += 1
        self._draw(force=True)

    def example(self, count: int) -> None:
        self.examples = count
        self._draw()

    def line(self) -> str:
        total = f"/{self.total}" if self.total else ""
        running = f"  running {self.current}: {self.examples} examples" if self.current else ""
        return f"pdverify check: {self.done}{total} done{running}{self.eta()}"

    def eta(self) -> str:
        """Time left at the pace so far (properties done per second), once one property finished."""
        if not self.total or not self.done or self.done >= self.total:
            return ""
        elapsed = time.monotonic() - self._started
        left = elapsed / self.done * (self.total - self.done)
        return f"  ETA {int(left) // 60}:{int(left) % 60:02d}"

    def _draw(self, force: bool = False) -> None:
        if self._live is None:
            return
        now = time.monotonic()
        if force or now - self._last > 0.1:
            self._last = now
            self._live.update(self.line())


def render_list(properties: Sequence[Any], *, colour: bool, width: int | None = None) -> str:
    """``pdverify list``: id, title, where it lives (module, and the test name ``-k`` selects), the target units
    needed, the contract encoded (``PropertyInfo``s), in natural id order."""
    width = width or max(terminal_width(), 100)
    ordered = sorted(properties, key=lambda p: id_order(p.id))
    rows = [
        (p.id, p.title, f"{p.module.rsplit('.', 1)[-1]}.py\n-k {p.name}", ", ".join(p.needs), p.contracts())
        for p in ordered
    ]
    rich = _rich()
    if rich is None:  # pragma: no cover - see _rich
        return "\n".join("  ".join(r) for r in rows)
    table = rich.table.Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    table.add_column("id", no_wrap=True, style="bold")
    table.add_column("title", max_width=TITLE_WIDTH, overflow="fold")
    table.add_column("module / -k", overflow="fold")
    table.add_column("needs", max_width=34, overflow="fold")
    table.add_column("contract", max_width=34, overflow="fold")
    for row in rows:
        table.add_row(*(rich.markup.escape(cell) for cell in row))
    out = io.StringIO()
    console = rich.console.Console(file=out, force_terminal=colour, no_color=not colour, width=width, highlight=False)
    console.print(table)
    return _strip(out.getvalue())


def _examples(r: PropertyResult) -> str:
    """The examples run, and of them those discarded: outside the target release's domain, or refused by its server."""
    discarded = [f"{r.outside} outside the release's domain"] if r.outside else []
    discarded += [f"{r.refused} refused by the server"] if r.refused else []
    return f"{r.examples} ({', '.join(discarded)})" if discarded else str(r.examples)
