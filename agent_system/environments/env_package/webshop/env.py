"""WebshopEnv: one WebShop episode over the real WebShop text environment or the built-in shop.

Reward 10 when the purchase scores 1.0, else 0; ``task_score`` (the purchase score in [0, 1]) is logged.
Admissible actions are built from the page: ``search[<your query>]`` when there is a search bar, and
``click[<target>]`` for every clickable.
"""

from __future__ import annotations

from typing import Any

from agent_system.environments.episode import AgentEnv

WIN_REWARD = 10.0
SEARCH_PLACEHOLDER = "search[<your query>]"


def _real_webshop_env(num_products: int | None, use_small: bool):
    """WebShop's own text environment (needs its package and data; not available offline here)."""
    try:
        from web_agent_site.envs.web_agent_text_env import WebAgentTextEnv
    except ImportError as exc:
        raise ImportError("env.webshop.use_builtin_shop=false needs the WebShop package (web_agent_site) and its data installed; "
                          "see docs/integrations.md") from exc
    return WebAgentTextEnv(observation_mode="text", num_products=num_products, human_goals=True)


class WebshopEnv(AgentEnv):
    def __init__(self, use_builtin_shop: bool = True, num_products: int = 200, use_small: bool = True, seed: int = 0, split: str = "train"):
        if use_builtin_shop:
            from agent_system.environments.env_package.webshop.shop import BuiltinShopTextEnv

            self.shop = BuiltinShopTextEnv(num_products=num_products, seed=seed, split=split)
        else:
            self.shop = _real_webshop_env(num_products, use_small)
        self._task = ""

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        out = self.shop.reset(session=int(seed))
        obs = out[0] if isinstance(out, tuple) else out
        self._task = str(self.shop.instruction_text)
        return obs, self._info(won=False, task_score=0.0)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, score, done, step_info = self.shop.step(action)
        score = float(score or 0.0)
        won = bool(done) and score >= 1.0 - 1e-9
        info = self._info(won=won, task_score=score if done else 0.0)
        if isinstance(step_info, dict) and "purchase" in step_info:
            info["purchase"] = step_info["purchase"]
        return obs, WIN_REWARD if won else 0.0, bool(done), False, info

    def expert_action(self) -> str | None:
        expert = getattr(self.shop, "expert_action", None)
        return expert() if expert is not None else None

    def _info(self, won: bool, task_score: float) -> dict[str, Any]:
        available = self.shop.get_available_actions()
        actions = [SEARCH_PLACEHOLDER] if available.get("has_search_bar") else []
        actions += [f"click[{c}]" for c in available.get("clickables", []) if c != "search"]
        return {"won": won, "task_score": task_score, "task": self._task, "task_type": None, "admissible_actions": actions}
