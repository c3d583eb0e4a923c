"""Two releases' probe records side by side: per unit, every input whose result differs, and how.

A difference has a *kind*: ``presence`` (the unit is probed on one release only), ``exception`` (one release raises
where the other returns, or another exception), ``dtype`` (a tensor's or array's dtype, or its device), ``fields``
(a result sets a field or key the other does not), ``shape`` or ``values``. Each is found at a *path* into the
normalised result (``returns.fields.decode_prefix_len``), the first place the two differ.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

KINDS = ("presence", "exception", "dtype", "fields", "shape", "values")


@dataclass
class UnitDifference:
    unit: str
    compared: int
    """Inputs both releases ran."""
    differing: int
    kinds: dict[str, int] = field(default_factory=dict)
    """Per kind: differing inputs."""
    paths: dict[str, int] = field(default_factory=dict)
    """Per path (kind: path): differing inputs."""
    example: dict[str, Any] = field(default_factory=dict)
    """The first differing input: its index, kind, path and both sides' values there."""
    refused: int = 0
    """Inputs not compared: a configuration either release's server refuses (``ServerRefuses``)."""


_SOURCE_LINE = re.compile(r"(\w+\.py):\d+")


def _unlocated(text: str) -> str:
    """``text`` without the line numbers of the source locations it names (``file.py:97`` -> ``file.py``): a crash
    at the same place of the same file in both releases is the same behaviour, whatever lines came before it."""
    return _SOURCE_LINE.sub(r"\1", text)


def first_difference(a: Any, b: Any, path: str = "") -> tuple[str, str, Any, Any] | None:
    """The first place ``a`` and ``b`` differ: ``(kind, path, a_there, b_there)``; None when equal (two texts that
    differ only in the line numbers of the source locations they name are equal)."""
    if a == b or (isinstance(a, str) and isinstance(b, str) and _unlocated(a) == _unlocated(b)):
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        if ("raises" in a) != ("raises" in b) or ("raises" in a and a["raises"] != b["raises"]):
            return "exception", path or "result", a, b
        for tag, kind in (("tensor", "dtype"), ("ndarray", "dtype"), ("scalar", "dtype"), ("device", "dtype"),
                          ("shape", "shape")):  # fmt: skip
            if tag in a and tag in b and a[tag] != b[tag]:
                return kind, f"{path}.{tag}".lstrip("."), a[tag], b[tag]
        if set(a) != set(b):
            return "fields", path or ".", sorted(set(a) - set(b)), sorted(set(b) - set(a))
        for key in a:
            inner = path if key in ("fields", "dict") else (f"{path}.{key}" if path else key)
            found = first_difference(a[key], b[key], inner)
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    kind = "shape" if isinstance(a, list) and isinstance(b, list) else "values"
    return kind, path or ".", a, b


def _clip(value: Any, limit: int = 300) -> Any:
    text = repr(value)
    return value if len(text) <= limit else text[:limit] + "..."


def compare_units(older: dict[str, Any], newer: dict[str, Any]) -> list[UnitDifference]:
    """Per unit probed on either release, its differences between ``older`` and ``newer`` (``probe`` records:
    unit -> list of results, or why the unit was not probed)."""
    out = []
    for unit in sorted(set(older) | set(newer)):
        a, b = older.get(unit, "not probed"), newer.get(unit, "not probed")
        if isinstance(a, str) or isinstance(b, str):
            if isinstance(a, str) and isinstance(b, str):
                continue  # probed on neither
            ran = b if isinstance(a, str) else a
            diff = UnitDifference(unit, 0, len(ran), {"presence": len(ran)}, {"presence: unit": len(ran)})
            diff.example = {"kind": "presence", "older": a if isinstance(a, str) else "probed",
                            "newer": b if isinstance(b, str) else "probed"}  # fmt: skip
            out.append(diff)
            continue
        n = min(len(a), len(b))
        diff = UnitDifference(unit, n, 0)
        for i in range(n):
            if "refused" in a[i] or "refused" in b[i]:  # an input one release's server refuses is not compared
                diff.compared -= 1
                diff.refused += 1
                continue
            found = first_difference(a[i], b[i])
            if found is None:
                continue
            kind, path, x, y = found
            diff.differing += 1
            diff.kinds[kind] = diff.kinds.get(kind, 0) + 1
            diff.paths[f"{kind}: {path}"] = diff.paths.get(f"{kind}: {path}", 0) + 1
            if not diff.example:
                diff.example = {"input": i, "kind": kind, "path": path, "older": _clip(x), "newer": _clip(y)}
        if diff.differing:
            out.append(diff)
    return out
