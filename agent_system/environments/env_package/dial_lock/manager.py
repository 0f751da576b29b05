"""DialLockManager: B tasks x G copies of DialLockEnv, stepped in-process (a step is a few integer operations)."""

from __future__ import annotations

from agent_system.environments.base import EnvironmentManagerBase

from agent_system.environments.episode import EnvSpec
from agent_system.environments.config import EnvConfig
from agent_system.environments.prompts import gym_cards as gym_cards_prompt


class DialLockManager(EnvironmentManagerBase):
    # the Gym Cards prompt: task, state, admissible actions and the answer format, as for NumberLine
    prompt_builder = staticmethod(gym_cards_prompt.build_prompt)
    heavy = False

    @classmethod
    def standard_max_steps(cls, config: EnvConfig) -> int:
        """Twice the longest expert episode (every dial max_digit turns away), as NumberLine's limit."""
        return 2 * config.dial_lock.num_dials * config.dial_lock.max_digit

    @classmethod
    def env_spec(cls, config: EnvConfig, split: str) -> EnvSpec:
        lock = config.dial_lock
        return EnvSpec("agent_system.environments.env_package.dial_lock.env:DialLockEnv",
                       {"num_dials": lock.num_dials, "max_digit": lock.max_digit})
