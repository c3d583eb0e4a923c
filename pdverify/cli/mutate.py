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


@dataclass(frozen=True)
class GenerationResult:
    """One mutant under generation alone: for each seed, the killing property and the number of generated
    examples it ran up to and including the first failing one (None: no property failed within the budget)."""

    id: str
    function: str
    family: str
    seeds: list[int]
    killed_by: list[str | None]
    examples_to_failure: list[int | None]
    seconds: float

    @property
    def killed(self) -> bool:
        """Killed on every seed by generated examples alone."""
        return all(n is not None for n in self.examples_to_failure)


def kill_by_generation(mutant_id: str, seeds: list[int]) -> GenerationResult:
    """Run the properties that exercise the mutant's function under the ``generation`` profile (no explicit
    example, no database, no shrinking), once per seed, until one fails."""
    from pdverify.mutants.catalogue import load_all, mutant_target
    from pdverify.runner import load_properties, run_property

    m = load_all()[mutant_id]
    target = mutant_target(m)
    relevant = [p for p in order_properties(load_properties(), m.function) if m.function in p.needs]
    start = time.perf_counter()
    killers: list[str | None] = []
    counts: list[int | None] = []
    for seed in seeds:
        killer, count = None, None
        for info in relevant:
            run = run_property(info, target, "cpu", "generation", seed=seed)
            if run.status in ("failed", "no examples"):
                killer, count = info.id, run.first_failure or run.examples
                break
        killers.append(killer)
        counts.append(count)
    family = m.impl.__module__.rsplit(".", 1)[-1]
    return GenerationResult(m.id, m.function, family, seeds, killers, counts, time.perf_counter() - start)


def _generation_worker(job: tuple[str, list[int]]) -> GenerationResult:
    return kill_by_generation(*job)


def percentile(values: list[int], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation; nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def generation_summary(results: list[GenerationResult]) -> dict[str, Any]:
    """Kill rate by generation alone and examples-to-failure statistics, overall and per family."""

    def stats(rows: list[GenerationResult]) -> dict[str, Any]:
        counts = [n for r in rows for n in r.examples_to_failure if n is not None]
        runs = sum(len(r.examples_to_failure) for r in rows)
        return {
            "mutants": len(rows),
            "killed": sum(1 for r in rows if r.killed),
            "kill_rate": sum(1 for r in rows if r.killed) / len(rows) if rows else float("nan"),
            "runs_killed": len(counts),
            "runs": runs,
            "median": percentile(counts, 0.5),
            "p95": percentile(counts, 0.95),
            "max": max(counts) if counts else None,
        }

    families = sorted({r.family for r in results})
    return {"overall": stats(results), "families": {f: stats([r for r in results if r.family == f]) for f in families}}


def selected(m: Any, only: str | None) -> bool:
    """Whether mutant ``m`` is chosen by ``--only``: comma-separated texts, any of which its id or function
    contains (None: every mutant)."""
    if only is None:
        return True
    return any(part and (part in m.id or part in m.function) for part in only.split(","))


def run_generation_only(
    *, only: str | None, jobs: int, seeds: list[int], json_path: Path | None, md_path: Path | None, echo: Any = print
) -> int:
    """``pdverify mutate --generation-only``: how many generated examples each mutant takes to fail."""
    from pdverify.mutants.catalogue import load_all

    chosen = [m for m in load_all().values() if selected(m, only)]
    if not chosen:
        echo(f"pdverify mutate: no mutant matches {only!r}: nothing ran")
        return exitcodes.FAILED
    t0 = time.perf_counter()
    jobs_list = [(m.id, seeds) for m in chosen]
    if jobs > 1:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(jobs) as pool:
            results = pool.map(_generation_worker, jobs_list, chunksize=1)
    else:
        results = [kill_by_generation(*job) for job in jobs_list]
    wall = time.perf_counter() - t0
    summary = generation_summary(results)
    lines = [
        f"# Examples to failure, generation alone ({len(seeds)} seeds: {', '.join(map(str, seeds))})",
        "",
        "Each mutant against the properties that exercise its function, `generation` profile: no explicit example, no "
        "example database, no shrinking, 200 examples a property; the count is the generated examples the killing "
        "property ran up to and including its first failing one.",
        "",
        "| family | mutants | killed on every seed | runs killed | median | p95 | max |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in [("**all**", summary["overall"]), *summary["families"].items()]:
        killed = f"{s['killed']} ({s['kill_rate']:.0%})"
        runs = f"{s['runs_killed']}/{s['runs']}"
        figures = f"{s['median']:.0f} | {s['p95']:.0f} | {s['max']}"
        lines.append(f"| {name} | {s['mutants']} | {killed} | {runs} | {figures} |")
    slowest = sorted(results, key=lambda r: max((n if n is not None else 10**9) for n in r.examples_to_failure))
    lines += ["", "Slowest and not killed (examples per seed; - : not killed within the budget):", ""]
    for r in reversed(slowest[-15:]):
        per_seed = ", ".join("-" if n is None else str(n) for n in r.examples_to_failure)
        lines.append(f"* {r.id} ({r.function}): {per_seed}; killed by {', '.join(k or '-' for k in r.killed_by)}")
    lines.append(f"\n{wall:.0f} s wall ({jobs} job(s))")
    text = "\n".join(lines) + "\n"
    echo(text)
    if md_path is not None:
        md_path.write_text(text)
    if json_path is not None:
        payload = {"seeds": seeds, "wall_s": wall, "summary": summary, "mutants": [asdict(r) for r in results]}
        json_path.write_text(json.dumps(payload, indent=2) + "\n")
    return exitcodes.OK if all(r.killed for r in results) else exitcodes.FAILED


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
    chosen = [m for m in catalogue.values() if selected(m, only)]
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
