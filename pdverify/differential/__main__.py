"""``python -m pdverify.differential corpus|probe|compare``: the differential's steps (see the package doc)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from pdverify.differential import corpus as corpora
from pdverify.differential.compare import compare_units
from pdverify.differential.probes import PROBES, run_probe


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pdverify.differential", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("corpus", help="draw the inputs, once, under one release's input domain")
    c.add_argument("--domain", default=None, help="the release whose input domain the strategies follow")
    c.add_argument("--examples", type=int, default=40, help="inputs per unit")
    c.add_argument("--units", default="", help="comma-separated units (default: every probe)")
    c.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("probe", help="run a target's units over a corpus and record what they return")
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--target", default="sglang")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", type=Path, required=True)
    d = sub.add_parser("compare", help="the differences between two probe records (older first)")
    d.add_argument("older", type=Path)
    d.add_argument("newer", type=Path)
    args = ap.parse_args(argv)
    if args.command == "corpus":
        units = [u for u in args.units.split(",") if u] or None
        try:
            made = corpora.make_corpus(args.domain, args.examples, units)
        except ValueError as exc:
            print(f"corpus: {exc}", file=sys.stderr)
            return 2
        corpora.save(made, args.out)
        print(f"corpus: {sum(map(len, made['inputs'].values()))} inputs over {len(made['inputs'])} units "
              f"(domain {args.domain or 'every input'}) -> {args.out}")  # fmt: skip
        return 0
    if args.command == "probe":
        from pdverify.targets import TargetError, load_target

        try:
            made = corpora.load(args.corpus)
            target = load_target(args.target)
        except (ValueError, TargetError, OSError) as exc:
            print(f"probe: {exc}", file=sys.stderr)
            return 2
        start = time.perf_counter()
        results = {u: run_probe(PROBES[u], target, inputs, args.device) for u, inputs in made["inputs"].items()}
        record = {"target": target.name, "release": target.release, "domain": made["domain"],
                  "seconds": round(time.perf_counter() - start, 1), "units": results}  # fmt: skip
        args.out.write_text(json.dumps(record, sort_keys=True) + "\n")
        probed = [u for u, r in results.items() if not isinstance(r, str)]
        print(
            f"probe: {target.name} {target.release or ''}: {len(probed)} of {len(results)} units probed -> {args.out}"
        )
        return 0
    older, newer = (json.loads(Path(f).read_text()) for f in (args.older, args.newer))
    diffs = compare_units(older["units"], newer["units"])
    print(json.dumps([asdict(x) for x in diffs], indent=1))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
