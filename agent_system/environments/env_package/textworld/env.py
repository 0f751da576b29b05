"""TextworldEnv: one generated TextWorld game (z-machine via TextWorld's own runner).

Reward is TextWorld's score increase (coin collector and treasure hunter: 1 on success; cooking: a point per
recipe step); ``won`` ends the episode, as does ``lost``. The expert replays the walkthrough tw-make stored.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from agent_system.environments.episode import AgentEnv

_PROMPT_LINE = re.compile(r"^\s*>.*$", re.MULTILINE)


def clean_feedback(text: str, objective: str | None = None) -> str:
    """Drop the title banner (everything before the objective on reset), the ">" prompt lines and the status
    bar after them, and runs of blank lines."""
    if objective and objective in text:
        text = text[text.index(objective) :]
    text = _PROMPT_LINE.sub("", text)
    return re.sub(r"\n\s*\n+", "\n\n", text).strip()


class TextworldEnv(AgentEnv):
    def __init__(self, game_files: Sequence[str], challenge: str = "textworld"):
        if not game_files:
            raise ValueError("TextworldEnv needs at least one game file")
        self.game_files = list(game_files)
        self.challenge = challenge
        self._env = None
        self._loaded = None
        self._plan: list[str] = []
        self._score = 0
        self._state = None

    def _load(self, path: str) -> None:
        import textworld

        if self._loaded == path:
            return
        if self._env is not None:
            self._env.close()
        infos = textworld.EnvInfos(admissible_commands=True, won=True, lost=True, objective=True, score=True, extras=["walkthrough"])
        self._env = textworld.start(path, request_infos=infos)
        self._loaded = path

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self._load(self.game_files[int(seed) % len(self.game_files)])
        self._state = self._env.reset()
        self._score = self._state.score or 0
        self._plan = list(self._state.get("extra.walkthrough") or [])
        self._objective = str(self._state.objective or "").strip()
        return clean_feedback(self._state.feedback, self._objective), self._info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        action = (action or "").strip()
        self._plan = self._plan[1:] if self._plan and action == self._plan[0] else []
        self._state, _, done = self._env.step(action)
        score = self._state.score or 0
        reward, self._score = float(score - self._score), score
        return clean_feedback(self._state.feedback), reward, bool(done or self._state.won or self._state.lost), False, self._info()

    def expert_action(self) -> str | None:
        """The next walkthrough command while the agent has followed it; None once it has strayed."""
        return self._plan[0] if self._plan else None

    def _info(self) -> dict[str, Any]:
        admissible = [c for c in self._state.admissible_commands or [] if c != "help"]
        return {"won": bool(self._state.won), "lost": bool(self._state.lost), "task": self._objective,
                "task_type": self.challenge, "admissible_actions": admissible}

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
