"""Shared parts of the Gym Cards environments: seeding, the image mode, the info dict."""

from __future__ import annotations

from typing import Any

import numpy as np

from agent_system.environments.episode import AgentEnv


class CardGameEnv(AgentEnv):
    """Subclasses implement ``_deal()``, ``_step(action) -> (reward, terminated, truncated, won)``,
    ``_text()``, ``_image()`` and ``actions()``; all randomness comes from ``self.rng`` (seeded at reset),
    so a seed fixes the whole episode, hidden cards included."""

    task: str = ""

    def __init__(self, mode: str = "text"):
        if mode not in ("text", "rgb_array"):
            raise ValueError(f"mode={mode!r} must be 'text' or 'rgb_array'")
        self.mode = mode
        self.rng = np.random.default_rng(0)
        self.won = False
        self.started = False

    def actions(self) -> list[str]:
        raise NotImplementedError

    def _deal(self) -> None:
        raise NotImplementedError

    def _step(self, action: str) -> tuple[float, bool, bool, bool]:
        raise NotImplementedError

    def _text(self) -> str:
        raise NotImplementedError

    def _image(self) -> np.ndarray:
        raise NotImplementedError

    def _info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"won": self.won, "task": self.task, "task_type": None, "admissible_actions": self.actions()}
        if self.mode == "rgb_array":
            info["image"] = self._image()
        return info

    def reset(self, seed: int):
        self.rng = np.random.default_rng(int(seed))
        self.won = False
        self.started = True
        self._deal()
        return self._text(), self._info()

    def step(self, action: str):
        if not self.started:
            raise RuntimeError(f"{type(self).__name__}.step called before reset")
        token = action.strip() if isinstance(action, str) else ""
        reward, terminated, truncated, won = self._step(token)
        self.won = won
        return self._text(), float(reward), terminated, truncated, self._info()
