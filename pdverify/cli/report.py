"""The JSON run report of ``pdverify check`` (schema ``pdverify/report.schema.json``)."""

from __future__ import annotations

import importlib.metadata
import json
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_ID = "pdverify-report/1"
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "report.schema.json"
TIMING_KEYS = ("started", "duration_s", "seconds")


@dataclass
class PropertyResult:
    id: str
    title: str
    test: str
    device: str
    status: str
    examples: int
    seconds: float
    message: str = ""
    counterexample: str = ""
    reproduce: str = ""
    first_failure: int | None = None
    outside: int = 0
    """Of ``examples``, those outside the target release's input domain (a later release's feature, a configuration
    the release cannot take): discarded, not verdicts."""
    refused: int = 0
    """Of ``examples``, those whose configuration the target's server refuses to start with (its own validation):
    discarded, outside the release's domain."""
    findings: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per finding recorded for this property on the target's release: examples inside its signature
    (``matched``) and those whose failure it explains (``reproduced``; set aside, the search went on)."""
    inputs: str = ""
    """A digest of the choice sequences of every example run (equal digests: the same inputs were drawn)."""
    calls: list[str] = field(default_factory=list)
    """The functions of the release under test its examples called (``module:qualname``; release targets only)."""
    failures: list[dict[str, str]] = field(default_factory=list)
    """Each distinct failure when Hypothesis found several (status, message, counterexample); empty otherwise."""
    clauses: list[dict[str, Any]] = field(default_factory=list)
    """Each assertion clause of the property with its contract and status on this target (``registry.Clause``)."""
    kwargs: dict[str, str] | None = field(default=None, repr=False)
    """The counterexample's drawn arguments as Python source (``pdverify.cli.export.counterexample_literals``)."""


def version_of(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    return {
        "pdverify": version_of("pdverify"),
        "torch": version_of("torch"),
        "numpy": version_of("numpy"),
        "hypothesis": version_of("hypothesis"),
        "python": platform.python_version(),
    }


def build_report(meta: dict[str, Any], results: list[PropertyResult]) -> dict[str, Any]:
    summary: dict[str, int] = {}
    for r in results:
        summary[r.status] = summary.get(r.status, 0) + 1
    props = []
    for r in results:
        entry = asdict(r)
        entry.pop("kwargs")
        props.append(entry)
    return {"schema": SCHEMA_ID, **meta, "versions": versions(), "summary": summary, "properties": props}


def write_report(path: Path, report: dict[str, Any]) -> None:
    path.write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")


def without_timings(report: Any) -> Any:
    """The report with every timing field removed (two runs of a derandomized profile agree on the rest)."""
    if isinstance(report, dict):
        return {k: without_timings(v) for k, v in report.items() if k not in TIMING_KEYS}
    if isinstance(report, list):
        return [without_timings(v) for v in report]
    return report
