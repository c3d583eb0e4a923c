"""What a command line selects, answered before anything heavy is imported (no torch, no property module).

* ``property_tests()``: every declared property (id, test function, module file), read from the property modules'
  source with ``ast`` - the ``@prop(...)`` declarations - without importing them;
* ``matches(keyword)``: the properties a ``-k`` expression selects, evaluated with pytest's own expression
  grammar against the names pytest matches (the test's name with its device, the module's file name, the device);
* ``target_spec_error(spec)``: why a target spec can name no target (None when its form is valid).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PROPERTIES_DIR = Path(__file__).resolve().parent.parent / "properties"
BUILTIN_TARGETS = ("pdverify", "legacy", "pr35070", "fast", "sglang")
"""The built-in target names (``pdverify.targets.builtin.BUILTIN``; a test keeps the two equal)."""
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class DeclaredProperty:
    id: str
    test: str
    module: str
    """The module's file name, e.g. ``test_prebuilt.py``."""


@cache
def property_tests() -> tuple[DeclaredProperty, ...]:
    found = []
    for path in sorted(PROPERTIES_DIR.glob("test_*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "prop" and deco.args:
                    first = deco.args[0]
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        found.append(DeclaredProperty(first.value, node.name, path.name))
    return tuple(found)


def _names(p: DeclaredProperty, device: str) -> tuple[str, ...]:
    """The names pytest's ``-k`` matches for the property on ``device`` (as ``pdverify check`` collects it)."""
    return (f"{p.test}[{device}]", p.test, p.module, device, "properties", "needs")


def matches(keyword: str) -> list[DeclaredProperty] | None:
    """The properties ``-k keyword`` selects on any device; None when this pytest's expression grammar cannot be
    reached (a private module: the selection is then judged after collection). Raises ``ValueError`` for a
    malformed expression."""
    try:
        from _pytest.mark.expression import Expression
    except ImportError:  # pragma: no cover - a pytest that moved its expression grammar
        return None
    try:
        expression = Expression.compile(keyword)
    except Exception as exc:  # SyntaxError in pytest 8-9, ParseError before
        raise ValueError(f"-k {keyword!r} is not a valid expression: {exc}") from None

    def selects(p: DeclaredProperty, device: str) -> bool:
        names = [n.lower() for n in _names(p, device)]

        def matcher(ident: str, /, **kwargs: str | int | bool | None) -> bool:
            return any(ident.lower() in n for n in names)

        return bool(expression.evaluate(matcher))

    return [p for p in property_tests() if any(selects(p, d) for d in DEVICES)]


def target_spec_error(spec: str) -> str | None:
    if spec in BUILTIN_TARGETS or spec.startswith(("mutant:", "sglang-plant:")):
        return None
    if ":" in spec and all(spec.partition(":")[::2]):
        return None
    return (
        f"unknown target {spec!r}: use one of {', '.join(BUILTIN_TARGETS)}, mutant:ID, sglang-plant:ID or "
        "'package.module:attr'"
    )
