"""Import shims for old SGLang releases (0.4.x, 0.5.1): two APIs newer Triton and torch removed.

``torch._C._cpu._is_amx_tile_supported``: SGLang 0.4.8 to 0.5.1.post3 call it at import time to decide whether
Intel AMX CPU kernels may be used; newer torch dropped it. The shim answers ``False`` (no AMX: SGLang's plain
CPU paths), which only selects attention/GEMM backends, none of them on the path of a PD function under test.

Newer Triton removed these three functions; SGLang 0.4.x imports them at module level in ``sglang/srt/utils.py``
and calls them only to name Triton's kernel cache directories. This file is ``sitecustomize`` on the release
directory's path, so it runs at interpreter start-up and adds the functions back (the paths Triton used:
``~/.triton/{cache,dump,override}``) only when they are missing.

Why they cannot change the behaviour of a function under test: no PD function pdverify drives reads Triton's
cache directories or chooses a CPU kernel backend.
"""

from __future__ import annotations

import os

try:
    import triton.runtime.cache as _cache
except ImportError:  # no triton: nothing to shim
    _cache = None


def _triton_dir(leaf: str) -> object:
    def default_dir() -> str:
        return os.path.join(os.path.expanduser("~"), ".triton", leaf)

    default_dir.__name__ = f"default_{leaf}_dir"
    return default_dir


if _cache is not None:
    for _leaf in ("cache", "dump", "override"):
        if not hasattr(_cache, f"default_{_leaf}_dir"):
            setattr(_cache, f"default_{_leaf}_dir", _triton_dir(_leaf))


try:
    import torch
except ImportError:  # no torch: nothing to shim
    torch = None  # type: ignore[assignment]

if torch is not None and not hasattr(torch._C._cpu, "_is_amx_tile_supported"):
    torch._C._cpu._is_amx_tile_supported = lambda: False
