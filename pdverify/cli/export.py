"""Regression export: each failing property becomes a standalone pytest file that rebuilds the shrunk
counterexample with plain constructors and replays the property body on the target, without Hypothesis.

The files are drop-in: one per failing property (a plain test without drawn arguments is called as it is), only
the imports they use, sorted, lines within 120 columns, and nothing that warns under ``-W error`` once the fault is
fixed. A failure that cannot be exported (its arguments do not rebuild from their ``repr``) is named with the
reason in the run's output, never skipped in silence.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import textwrap
from pathlib import Path
from typing import Any

from pdverify.cli.report import PropertyResult

WIDTH = 120

HEADER = '''"""Regression exported by `pdverify check`: {id} {status} on target {spec} ({device}).

{title}

It rebuilds the shrunk counterexample with plain constructors and replays the property without Hypothesis: it
fails while the fault is there and passes once it is fixed.
Original run:
    {reproduce}
"""

{imports}

TARGET = {spec_literal}
DEVICE = {device_literal}


def test_{slug}_regression() -> None:
    if DEVICE == "cuda" and not torch.cuda.is_available():
        pytest.skip("recorded on CUDA; CUDA not available here")
{call}
'''

_MODEL_MODULES = ("pdverify.model.batch", "pdverify.model.checksum", "pdverify.model.dispatch",
                  "pdverify.model.layout", "pdverify.model.exchange", "pdverify.model.queue",
                  "pdverify.model.sender", "pdverify.model.transfer_queue", "pdverify.model.translation",
                  "pdverify.strategies.layouts")  # fmt: skip
"""Where the classes of drawn arguments live: their ``repr`` rebuilds them with these names in scope."""

_NAMESPACE: dict[str, Any] = {}
_HOME: dict[str, str] = {}
"""Class name -> the module the exported file imports it from."""


def _namespace() -> dict[str, Any]:
    if not _NAMESPACE:
        import torch

        _NAMESPACE["torch"] = torch
        for name in _MODEL_MODULES:
            module = importlib.import_module(name)
            for attr, value in vars(module).items():
                if inspect.isclass(value) and value.__module__ == name and not attr.startswith("_"):
                    _NAMESPACE[attr] = value
                    _HOME[attr] = name
    return _NAMESPACE


def _literal(value: Any) -> str:
    """``repr`` that round-trips through the exported file's imports; ``ValueError`` when it does not."""
    text = repr(value)
    try:
        back = eval(text, dict(_namespace()))
    except Exception as exc:
        raise ValueError(f"cannot rebuild {type(value).__name__} from its repr: {exc}") from None
    if back != value:
        raise ValueError(f"{type(value).__name__} does not round-trip through its repr")
    return text


NOT_EXPORTABLE = "__not_exportable__"


def counterexample_literals(kwargs: dict[str, Any] | None) -> dict[str, str] | None:
    """The drawn arguments of a counterexample as Python source that rebuilds them (``target`` and
    ``device`` left out), or ``{NOT_EXPORTABLE: why}``. Plain strings, so that a pytest-xdist worker can send
    them to the controller with its report."""
    if not kwargs:
        return None
    try:
        return {k: _literal(v) for k, v in kwargs.items() if k not in ("target", "device")}
    except ValueError as exc:
        return {NOT_EXPORTABLE: str(exc)}


def layout(source: str, indent: int, offset: int = 0, width: int = WIDTH) -> str:
    """``source`` (one Python expression) laid out as a formatter would, starting ``offset`` columns into a line
    indented by ``indent``: on one line when it fits in ``width``, else each argument or element on a line of its
    own one level deeper than ``indent``, with a trailing comma."""
    return _layout(ast.parse(source, mode="eval").body, indent, offset, width)


def _layout(node: ast.expr, indent: int, offset: int, width: int) -> str:
    flat = ast.unparse(node)
    if indent + offset + len(flat) <= width:
        return flat
    inner, pad = indent + 4, " " * (indent + 4)
    if isinstance(node, ast.Call):
        parts = [_layout(a, inner, 0, width) for a in node.args]
        parts += [f"{k.arg}={_layout(k.value, inner, len(k.arg or '') + 1, width)}" for k in node.keywords]
        return f"{ast.unparse(node.func)}(\n" + "".join(f"{pad}{p},\n" for p in parts) + " " * indent + ")"
    if isinstance(node, (ast.List, ast.Tuple)):
        opening, closing = ("[", "]") if isinstance(node, ast.List) else ("(", ")")
        items = _pack([_layout(e, inner, 0, width) for e in node.elts], inner, width)
        return opening + "\n" + "".join(f"{pad}{line}\n" for line in items) + " " * indent + closing
    if isinstance(node, ast.Dict):
        keys = [ast.unparse(k) if k is not None else "**" for k in node.keys]
        parts = [f"{k}: {_layout(v, inner, len(k) + 2, width)}" for k, v in zip(keys, node.values, strict=True)]
        return "{\n" + "".join(f"{pad}{p},\n" for p in parts) + " " * indent + "}"
    return flat  # a long atom (a string): left as it is


