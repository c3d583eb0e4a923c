"""For each hand-written faulty variant, the smallest failing input Hypothesis finds from scratch.

Explicit examples are switched off (the ``generate`` and ``shrink`` phases only), so the numbers say what
generation plus shrinking achieve on their own: the property that caught the variant, examples until the
first failure, and the size of the shrunk counterexample. Usage: ``python ci/shrink_report.py [PREFIX]``.
"""

from __future__ import annotations

import sys
from typing import Any

from hypothesis import Phase, settings

from pdverify.model.batch import PrebuiltBatch
from pdverify.mutants.catalogue import load_all, mutant_target
from pdverify.properties.registry import EXAMPLES
from pdverify.runner import load_properties, run_property
from pdverify.strategies.layouts import PDPair


def size(kwargs: dict[str, Any] | None) -> str:
    for value in (kwargs or {}).values():
        if isinstance(value, PrebuiltBatch):
            return f"{len(value.reqs)} request(s), {sum(r.extend_len for r in value.reqs)} extend token(s)"
        if isinstance(value, PDPair):
            return f"L={value.length}, D={value.prefix_len}, ps={value.page_size}, {len(value.chunk_ends)} chunk(s)"
        if isinstance(value, list):
            return f"{len(value)} token(s)"
    return "-"


def main(prefix: str = "PB") -> None:
    settings.register_profile("shrink-only", settings.get_profile("ci"), phases=[Phase.generate, Phase.shrink])
    props = load_properties()
    print(f"{'mutant':<7}{'caught by':<10}{'examples to first failure':>27}  shrunk counterexample")
    for m in load_all().values():
        if not m.id.startswith(prefix):
            continue
        for info in [p for p in props.values() if m.function in p.needs and not p.id.startswith("M")]:
            run = run_property(info, mutant_target(m), profile="shrink-only")
            if run.status == "failed":
                print(
                    f"{m.id:<7}{info.id:<10}{run.first_failure!s:>27}  {size(EXAMPLES.last_kwargs)}  ({m.description})"
                )
                break
        else:
            print(f"{m.id:<7}{'-':<10}{'-':>27}  not caught without explicit examples")


if __name__ == "__main__":
    main(*sys.argv[1:])
