"""DialLockEnv: open a combination lock by turning its dials, one at a time, to their target digits (the code).

The lock has ``num_dials`` dials, each showing a digit 0..``max_digit`` with stops at both ends (no
wrap-around). The dials are set in order: '+' turns the active dial up by one, '-' down by one, and a dial that
shows its target digit clicks into place and hands over to the next one. Every dial starts away from its target,
so each needs at least one turn, and a policy that always answers the same action opens only the locks
whose dials all turn that way.

Rewards (NumberLine's): +1 when the last dial clicks into place (the lock opens, the episode ends), -1 for a
turn that does not bring the active dial closer to its target (the wrong way, against a stop, an unknown
action), 0 otherwise. The step limit is the manager's (``env.max_steps``).

The observation shows the active dial alone (its number, target digit and current digit): the same dial state
recurs across tasks whatever the other dials show, and the expert's turn, towards the target, is the only
shortest move. The wording of the task and the observation is the one of several under which SmolLM2-135M
most often answers in the format (docs/results.md, "Choosing the second benchmark").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agent_system.environments.episode import AgentEnv

ACTIONS = ["+", "-"]


class DialLockEnv(AgentEnv):
    def __init__(self, num_dials: int = 2, max_digit: int = 4):
        if num_dials < 1 or max_digit < 1:
            raise ValueError(f"num_dials={num_dials} and max_digit={max_digit} must both be >= 1")
        self.num_dials = num_dials
        self.max_digit = max_digit
        self.task = (f"Open the lock: set each dial to its target digit (0 to {max_digit}), one dial at a time. "
                     f"'+' turns the dial up by 1, '-' turns it down by 1.")
        self.code: list[int] = []
        self.digits: list[int] = []
        self.active = 0
        self.started = False

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        rng = np.random.default_rng(int(seed))  # the seed fixes the whole episode
        values = self.max_digit + 1
        self.code = [int(c) for c in rng.integers(0, values, size=self.num_dials)]
        offsets = rng.integers(1, values, size=self.num_dials)  # start != code on every dial
        self.digits = [(c + int(o)) % values for c, o in zip(self.code, offsets)]
        self.active = 0
        self.started = True
        return self._text(), self._info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not self.started:
            raise RuntimeError("DialLockEnv.step called before reset")
        if self.opened:
            return self._text(), 0.0, True, False, self._info()
        turn = action.strip() if isinstance(action, str) else ""
        dial = self.active
        before = abs(self.digits[dial] - self.code[dial])
        if turn == "+":
            self.digits[dial] = min(self.digits[dial] + 1, self.max_digit)
        elif turn == "-":
            self.digits[dial] = max(self.digits[dial] - 1, 0)
        after = abs(self.digits[dial] - self.code[dial])
        if after == 0:
            self.active += 1
            if self.opened:
                return self._text(), 1.0, True, False, self._info()
        return self._text(), (-1.0 if after >= before else 0.0), False, False, self._info()

    @property
    def opened(self) -> bool:
        return self.active == self.num_dials

    def expert_action(self) -> str | None:
        if self.opened:
            return None
        return "+" if self.digits[self.active] < self.code[self.active] else "-"

    def _text(self) -> str:
        if self.opened:
            return "The lock is open."
        dial = self.active
        return f"Dial: {dial + 1} of {self.num_dials}\nTarget: {self.code[dial]}\nCurrent: {self.digits[dial]}"

    def _info(self) -> dict[str, Any]:
        return {"won": self.opened, "task": self.task, "task_type": None, "admissible_actions": list(ACTIONS)}
