"""NumberLine: move a marker along 0..max_position to the target with "+" (right) and "-" (left).

Rewards (RL4VLM): +1 on reaching the target (the episode ends), -1 for a step that does not bring the
marker closer (including a blocked move or an unknown action), 0 otherwise; truncated after
2 * max_position steps. Start and target differ.
"""

from __future__ import annotations

from agent_system.environments.env_package.gym_cards.base import CardGameEnv
from agent_system.environments.env_package.gym_cards.render import render_text_panel


class NumberLineEnv(CardGameEnv):
    task = "Move the current position to the target position on the number line, one step at a time: '+' moves right by 1, '-' moves left by 1."

    def __init__(self, max_position: int = 5, mode: str = "text"):
        super().__init__(mode)
        if max_position < 1:
            raise ValueError(f"max_position={max_position} must be >= 1")
        self.max_position = max_position

    def actions(self) -> list[str]:
        return ["+", "-"]

    def _deal(self) -> None:
        self.target = int(self.rng.integers(0, self.max_position + 1))
        offset = int(self.rng.integers(1, self.max_position + 1))  # start != target
        self.position = (self.target + offset) % (self.max_position + 1)
        self.steps = 0

    def _step(self, action: str):
        self.steps += 1
        before = abs(self.position - self.target)
        if action == "+":
            self.position = min(self.position + 1, self.max_position)
        elif action == "-":
            self.position = max(self.position - 1, 0)
        after = abs(self.position - self.target)
        if after == 0:
            return 1.0, True, False, True
        reward = -1.0 if after >= before else 0.0
        return reward, False, self.steps >= 2 * self.max_position, False

    def _text(self) -> str:
        return f"Target: {self.target}\nCurrent: {self.position}"

    def _image(self):
        return render_text_panel([f"Target: {self.target}", f"Current: {self.position}"])

    def expert_action(self) -> str:
        return "+" if self.position < self.target else "-"
