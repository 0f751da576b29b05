"""WebshopEnvironmentManager: the built-in shop (default, offline) or the real WebShop text environment."""

from __future__ import annotations

from typing import Any, Mapping

from agent_system.environments.base import EnvironmentManagerBase

from agent_system.environments.episode import EnvSpec
from agent_system.environments.config import EnvConfig
from agent_system.environments.env_package.webshop.env import SEARCH_PLACEHOLDER
from agent_system.environments.prompts import webshop as webshop_prompt


class WebshopEnvironmentManager(EnvironmentManagerBase):
    prompt_builder = staticmethod(webshop_prompt.build_prompt)
    heavy = False

    @classmethod
    def env_spec(cls, config: EnvConfig, split: str) -> EnvSpec:
        w = config.webshop
        return EnvSpec(
            "agent_system.environments.env_package.webshop.env:WebshopEnv",
            {"use_builtin_shop": w.use_builtin_shop, "num_products": w.num_products, "use_small": w.use_small, "seed": config.seed, "split": split},
        )

    def parse_action(self, action_text: str, info: Mapping[str, Any]) -> tuple[str, bool]:
        """``search[query]`` is legal on a page with a search bar; ``click[x]`` when x is clickable
        (case-insensitive). Illegal text still goes to the shop, which leaves the page unchanged."""
        text = action_text.strip()
        admissible = info.get("admissible_actions") or []
        lowered = text.lower()
        if lowered.startswith("search[") and lowered.endswith("]") and len(text) > len("search[]"):
            return text, SEARCH_PLACEHOLDER in admissible
        for a in admissible:
            if a.lower() == lowered:
                return a, True
        return text, False
