"""Breadth-first Sokoban solver: the shortest action sequence from a state to solved (the expert policy)."""

from __future__ import annotations

from collections import deque

from agent_system.environments.env_package.sokoban.room import ACTIONS, Room, RoomState


def solve(room: Room, start: RoomState, max_states: int = 500_000) -> list[str] | None:
    """Shortest list of actions that solves the room from ``start``; None if unsolvable within
    ``max_states`` explored states. States are (player, boxes); moves that change nothing are skipped."""
    if room.solved(start):
        return []
    parent: dict[RoomState, tuple[RoomState, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        for action in ACTIONS:
            nxt, _moved = room.push(state, action)
            if nxt in parent:
                continue
            parent[nxt] = (state, action)
            if room.solved(nxt):
                plan = []
                node = nxt
                while parent[node] is not None:
                    node, act = parent[node]
                    plan.append(act)
                return plan[::-1]
            if len(parent) >= max_states:
                return None
            queue.append(nxt)
    return None
