"""Interrupts: SIGINT (Ctrl-C) and SIGTERM (a cancelled CI job) stop a run; they never turn it green.

While ``interruptible()`` is active both signals raise ``KeyboardInterrupt`` in the main thread (pytest stops the
session on it; Hypothesis stops its search) and are remembered, so that the run reports which signal ended it and
exits with the shell's convention, 128 + the signal number: 130 for SIGINT, 143 for SIGTERM.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

RECEIVED: list[int] = []
"""The signals received while interruptible (first first)."""


@contextmanager
def interruptible() -> Iterator[None]:
    RECEIVED.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: Any) -> None:
        RECEIVED.append(signum)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def signal_number() -> int:
    """The signal that interrupted the run (SIGINT when a ``KeyboardInterrupt`` came without one)."""
    return RECEIVED[0] if RECEIVED else int(signal.SIGINT)


def exit_code() -> int:
    return 128 + signal_number()


def describe() -> str:
    return signal.Signals(signal_number()).name
