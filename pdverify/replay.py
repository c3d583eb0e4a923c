"""Recorded finding examples, replayed: each finding's examples (``findings/examples.json``) run on a release through
the property body, without Hypothesis, so that a finding's evidence does not hang on what a generator happens to
draw.

Each example names its finding, the property that observes it, its shape (``production``: a configuration a
server is run with - realistic page size, prompt lengths, a reused request row where that does the harm; ``shrunk``:
the smallest input that shows it), the server flags it needs, and its arguments as Python expressions over
pdverify's model classes (``PrefillCase(...)``, ``PrebuiltBatch(...)``; ``range``, ``list`` and ``tuple`` may build
long rows). On a release the finding is recorded for, the example must fail there and the finding must explain the
failure (``reproduced``); on the release that fixed it, the example must pass (``fixed``) - a failure there that
another finding recorded for that release explains is reported with that finding's id, any other is a new failure.

``python -m pdverify.replay [--examples F] [--json]`` replays every example that concerns the installed SGLang
(the ``sglang`` target) and exits 1 when one does not do what its record says; ``ci/replay_findings.py`` runs it in
each release's environment.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

EXAMPLES_FILE = Path(__file__).resolve().parent.parent / "findings" / "examples.json"
TRIAGE_FILE = EXAMPLES_FILE.parent / "triage.json"
SHAPES = ("production", "shrunk")
FIELDS = ("finding", "property", "shape", "flags", "what", "args")
OPTIONAL = ("fixed_by",)
FIXES = ("refusal",)
"""How a fixing release may be fixed other than by passing: ``refusal`` - its server refuses the example's input at
admission (the fix is the validation, as 0.5.21's ``SamplingParams.verify`` for T26's seeds)."""
_BUILTINS = {"range": range, "list": list, "tuple": tuple, "dict": dict, "len": len}


@dataclass(frozen=True)
class FindingExample:
    finding: str
    property: str
    shape: str
    flags: str
    """The server flags the example's configuration runs with (both sides where both matter)."""
    what: str
    """One sentence: what the example is, in production terms."""
    args: Mapping[str, str]
    """The property's drawn arguments, as Python expressions over pdverify's model classes."""
    fixed_by: str | None = None
    """``refusal`` where the fixing release refuses the input (``FIXES``); None: it passes there."""

    def kwargs(self) -> dict[str, Any]:
        """The arguments, built (``ValueError`` naming the argument when one does not evaluate)."""
        from pdverify.cli.export import _namespace

        scope = {"__builtins__": _BUILTINS, **_namespace()}
        out = {}
        for name, source in self.args.items():
            try:
                out[name] = eval(source, dict(scope))  # the repository's own records, over model names only
            except Exception as exc:
                raise ValueError(f"{self.finding} ({self.shape}): argument {name!r} does not build: {exc}") from None
        return out


def load_examples(path: Path = EXAMPLES_FILE) -> list[FindingExample]:
    """The recorded examples, each checked for its fields (``ValueError`` naming the entry and the field)."""
    rows = json.loads(path.read_text())["examples"]
    out = []
    for i, row in enumerate(rows):
        missing = [f for f in FIELDS if not row.get(f)]
        unknown = sorted(set(row) - set(FIELDS) - set(OPTIONAL))
        if missing or unknown:
            raise ValueError(f"{path.name} entry {i}: fields {FIELDS} required, {OPTIONAL} optional and only they "
                             f"(missing {missing}, unknown {unknown})")  # fmt: skip
        if row.get("fixed_by", FIXES[0]) not in FIXES:
            raise ValueError(f"{path.name} entry {i} ({row['finding']}): fixed_by must be one of {FIXES}, got "
                             f"{row['fixed_by']!r}")  # fmt: skip
        if row["shape"] not in SHAPES:
            raise ValueError(f"{path.name} entry {i} ({row['finding']}): shape must be one of {SHAPES}, got "
                             f"{row['shape']!r}")  # fmt: skip
        out.append(FindingExample(**row))
    return out


def fixed_releases(triage: list[dict[str, Any]]) -> dict[str, str | None]:
    """Each triaged finding's first release without it (the first word of its first row's ``first_fixed``), None
    where no release has fixed it: built once per run, every example's ``due`` reads it."""
    out: dict[str, str | None] = {}
    for row in triage:
        if row["id"] in out:
            continue
        word = str(row.get("first_fixed") or "").split(" ", 1)[0]
        try:
            Version(word)
        except InvalidVersion:
            out[row["id"]] = None
        else:
            out[row["id"]] = word
    return out


def fixed_release(finding: str, triage: list[dict[str, Any]]) -> str | None:
    """The first release that no longer has ``finding``, None where none has fixed it (``KeyError`` if untriaged)."""
    return _fixed_in(finding, fixed_releases(triage))


def _fixed_in(finding: str, fixed: dict[str, str | None]) -> str | None:
    """``fixed[finding]`` (a ``fixed_releases`` map), refusing a finding with no triage row."""
    if finding not in fixed:
        raise KeyError(f"finding {finding} has no triage row")
    return fixed[finding]


