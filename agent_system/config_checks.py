"""Small checks shared by the typed config sections: each failure names the key, the value and what is allowed."""

from __future__ import annotations

from typing import Any, Iterable


class ConfigError(ValueError):
    """A configuration value is invalid. The message names the full key, the value and what is allowed."""


def check_choice(key: str, value: Any, allowed: Iterable[Any]) -> None:
    allowed = list(allowed)
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not allowed; choose one of {allowed}")


def check_range(
    key: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{key}={value!r} must be a number")
    if value != value:
        raise ConfigError(f"{key}={value!r} must be a number, not NaN")
    too_low = low is not None and (value < low if low_inclusive else value <= low)
    too_high = high is not None and (value > high if high_inclusive else value >= high)
    if too_low or too_high:
        left = "[" if low_inclusive else "("
        right = "]" if high_inclusive else ")"
        lo = "-inf" if low is None else low
        hi = "inf" if high is None else high
        raise ConfigError(f"{key}={value!r} is out of range; allowed {left}{lo}, {hi}{right}")


def check_int(key: str, value: Any, low: int | None = None, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}={value!r} must be an integer")
    check_range(key, value, low, high)
