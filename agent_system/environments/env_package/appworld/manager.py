"""AppworldEnvironmentManager (experimental): AppWorld tasks through a bridge process per environment, the
environments themselves in worker processes (a hung bridge is killed with its worker at step_timeout_s)."""

from __future__ import annotations

from typing import Any, Mapping

from agent_system.environments.base import EnvironmentManagerBase

from agent_system.environments.episode import EnvSpec
from agent_system.environments.config import EnvConfig
from agent_system.environments.prompts import appworld as appworld_prompt


class AppworldEnvironmentManager(EnvironmentManagerBase):
    default_max_steps = 30
    prompt_builder = staticmethod(appworld_prompt.build_prompt)
    heavy = True

    @classmethod
    def env_spec(cls, config: EnvConfig, split: str) -> EnvSpec:
        a = config.appworld
        dataset = a.dataset if split == "train" else a.val_dataset
        return EnvSpec(
            "agent_system.environments.env_package.appworld.env:AppworldEnv",
            {"python": a.python, "dataset": dataset, "use_standin": a.use_standin, "timeout_s": a.timeout_s},
        )

    def parse_action(self, action_text: str, info: Mapping[str, Any]) -> tuple[str, bool]:
        """Any non-empty code is a legal action (AppWorld reports errors in the output)."""
        return action_text, bool(action_text.strip())
