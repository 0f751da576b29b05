"""Sokoban room state and its move rules (shared by the environment, the generator and the solver).

A room is a (H, W) grid of cell types; boxes and the player are kept apart from the static grid so that
states hash cheaply: ``player`` is a flat cell index, ``boxes`` a sorted tuple of flat indices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WALL, FLOOR, TARGET = 0, 1, 2
ACTIONS = ("up", "down", "left", "right")
# text symbols: wall, floor, target, box, box on target, player, player on target
SYMBOLS = {"wall": "#", "floor": "_", "target": "O", "box": "X", "box_on_target": "√", "player": "P", "player_on_target": "S"}


def deltas(width: int) -> dict[str, int]:
    """Flat-index offset of each action on a grid ``width`` cells wide."""
    return {"up": -width, "down": width, "left": -1, "right": 1}


@dataclass(frozen=True)
class RoomState:
    player: int
    boxes: tuple[int, ...]  # sorted flat indices


@dataclass
class Room:
    """Static layout: ``grid`` (H, W) of WALL/FLOOR/TARGET; walls surround the room."""

    grid: np.ndarray

    @property
    def width(self) -> int:
        return int(self.grid.shape[1])

    @property
    def targets(self) -> tuple[int, ...]:
        return tuple(np.flatnonzero(self.grid.ravel() == TARGET).tolist())

    def is_free(self, cell: int) -> bool:
        return self.grid.flat[cell] != WALL

    def push(self, state: RoomState, action: str) -> tuple[RoomState, int]:
        """Forward move: the player steps; a box in the way is pushed if the cell behind it is free.
        Returns the new state and the box moved (-1 when none; state unchanged when blocked)."""
        d = deltas(self.width)[action]
        nxt = state.player + d
        if not self.is_free(nxt):
            return state, -1
        if nxt in state.boxes:
            beyond = nxt + d
            if not self.is_free(beyond) or beyond in state.boxes:
                return state, -1
            boxes = tuple(sorted(beyond if b == nxt else b for b in state.boxes))
            return RoomState(nxt, boxes), nxt
        return RoomState(nxt, state.boxes), -1

    def pull(self, state: RoomState, action: str) -> RoomState:
        """Reverse move (generator): the player steps; a box right behind it follows (is pulled)."""
        d = deltas(self.width)[action]
        nxt = state.player + d
        if not self.is_free(nxt) or nxt in state.boxes:
            return state
        behind = state.player - d
        if behind in state.boxes:
            boxes = tuple(sorted(state.player if b == behind else b for b in state.boxes))
            return RoomState(nxt, boxes)
        return RoomState(nxt, state.boxes)

    def solved(self, state: RoomState) -> bool:
        return all(self.grid.flat[b] == TARGET for b in state.boxes)

    def render_text(self, state: RoomState) -> str:
        """Rows of symbols (see SYMBOLS), one line per row."""
        h, w = self.grid.shape
        cells = np.where(self.grid.ravel() == WALL, SYMBOLS["wall"], np.where(self.grid.ravel() == TARGET, SYMBOLS["target"], SYMBOLS["floor"])).astype(object)
        for b in state.boxes:
            cells[b] = SYMBOLS["box_on_target"] if self.grid.flat[b] == TARGET else SYMBOLS["box"]
        cells[state.player] = SYMBOLS["player_on_target"] if self.grid.flat[state.player] == TARGET else SYMBOLS["player"]
        return "\n".join(" ".join(cells[r * w : (r + 1) * w]) for r in range(h))
