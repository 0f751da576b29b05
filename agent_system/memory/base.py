"""The memory interface and the factory behind ``env.memory``."""

from __future__ import annotations

import abc
from typing import Sequence

from agent_system.environments.prompts.common import HistoryStep


class BaseMemory(abc.ABC):
    """History of the current episode of each of ``num_envs`` environments."""

    def __init__(self, num_envs: int = 0):
        self.reset(num_envs)

    @abc.abstractmethod
    def reset(self, num_envs: int) -> None:
        """Forget everything; the next episodes start with an empty history."""

    @abc.abstractmethod
    def store(self, indices: Sequence[int], observations: Sequence[str], actions: Sequence[str], results: Sequence[str]) -> None:
        """Record one step for each listed environment: the observation it acted on, the projected action
        and the observation that action produced (aligned lists)."""

    @abc.abstractmethod
    def fetch(self, indices: Sequence[int], history_length: int) -> list[list[HistoryStep]]:
        """The last ``history_length`` steps of each listed environment, oldest first."""


class NoMemory(BaseMemory):
    """``env.memory=none``: prompts never show history."""

    def reset(self, num_envs: int) -> None:
        self.num_envs = num_envs

    def store(self, indices, observations, actions, results) -> None:
        return None

    def fetch(self, indices, history_length):
        return [[] for _ in indices]
