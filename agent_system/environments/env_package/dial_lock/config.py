"""The ``env.dial_lock`` config section (typed, checked when the run config is validated)."""

from __future__ import annotations

from dataclasses import dataclass

from agent_system.config_checks import check_int


@dataclass
class DialLockConfig:
    num_dials: int = 2  # dials to set, in order
    max_digit: int = 4  # each dial shows a digit 0..max_digit (stops at both ends)

    def __post_init__(self):
        check_int("env.dial_lock.num_dials", self.num_dials, 1, 9)
        check_int("env.dial_lock.max_digit", self.max_digit, 1, 9)
