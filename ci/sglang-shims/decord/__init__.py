"""Import shim for ``decord`` (a video decoder): SGLang 0.4.4.post4 to 0.4.5.post1 import it at module level.

The same raising stand-ins as ``ci/sglang-shims/sgl_kernel`` (see its docstring for why they cannot change a
function under test): every name imports, every call raises ``RuntimeError``.
"""

from __future__ import annotations

import sys

import sgl_kernel as _shim

__version__ = "0.0.0+pdverify-shim"
__path__: list[str] = []
PDVERIFY_SHIM = True
__getattr__ = _shim._kernel_getattr(__name__)
sys.meta_path.append(_shim._Submodules(__name__))
