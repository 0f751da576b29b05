"""AlfworldEnv: one ALFWorld text episode (reward 10 x won, admissible commands without "help")."""

from __future__ import annotations

import json
from typing import Any, Sequence

from agent_system.environments.episode import AgentEnv
from agent_system.environments.env_package.alfworld.engine import AlfredTextGame
from agent_system.environments.env_package.alfworld.game_files import task_type_of

WIN_REWARD = 10.0
_HEADER = "-= Welcome to TextWorld, ALFRED! =-"
_TASK_PREFIX = "Your task is to: "


class AlfworldEnv(AgentEnv):
    """Plays ``game_files[seed % len(game_files)]``; every copy built with the same list agrees on that."""

    def __init__(self, game_files: Sequence[str]):
        if not game_files:
            raise ValueError("AlfworldEnv needs at least one game file")
        self.game_files = list(game_files)
        self._game = AlfredTextGame()
        self._walkthrough: list[str] = []
        self._plan: list[str] = []  # remaining expert commands from the current state
        self._state: dict[str, Any] = {}
        self._info: dict[str, Any] = {}

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        path = self.game_files[int(seed) % len(self.game_files)]
        self._state = self._game.load_and_reset(path)
        with open(path) as f:
            self._walkthrough = list(json.load(f).get("walkthrough") or [])
        self._plan = list(self._walkthrough)
        text = self._state["feedback"].replace(_HEADER, "").strip()
        task = text.split(_TASK_PREFIX, 1)[1].strip().rstrip(".") if _TASK_PREFIX in text else ""
        self._info = {"task": task, "task_type": task_type_of(path), "gamefile": path}
        return text, self._make_info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        action = (action or "").strip()
        if self._plan and action == self._plan[0]:
            self._plan.pop(0)
        else:
            self._plan = []  # off the stored plan: the expert replans once, on demand
        self._state = self._game.step(action)
        won = self._state["won"]
        return self._state["feedback"], WIN_REWARD if won else 0.0, won, False, self._make_info()

    def expert_action(self) -> str | None:
        if self._state.get("won"):
            return None
        if not self._plan:
            self._plan = self._game.replan()
        return self._plan[0] if self._plan else None

    def _make_info(self) -> dict[str, Any]:
        return {**self._info, "won": self._state["won"], "admissible_actions": list(self._state["admissible_commands"]),
                "hidden_state": self._state["hidden_state"]}
