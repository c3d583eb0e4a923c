"""Import shim for ``vllm``: SGLang 0.4.x imports ``vllm._custom_ops`` at module level when not on CUDA.

The same raising stand-ins as ``ci/sglang-shims/sgl_kernel`` (see its docstring for why they cannot change a
function under test): every name imports, every call raises ``RuntimeError``.
"""

import sgl_kernel

sgl_kernel.stub_package(globals())
