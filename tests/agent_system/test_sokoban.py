"""Sokoban: gym-sokoban rewards on hand-built rooms, generator invariants, BFS optimality, rendering."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_system.environments.env_package.sokoban.env import SokobanEnv
from agent_system.environments.env_package.sokoban.generator import generate_room
from agent_system.environments.env_package.sokoban.room import ACTIONS, FLOOR, TARGET, WALL, Room, RoomState
from agent_system.environments.env_package.sokoban.solver import solve


def corridor_env(boxes: list[int], player: int, targets: list[int]) -> SokobanEnv:
    """A 3x7 room: one row of floor (flat cells 8..12) between walls, set on a fresh environment."""
    grid = np.full((3, 7), WALL, dtype=np.int8)
    grid[1, 1:6] = FLOOR
    for t in targets:
        grid.flat[t] = TARGET
    env = SokobanEnv(dim_room=(3, 7))
    env.room = Room(grid)
    env.state = RoomState(player=player, boxes=tuple(sorted(boxes)))
    return env


def test_rewards_step_push_on_target_and_solve():
    # _ P X _ O : pushing right twice moves the box onto the target (11 -> 12)
    env = corridor_env(boxes=[10], player=9, targets=[12])
    obs, r, term, trunc, info = env.step("right")
    assert r == pytest.approx(-0.1) and not term and not info["won"]
    assert obs.splitlines()[1] == "# _ _ P X O #"
    obs, r, term, trunc, info = env.step("right")
    assert r == pytest.approx(-0.1 + 1.0 + 10.0) and term and info["won"]
    assert obs.splitlines()[1] == "# _ _ _ P √ #"


def test_box_off_target_costs_one_and_unknown_action_is_a_no_op():
    # two boxes, two targets: pushing the box that sits on a target off it costs 1
    env = corridor_env(boxes=[10, 12], player=9, targets=[10, 13])
    _, r, term, _, _ = env.step("right")  # 10 -> 11 (off target); the other box blocks nothing yet
    assert r == pytest.approx(-0.1 - 1.0) and not term
    before = env.state
    _, r, _, _, _ = env.step("jump")
    assert env.state == before and r == pytest.approx(-0.1)
    _, r, _, _, _ = env.step("")
    assert env.state == before and r == pytest.approx(-0.1)


def test_blocked_pushes_leave_the_state_unchanged():
    env = corridor_env(boxes=[11, 12], player=10, targets=[8, 9])  # two boxes in a row cannot be pushed
    before = env.state
    _, r, _, _, _ = env.step("right")
    assert env.state == before and r == pytest.approx(-0.1)
    _, _, _, _, _ = env.step("up")  # wall
    assert env.state == before


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([(6, 6), (7, 7), (6, 8)]), st.integers(1, 2))
def test_generated_rooms_are_valid_and_solvable(seed, dim_room, num_boxes):
    room, state = generate_room(seed, dim_room, num_boxes, 30)
    grid = room.grid
    assert grid.shape == dim_room
    assert (grid[0] == WALL).all() and (grid[-1] == WALL).all() and (grid[:, 0] == WALL).all() and (grid[:, -1] == WALL).all()
    assert len(state.boxes) == num_boxes == len(room.targets)
    assert all(room.is_free(b) for b in state.boxes) and room.is_free(state.player) and state.player not in state.boxes
    assert not room.solved(state)
    plan = solve(room, state)
    assert plan is not None and len(plan) >= 1
    for action in plan:
        state, _ = room.push(state, action)
    assert room.solved(state)


def test_same_seed_same_room_different_seeds_differ():
    a = generate_room(123)
    b = generate_room(123)
    assert np.array_equal(a[0].grid, b[0].grid) and a[1] == b[1]
    rooms = {generate_room(s)[0].render_text(generate_room(s)[1]) for s in range(30)}
    assert len(rooms) > 20


def test_bfs_plan_is_shortest_against_exhaustive_search():
    """No action sequence shorter than the BFS plan solves the room (checked exhaustively)."""
    for seed in range(12):
        room, start = generate_room(seed)
        plan = solve(room, start)
        for k in range(len(plan)):
            for seq in itertools.product(ACTIONS, repeat=k):
                state = start
                for a in seq:
                    state, _ = room.push(state, a)
                assert not room.solved(state), (seed, seq)


def test_expert_solves_within_fifteen_steps_and_replans_after_a_detour():
    env = SokobanEnv()
    replanned = 0
    for seed in range(20):
        env.reset(seed)
        first = env.expert_action()
        detour = {"up": "down", "down": "up", "left": "right", "right": "left"}[first]
        env.step(detour)  # off the plan
        if solve(env.room, env.state) is None:  # the detour pushed a box into a dead end
            continue
        replanned += 1
        for _ in range(15):
            _, _, term, _, info = env.step(env.expert_action())
            if term:
                break
        assert info["won"], seed
    assert replanned >= 10


def test_text_and_image_observations():
    env = SokobanEnv(mode="rgb_array")
    obs, info = env.reset(5)
    rows = obs.splitlines()
    assert len(rows) == 6 and all(len(r.split()) == 6 for r in rows)
    assert obs.count("P") + obs.count("S") == 1
    assert info["image"].shape == (96, 96, 3) and info["image"].dtype == np.uint8
    assert info["admissible_actions"] == ["up", "down", "left", "right"] and info["won"] is False
    assert "image" not in SokobanEnv(mode="text").reset(5)[1]
    with pytest.raises(ValueError, match="mode"):
        SokobanEnv(mode="ascii")


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.lists(st.sampled_from(list(ACTIONS) + ["", "jump"]), min_size=1, max_size=25))
def test_random_play_invariants_and_reward_identity(seed, actions):
    """Boxes are conserved, never on walls or under the player, the player moves at most one cell, and each
    reward equals -0.1 + (change in boxes on targets) + 10 if solved."""
    env = SokobanEnv()
    env.reset(seed)
    room = env.room
    targets = set(room.targets)
    for action in actions:
        before = env.state
        on_before = len(targets & set(before.boxes))
        _, reward, terminated, _, info = env.step(action)
        after = env.state
        assert len(after.boxes) == len(set(after.boxes)) == len(before.boxes)
        assert all(room.is_free(b) for b in after.boxes) and after.player not in after.boxes
        assert abs(after.player - before.player) in (0, 1, room.width)
        on_after = len(targets & set(after.boxes))
        assert reward == pytest.approx(-0.1 + (on_after - on_before) + 10.0 * terminated)
        assert terminated == info["won"] == (on_after == len(targets))
        if terminated:
            break
