"""``pdverify mutate``: the property suite against every catalogued mutant; the mutation score.

Each mutant is a target derived from ``pdverify`` with one function replaced. Properties that exercise the
replaced function run first (then the rest), each under the derandomized ``mutate`` profile, until one
fails: that property killed the mutant. Mutants run in worker processes (spawned: no CUDA state is forked).
"""

from __future__ import annotations

import json
import multiprocessing
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pdverify.cli import exitcodes
from pdverify.properties.registry import PropertyInfo


@dataclass(frozen=True)
class MutantResult:
    id: str
    function: str
    fault_class: str
    description: str
    status: str
    """``killed`` or ``survived``."""
    killed_by: str | None
    examples_to_kill: int | None
    seconds: float


def order_properties(props: dict[str, PropertyInfo], function: str) -> list[PropertyInfo]:
    """Properties that exercise ``function`` first, the others after (a fault can surface anywhere); the
    model-based machines (``M*``, the most expensive per example) last within each group."""
    return sorted(props.values(), key=lambda p: (function not in p.needs, p.id.startswith("M")))


def kill(mutant_id: str, profile: str, props: dict[str, PropertyInfo] | None = None) -> MutantResult:
    from pdverify.mutants.catalogue import load_all, mutant_target
    from pdverify.runner import load_properties, run_property

    catalogue = load_all()
    props = props if props is not None else load_properties()
    m = catalogue[mutant_id]
    target = mutant_target(m)
    start = time.perf_counter()
    for info in order_properties(props, m.function):
        run = run_property(info, target, "cpu", profile)
        if run.status in ("failed", "no examples"):
            return MutantResult(
                m.id,
                m.function,
                m.fault_class,
                m.description,
                "killed",
                info.id,
                run.first_failure or run.examples,
                time.perf_counter() - start,
            )
    return MutantResult(
        m.id, m.function, m.fault_class, m.description, "survived", None, None, time.perf_counter() - start
    )


def _worker(job: tuple[str, str]) -> MutantResult:
    return kill(*job)


def run_mutate(
    *,
    profile: str,
    only: str | None,
    jobs: int,
    json_path: Path | None,
    props: dict[str, PropertyInfo] | None = None,
    echo: Any = print,
) -> int:
    from pdverify.mutants.catalogue import load_all

    catalogue = load_all()
    chosen = [m for m in catalogue.values() if only is None or only in m.id or only in m.function]
    if not chosen:
        echo(f"pdverify mutate: no mutant matches {only!r}: nothing ran")
        return exitcodes.FAILED
    t0 = time.perf_counter()
    if jobs > 1 and props is None:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(jobs) as pool:
            results = pool.map(_worker, [(m.id, profile) for m in chosen], chunksize=1)
    else:
        results = [kill(m.id, profile, props) for m in chosen]
    wall = time.perf_counter() - t0
    rows = [("mutant", "function", "fault class", "result", "killed by", "examples", "time")]
    for r in results:
        rows.append((r.id, r.function, r.fault_class, r.status, r.killed_by or "-",
                     str(r.examples_to_kill or "-"), f"{r.seconds:.2f}s"))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    killed = [r for r in results if r.status == "killed"]
    to_kill = [r.examples_to_kill for r in killed if r.examples_to_kill is not None]
    score = len(killed) / len(results)
    echo(
        f"\nmutation score {len(killed)}/{len(results)} = {score:.1%}; examples to kill: median "
        f"{statistics.median(to_kill) if to_kill else '-'}, worst {max(to_kill) if to_kill else '-'}; "
        f"{wall:.1f}s wall ({jobs} job(s))"
    )
    survivors = [r.id for r in results if r.status == "survived"]
    if survivors:
        echo(f"survived: {', '.join(survivors)}")
    if json_path is not None:
        json_path.write_text(
            json.dumps(
                {"profile": profile, "score": score, "wall_s": wall, "mutants": [asdict(r) for r in results]}, indent=2
            )
            + "\n"
        )
    return exitcodes.OK if not survivors else exitcodes.FAILED
