"""SearchMemory: for tool-use environments, each step's action (a query or an answer) and what it returned."""

from __future__ import annotations

from typing import Sequence

from agent_system.environments.prompts.common import HistoryStep
from agent_system.memory.base import BaseMemory


class SearchMemory(BaseMemory):
    """Keeps (action, result) pairs: the search query the agent issued and the passages that came back.
    The observation the agent acted on is left out because it is the previous step's result."""

    def reset(self, num_envs: int) -> None:
        self._steps: list[list[HistoryStep]] = [[] for _ in range(num_envs)]

    def store(self, indices: Sequence[int], observations: Sequence[str], actions: Sequence[str], results: Sequence[str]) -> None:
        for i, act, res in zip(indices, actions, results):
            steps = self._steps[i]
            steps.append(HistoryStep(step=len(steps), observation="", action=act, result=res))

    def fetch(self, indices: Sequence[int], history_length: int) -> list[list[HistoryStep]]:
        if history_length <= 0:
            return [[] for _ in indices]
        return [list(self._steps[i][-history_length:]) for i in indices]
