"""Import shim for ``decord`` (a video decoder): SGLang 0.4.4.post4 to 0.4.5.post1 import it at module level.

The same raising stand-ins as ``ci/sglang-shims/sgl_kernel`` (see its docstring for why they cannot change a
function under test): every name imports, every call raises ``RuntimeError``.
"""

import sgl_kernel

sgl_kernel.stub_package(globals())
