"""TextworldEnvironmentManager: games generated with tw-make (cached), stepped in-process (2-10 ms a step)."""

from __future__ import annotations

from agent_system.environments.base import EnvironmentManagerBase

from agent_system.environments.episode import EnvSpec
from agent_system.environments.config import EnvConfig
from agent_system.environments.env_package.textworld.games import ensure_games
from agent_system.environments.prompts import textworld as textworld_prompt


class TextworldEnvironmentManager(EnvironmentManagerBase):
    default_max_steps = 50
    prompt_builder = staticmethod(textworld_prompt.build_prompt)
    heavy = False

    @classmethod
    def env_spec(cls, config: EnvConfig, split: str) -> EnvSpec:
        t = config.textworld
        files = ensure_games(t.games_dir, t.challenge, t.level, "train" if split == "train" else "val", t.num_games)
        return EnvSpec("agent_system.environments.env_package.textworld.env:TextworldEnv", {"game_files": files, "challenge": t.challenge})