def _pack(items: list[str], indent: int, width: int) -> list[str]:
    """Short one-line items packed several to a line (long integer lists stay readable); others one a line."""
    lines: list[str] = []
    for item in items:
        if "\n" not in item and lines and "\n" not in lines[-1] and indent + len(lines[-1]) + len(item) + 3 <= width:
            lines[-1] += f", {item}"
        else:
            lines.append(item)
    return [f"{line}," for line in lines]


def _imports(code: str) -> str:
    """The import block of a regression file: only what ``code`` uses, in isort's order."""
    _namespace()
    used = set(re.findall(r"\b[A-Za-z_]\w*\b", code))
    by_module: dict[str, list[str]] = {}
    for name in sorted(used & set(_HOME)):
        by_module.setdefault(_HOME[name], []).append(name)
    firsts = ["from pdverify.runner import load_properties", "from pdverify.targets import load_target"]
    froms = firsts + [f"from {m} import {', '.join(sorted(names))}" for m, names in by_module.items()]
    return "import pytest\nimport torch\n\n" + "\n".join(sorted(froms, key=lambda line: line.split()[1]))


def _call(r: PropertyResult) -> str:
    """The property body called on the counterexample's arguments."""
    assert r.kwargs
    args = "".join(f"        {k}={layout(v, 8, len(k) + 1)},\n" for k, v in r.kwargs.items())
    return (
        f"    body = load_properties()[{json.dumps(r.id)}].test.hypothesis.inner_test\n"
        f"    body(\n        target=load_target(TARGET),\n        device=DEVICE,\n{args}    )"
    )


def export_regressions(directory: Path, spec: str, results: list[PropertyResult]) -> tuple[list[Path], list[str]]:
    """Write one file per failure; return the paths written and, for each failure that could not be exported,
    why."""
    directory.mkdir(parents=True, exist_ok=True)
    written, skipped = [], []
    for r in results:
        if r.status in ("known defect", "interrupted", "not run"):
            continue
        if r.kwargs and NOT_EXPORTABLE in r.kwargs:
            skipped.append(f"{r.id} ({r.test}): not exported: {r.kwargs[NOT_EXPORTABLE]}")
            continue
        if not r.kwargs and r.id != "upstream":
            skipped.append(f"{r.id} ({r.test}): not exported: no counterexample was captured ({r.status})")
            continue
        call = _call(r) if r.kwargs else _plain_call(r)
        slug = re.sub(r"[^0-9a-zA-Z]+", "_", f"{r.id if r.kwargs else r.test}_{spec}_{r.device}").strip("_").lower()
        path = directory / f"test_regression_{slug}.py"
        imports = _imports(call) if r.kwargs else _plain_imports(r)
        path.write_text(
            HEADER.format(
                id=r.id,
                title="\n".join(textwrap.wrap(r.title, WIDTH - 4)),
                status=r.status,
                spec=spec,
                spec_literal=json.dumps(spec),
                device=r.device,
                device_literal=json.dumps(r.device),
                reproduce="\n    ".join(textwrap.wrap(r.reproduce, WIDTH - 8, break_on_hyphens=False)),
                slug=slug,
                imports=imports,
                call=call,
            )
        )
        written.append(path)
    return written, skipped


def _plain_call(r: PropertyResult) -> str:
    return f"    properties.{r.test}(target=load_target(TARGET), device=DEVICE)"


def _plain_imports(r: PropertyResult) -> str:
    from pdverify.runner import load_properties

    load_properties()
    module = _module_of(r.test)
    # the module, not the test function: pytest would collect an imported test function a second time
    return f"import pytest\nimport torch\n\nimport {module} as properties\nfrom pdverify.targets import load_target"


def _module_of(test: str) -> str:
    import sys

    for name, module in list(sys.modules.items()):
        if name.startswith("pdverify.properties.test_") and hasattr(module, test):
            return name
    raise ValueError(f"no property module defines {test}")
