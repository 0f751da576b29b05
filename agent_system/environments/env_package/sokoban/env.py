"""SokobanEnv: one seeded Sokoban episode with text actions up/down/left/right.

Rewards follow gym-sokoban: -0.1 every step, +1 for pushing a box onto a target, -1 for pushing one off,
+10 when every box is on a target (the episode then terminates). Unknown action text moves nothing and
costs the step penalty. The step limit is the manager's (env.max_steps).
"""

from __future__ import annotations

from typing import Any

from agent_system.environments.episode import AgentEnv
from agent_system.environments.env_package.sokoban.generator import generate_room
from agent_system.environments.env_package.sokoban.render import render_rgb
from agent_system.environments.env_package.sokoban.room import ACTIONS, TARGET, Room, RoomState
from agent_system.environments.env_package.sokoban.solver import solve

STEP_PENALTY = -0.1
BOX_ON_TARGET = 1.0
BOX_OFF_TARGET = -1.0
SOLVED_BONUS = 10.0
TASK = "Push every box (X) onto a target (O). You are P (S when standing on a target); # is a wall, _ is floor, √ is a box on a target."


class SokobanEnv(AgentEnv):
    def __init__(self, dim_room=(6, 6), num_boxes: int = 1, search_depth: int = 30, mode: str = "text"):
        if mode not in ("text", "rgb_array"):
            raise ValueError(f"mode={mode!r} must be 'text' or 'rgb_array'")
        self.dim_room = (int(dim_room[0]), int(dim_room[1]))
        self.num_boxes = num_boxes
        self.search_depth = search_depth
        self.mode = mode
        self.room: Room | None = None
        self.state: RoomState | None = None
        self._plan: list[str] = []
        self._plan_state: RoomState | None = None

    def _info(self, won: bool) -> dict[str, Any]:
        info: dict[str, Any] = {"won": won, "task": TASK, "task_type": None, "admissible_actions": list(ACTIONS)}
        if self.mode == "rgb_array":
            info["image"] = render_rgb(self.room, self.state)
        return info

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self.room, self.state = generate_room(int(seed), self.dim_room, self.num_boxes, self.search_depth)
        self._plan, self._plan_state = [], None
        return self.room.render_text(self.state), self._info(False)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.room is None:
            raise RuntimeError("SokobanEnv.step called before reset")
        reward = STEP_PENALTY
        key = action.strip().lower() if isinstance(action, str) else ""
        if key in ACTIONS:
            before = self.state
            self.state, moved = self.room.push(before, key)
            if moved >= 0:
                was_on = self.room.grid.flat[moved] == TARGET
                now = self.state.player + (self.state.player - before.player)
                now_on = self.room.grid.flat[now] == TARGET
                reward += BOX_ON_TARGET * (now_on and not was_on) + BOX_OFF_TARGET * (was_on and not now_on)
        won = self.room.solved(self.state)
        if won:
            reward += SOLVED_BONUS
        return self.room.render_text(self.state), float(reward), won, False, self._info(won)

    def expert_action(self) -> str | None:
        """Next move of a shortest solution (BFS), replanned whenever the state left the plan."""
        if self.room is None:
            return None
        if self._plan_state != self.state or not self._plan:
            self._plan = solve(self.room, self.state) or []
        if not self._plan:
            return None
        action = self._plan.pop(0)
        self._plan_state, _ = self.room.push(self.state, action)
        return action
