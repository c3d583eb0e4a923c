"""Argument validation in the style of ``hypothesis.extra.numpy``: bad arguments raise ``InvalidArgument``."""

from __future__ import annotations

from typing import Any

from hypothesis.errors import InvalidArgument


def check_int(name: str, value: Any, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name}={value!r} must be an integer")
    if value < minimum:
        raise InvalidArgument(f"{name}={value} must be at least {minimum}")
    return value


def check_range(min_name: str, lo: int, max_name: str, hi: int) -> None:
    if lo > hi:
        raise InvalidArgument(f"{min_name}={lo} must be <= {max_name}={hi}")


def check_choices(name: str, value: Any, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """``value``: a non-empty tuple of members of ``allowed``."""
    if not isinstance(value, tuple) or not value or any(v not in allowed for v in value):
        raise InvalidArgument(f"{name}={value!r} must be a non-empty tuple of {allowed}")
    return value
