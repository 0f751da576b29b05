"""GymCardsEnvironmentManager: one manager for the four games, chosen by env.env_name; cheap, in-process."""

from __future__ import annotations

from agent_system.environments.base import EnvironmentManagerBase

from agent_system.environments.episode import EnvSpec
from agent_system.environments.config import EnvConfig
from agent_system.environments.prompts import gym_cards as gym_cards_prompt

_PKG = "agent_system.environments.env_package.gym_cards"
# standard episode limits (GiGPO's settings; Points24 is ours: enough for a formula of four cards with retries)
STANDARD_MAX_STEPS = {
    "gym_cards/NumberLine-v0": 10,
    "gym_cards/EZPoints-v0": 8,
    "gym_cards/Points24-v0": 20,
    "gym_cards/Blackjack-v0": 15,
}
GAMES = {
    "gym_cards/NumberLine-v0": f"{_PKG}.number_line:NumberLineEnv",
    "gym_cards/EZPoints-v0": f"{_PKG}.points:EZPointsEnv",
    "gym_cards/Points24-v0": f"{_PKG}.points:Points24Env",
    "gym_cards/Blackjack-v0": f"{_PKG}.blackjack:BlackjackEnv",
}


class GymCardsEnvironmentManager(EnvironmentManagerBase):
    prompt_builder = staticmethod(gym_cards_prompt.build_prompt)
    heavy = False

    @classmethod
    def standard_max_steps(cls, config: EnvConfig) -> int:
        return STANDARD_MAX_STEPS.get(config.env_name, cls.default_max_steps)

    @classmethod
    def env_spec(cls, config: EnvConfig, split: str) -> EnvSpec:
        if config.env_name not in GAMES:
            raise ValueError(f"env.env_name={config.env_name!r} is not a Gym Cards game; known: {sorted(GAMES)}")
        kwargs = {"mode": config.gym_cards.mode}
        if config.env_name == "gym_cards/NumberLine-v0":
            kwargs["max_position"] = config.gym_cards.target_max
        return EnvSpec(GAMES[config.env_name], kwargs)
