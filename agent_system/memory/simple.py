"""SimpleMemory: the last observation/action pairs of each environment."""

from __future__ import annotations

from typing import Sequence

from agent_system.environments.prompts.common import HistoryStep
from agent_system.memory.base import BaseMemory


class SimpleMemory(BaseMemory):
    """Keeps every (observation, projected action) pair of the episode; ``fetch`` returns the last
    ``history_length`` of them. Only the projected action is stored, never the model's reasoning."""

    def reset(self, num_envs: int) -> None:
        self._steps: list[list[HistoryStep]] = [[] for _ in range(num_envs)]

    def store(self, indices: Sequence[int], observations: Sequence[str], actions: Sequence[str], results: Sequence[str]) -> None:
        for i, obs, act in zip(indices, observations, actions):
            steps = self._steps[i]
            steps.append(HistoryStep(step=len(steps), observation=obs, action=act))

    def fetch(self, indices: Sequence[int], history_length: int) -> list[list[HistoryStep]]:
        if history_length <= 0:
            return [[] for _ in indices]
        return [list(self._steps[i][-history_length:]) for i in indices]
