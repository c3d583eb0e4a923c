"""Pieces of the SGLang drivers that need no SGLang: how they read a release's call signatures."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from pdverify.targets.sglang_prefill import _parameters


def trace(stage: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Like Mooncake's ``mooncake_trace_func`` (0.5.13 on): a wrapper without ``functools.wraps``."""

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            return func(self, *args, **kwargs)

        return wrapper

    return decorator


def kept(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


class Sender:
    @trace("send")
    def send(self, kv_indices: Any, state_indices: Any = None, num_kv_tokens: Any = None) -> None: ...

    @kept
    def init(self, num_kv_indices: int, aux_index: Any = None) -> None: ...

    def poll(self) -> None: ...


def test_parameters_are_read_through_a_decorator_that_hides_them() -> None:
    sender = Sender()
    assert list(_parameters(sender.send, "send")) == ["self", "kv_indices", "state_indices", "num_kv_tokens"]
    assert list(_parameters(Sender.send, "send")) == ["self", "kv_indices", "state_indices", "num_kv_tokens"]
    assert list(_parameters(sender.init, "init")) == ["self", "num_kv_indices", "aux_index"]
    assert list(_parameters(sender.poll, "poll")) == ["self"]


def test_a_wrapper_closing_over_no_function_of_that_name_keeps_its_own_parameters() -> None:
    # the name decides: a wrapper over another function is not mistaken for the method
    assert list(_parameters(Sender.send, "other")) == ["self", "args", "kwargs"]
