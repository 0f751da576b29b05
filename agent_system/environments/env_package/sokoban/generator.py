"""Seeded room generator: carve a room by a random walk, put every box on a target, then play the solved
room backwards (the player pulls boxes) and keep the reachable state farthest from solved.

Playing backwards guarantees the room is solvable: reversing the pulls gives a sequence of pushes.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from agent_system.environments.env_package.sokoban.room import ACTIONS, FLOOR, TARGET, WALL, Room, RoomState

_MAX_ATTEMPTS = 200


# brushes stamped at each position of the walk (offsets from the walker): a cell, bars, a square, a cross
_BRUSHES = [
    np.array([(0, 0)]),
    np.array([(0, 0), (0, 1), (0, 2)]),
    np.array([(0, 0), (1, 0), (2, 0)]),
    np.array([(0, 0), (0, 1), (1, 0), (1, 1)]),
    np.array([(0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)]),
]


def _carve(rng: np.random.Generator, h: int, w: int, walk_steps: int) -> np.ndarray:
    """Floor cells carved by a random walk that stamps a random brush at every position and changes
    direction now and then (the border stays wall)."""
    grid = np.full((h, w), WALL, dtype=np.int8)
    r, c = int(rng.integers(1, h - 1)), int(rng.integers(1, w - 1))
    moves = np.array([(-1, 0), (1, 0), (0, -1), (0, 1)])
    d = moves[rng.integers(4)]
    for _ in range(walk_steps):
        cells = _BRUSHES[rng.integers(len(_BRUSHES))] + (r, c)
        cells = cells[(cells[:, 0] >= 1) & (cells[:, 0] <= h - 2) & (cells[:, 1] >= 1) & (cells[:, 1] <= w - 2)]
        grid[cells[:, 0], cells[:, 1]] = FLOOR
        if rng.random() < 0.35:
            d = moves[rng.integers(4)]
        r = int(np.clip(r + d[0], 1, h - 2))
        c = int(np.clip(c + d[1], 1, w - 2))
    return grid


def _reverse_play(rng: np.random.Generator, room: Room, start: RoomState, depth: int, walks: int) -> tuple[RoomState, float]:
    """Several random backward walks of ``depth`` moves; the best state scores boxes moved x distance."""
    width = room.width
    targets = np.array(room.targets)
    best, best_score = start, 0.0
    for _ in range(walks):
        state, pulls = start, 0
        for a in rng.integers(0, 4, size=depth):
            nxt = room.pull(state, ACTIONS[a])
            pulls += nxt.boxes != state.boxes
            state = nxt
            boxes = np.array(state.boxes)
            off = ~np.isin(boxes, targets)
            if not off.any():
                continue
            dist = np.abs(boxes[:, None] // width - targets[None, :] // width) + np.abs(boxes[:, None] % width - targets[None, :] % width)
            score = float(pulls * dist.min(axis=1).sum())
            if score >= best_score and score > 0:  # ties: the later state, where the player has walked on
                best, best_score = state, score
    return best, best_score


@lru_cache(maxsize=4096)  # the G copies of a task ask for the same room; the result is never mutated
def generate_room(seed: int, dim_room: tuple[int, int] = (6, 6), num_boxes: int = 1, search_depth: int = 30) -> tuple[Room, RoomState]:
    """The room and start state for ``seed`` (same seed, same room). At least one box starts off target."""
    h, w = dim_room
    rng = np.random.default_rng(seed)
    walk_steps = int(1.7 * (h + w))
    for _ in range(_MAX_ATTEMPTS):
        grid = _carve(rng, h, w, walk_steps)
        floor = np.flatnonzero(grid.ravel() == FLOOR)
        if len(floor) < num_boxes + 2:
            continue
        cells = rng.choice(floor, size=num_boxes + 1, replace=False)
        grid.flat[cells[:num_boxes]] = TARGET
        room = Room(grid)
        solved = RoomState(player=int(cells[-1]), boxes=tuple(sorted(int(c) for c in cells[:num_boxes])))
        state, score = _reverse_play(rng, room, solved, search_depth, walks=4)
        if score > 0:
            grid.setflags(write=False)  # shared through the cache
            return room, state
    raise RuntimeError(f"no solvable room found for seed={seed}, dim_room={dim_room}, num_boxes={num_boxes} after {_MAX_ATTEMPTS} attempts")
