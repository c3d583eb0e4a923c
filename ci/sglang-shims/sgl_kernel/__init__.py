"""Import shim for ``sgl_kernel`` (SGLang's CUDA kernel package), for CPU conformance runs of old releases.

(``ci/sglang-shims/vllm`` installs the same stand-ins under the name ``vllm``: SGLang 0.4.x imports ``vllm._custom_ops``
at module level when it is not on CUDA.)

Older SGLang releases import CUDA kernels from ``sgl_kernel`` at module level in layers that the
disaggregation modules import transitively (MoE runners, quantization, sampling). The real package needs the
CUDA runtime (``libnvrtc``) and cannot be imported on a CPU machine. This shim lets ``from sgl_kernel import X``
succeed and returns, for every name, a function that raises ``RuntimeError`` when called.

Why it cannot change the behaviour of a function under test: none of the PD functions pdverify drives (page
helpers, ``prepare_for_prebuilt``, the prefill chunk sender, the KV sender, decode pre-allocation, the wire)
calls a CUDA kernel; if one ever did, the call would raise and the property would report a target error,
never a pass.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any, NoReturn

__version__ = "0.0.0+pdverify-shim"
__path__: list[str] = []
PDVERIFY_SHIM = True


class _Kernel:
    """A stand-in for a kernel (or a constant table such as ``scalar_types``): attributes give further
    stand-ins, calling one raises."""

    def __init__(self, name: str) -> None:
        self.__name__ = self.__qualname__ = name

    def __getattr__(self, name: str) -> _Kernel:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Kernel(f"{self.__name__}.{name}")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        """A class that derives from a stand-in (``class Marlin(vllm_config)``) derives from ``object``."""
        return (object,)

    def __call__(self, *args: object, **kwargs: object) -> NoReturn:
        raise RuntimeError(f"{self.__name__} is a CUDA kernel; pdverify's CPU import shim cannot run it")

    def __repr__(self) -> str:
        return f"<pdverify sgl_kernel shim {self.__name__}>"


def _kernel_getattr(module: str) -> Any:
    def getattr_(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Kernel(f"{module}.{name}")

    return getattr_


def stub_package(namespace: dict[str, Any]) -> None:
    """Make the package whose globals are ``namespace`` a package of raising stand-ins (``vllm``, ``decord``)."""
    name = namespace["__name__"]
    namespace.update(
        __version__="0.0.0+pdverify-shim", __path__=[], PDVERIFY_SHIM=True, __getattr__=_kernel_getattr(name)
    )
    sys.meta_path.append(_Submodules(name))


__getattr__ = _kernel_getattr(__name__)


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import <package>.X`` gives a module of the same raising stand-ins."""

    def __init__(self, package: str) -> None:
        self.package = package

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.startswith(self.package + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _kernel_getattr(spec.name)  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


sys.meta_path.append(_Submodules(__name__))
