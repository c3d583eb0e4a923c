"""The inputs of a differential run: drawn once, derandomized, under one release's input domain, and kept.

Both releases of a pair are given the very same objects (a pickle), not the same seed: what the strategies draw
depends on the input domain they read at draw time, and a corpus drawn under the older release's domain holds only
inputs that release can be given (domains only grow with features).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings

from pdverify.differential.probes import PROBES
from pdverify.properties.releases import bind_release

FORMAT = "pdverify-corpus/1"


def make_corpus(domain: str | None, examples: int, units: list[str] | None = None) -> dict[str, Any]:
    """``examples`` inputs for each probe in ``units`` (default: all), drawn under ``domain``'s input domain (a
    release; None: every input)."""
    if examples < 1:
        raise ValueError(f"examples must be >= 1, got {examples}")
    unknown = sorted(set(units or ()) - set(PROBES))
    if unknown:
        raise ValueError(f"units: no probe for {', '.join(unknown)} (known: {', '.join(PROBES)})")
    bind_release(domain)
    try:
        drawn = {unit: _draw(unit, examples) for unit in units or list(PROBES)}
    finally:
        bind_release(None)
    return {"format": FORMAT, "domain": domain, "examples": examples, "inputs": drawn}


def _draw(unit: str, examples: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(PROBES[unit].inputs())
    def collect(x: dict[str, Any]) -> None:
        got.append(x)

    collect()
    return got


def save(corpus: dict[str, Any], path: Path) -> None:
    path.write_bytes(pickle.dumps(corpus))


def load(path: Path) -> dict[str, Any]:
    corpus: dict[str, Any] = pickle.loads(path.read_bytes())
    if not isinstance(corpus, dict) or corpus.get("format") != FORMAT:
        raise ValueError(f"{path}: not a pdverify corpus (format {FORMAT})")
    return corpus