@dataclass(frozen=True)
class Replay:
    example: FindingExample
    release: str | None
    expected: str
    """``reproduced`` (a release the finding is recorded for) or ``fixed`` (the release that fixed it)."""
    outcome: str
    """``reproduced``, ``passed``, ``explained by <ids>``, ``failed`` (a failure nothing recorded explains),
    ``outside domain``, ``refused`` (the release's server refuses the input: a fix only where the record says
    ``fixed_by: refusal``), ``not in release`` (the example's configuration uses an input feature the release does
    not have: no server of it runs that configuration, so it is not replayed there) or ``error``."""
    message: str

    @property
    def ok(self) -> bool:
        if self.outcome == "not in release":
            return True
        if self.expected == "reproduced":
            return self.outcome == "reproduced"
        if self.outcome == "refused":
            return self.example.fixed_by == "refusal"
        return self.outcome == "passed" or self.outcome.startswith("explained by")


def replay(example: FindingExample, target: Any, expected: str) -> Replay:
    """Run ``example`` once on ``target`` (its release bound as the input domain), every recorded finding's
    failures left as failures, and say what happened."""
    import pytest

    from pdverify.findings import KNOWN, recorded
    from pdverify.properties.registry import EXAMPLES
    from pdverify.properties.releases import bind_release
    from pdverify.runner import load_properties
    from pdverify.targets.protocol import ServerRefuses

    info = load_properties()[example.property]
    kwargs = example.kwargs()
    body = getattr(info.test, "hypothesis", None)
    call = body.inner_test if body is not None else info.test
    release = getattr(target, "release", None)
    bind_release(release)
    keep = EXAMPLES.known_findings
    EXAMPLES.known_findings = False
    try:
        call(target=target, device="cpu", **kwargs)
    except AssertionError as exc:
        message = str(exc)
        full = {"target": target, "device": "cpu", **kwargs}
        finding = KNOWN[example.finding]
        own = finding.shows(full) and finding.explanation(example.property)(full, message)
        explains = [d for d in recorded(example.property, target) if d.id != example.finding and d.shows(full)]
        others = [d.id for d in explains if d.explanation(example.property)(full, message)]
        if own and (expected == "reproduced" or not others):
            outcome = "reproduced"
        else:  # on the fixing release a failure a finding recorded there explains is that finding's
            outcome = f"explained by {', '.join(others)}" if others else "failed"
        return Replay(example, release, expected, outcome, message.splitlines()[0] if message else "")
    except pytest.skip.Exception as exc:
        return Replay(example, release, expected, "outside domain", str(exc))
    except ServerRefuses as exc:  # the release's own validation refuses the input
        return Replay(example, release, expected, "refused", str(exc))
    except Exception as exc:  # the target raised: an error, never a pass
        return Replay(example, release, expected, "error", f"{type(exc).__name__}: {exc}")
    finally:
        EXAMPLES.known_findings = keep
        bind_release(None)
    return Replay(example, release, expected, "passed", "")


def due(example: FindingExample, release: str, fixed: dict[str, str | None], target: Any = None) -> str | None:
    """What ``example`` must do on ``release``: ``reproduced`` where its finding is recorded for the release on the
    example's property, ``fixed`` on the release that fixed it (``fixed``: ``fixed_releases(triage)``), None
    elsewhere (not replayed). Given the release's ``target``, a recorded release whose signature does not cover the
    example there (a finding fixed in one form of the path before another: T29's Mooncake part) is ``fixed`` too."""
    from pdverify.findings import KNOWN

    finding = KNOWN[example.finding]
    if release in finding.releases_for(example.property):
        if target is not None and not finding.shows({**example.kwargs(), "target": target}):
            return "fixed"
        return "reproduced"
    if release == _fixed_in(example.finding, fixed):
        return "fixed"
    return None


def replay_all(target: Any, examples: list[FindingExample], triage: list[dict[str, Any]]) -> list[Replay]:
    """Every example that concerns ``target``'s release, replayed."""
    release = getattr(target, "release", None)
    if release is None:
        raise ValueError(f"target {getattr(target, 'name', target)!r} is not a release: nothing to replay against")
    fixed = fixed_releases(triage)
    out = []
    for example in examples:
        expected = due(example, release, fixed, target)
        if expected is None:
            continue
        missing = features_missing(example, release)
        if missing:
            out.append(Replay(example, release, expected, "not in release", f"uses {', '.join(missing)}"))
        else:
            out.append(replay(example, target, expected))
    return out


def features_missing(example: FindingExample, release: str | None) -> list[str]:
    """The input features the example's arguments use (``input_features()``) that ``release`` does not have (every
    feature where it is None)."""
    from pdverify.properties.releases import features_lacking, release_features

    return features_lacking(example.kwargs().values(), release_features(release))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pdverify.replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=Path, default=EXAMPLES_FILE, help="the recorded examples (JSON)")
    parser.add_argument("--target", default="sglang", help="the target to replay on (default: the installed SGLang)")
    parser.add_argument("--json", action="store_true", help="one JSON object per replay instead of text lines")
    args = parser.parse_args(argv)
    from pdverify.targets import load_target

    triage = json.loads(TRIAGE_FILE.read_text())["triage"]
    results = replay_all(load_target(args.target), load_examples(args.examples), triage)
    for r in results:
        if args.json:
            print(json.dumps({"finding": r.example.finding, "property": r.example.property, "shape": r.example.shape,
                              "release": r.release, "expected": r.expected, "outcome": r.outcome, "ok": r.ok,
                              "message": r.message[:400]}))  # fmt: skip
        else:
            mark = "ok  " if r.ok else "FAIL"
            print(f"{mark} {r.release} {r.example.finding} {r.example.property} {r.example.shape}: expected "
                  f"{r.expected}, {r.outcome}{f' - {r.message[:200]}' if r.message else ''}")  # fmt: skip
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
