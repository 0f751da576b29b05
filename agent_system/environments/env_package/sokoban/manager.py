"""SokobanEnvironmentManager: cheap, stepped in-process."""

from __future__ import annotations

from agent_system.environments.base import EnvironmentManagerBase

from agent_system.environments.episode import EnvSpec
from agent_system.environments.config import EnvConfig
from agent_system.environments.prompts import sokoban as sokoban_prompt


class SokobanEnvironmentManager(EnvironmentManagerBase):
    prompt_builder = staticmethod(sokoban_prompt.build_prompt)
    heavy = False

    @classmethod
    def env_spec(cls, config: EnvConfig, split: str) -> EnvSpec:
        s = config.sokoban
        return EnvSpec(
            "agent_system.environments.env_package.sokoban.env:SokobanEnv",
            {"dim_room": tuple(s.dim_room), "num_boxes": s.num_boxes, "search_depth": s.search_depth, "mode": s.mode},
        )
