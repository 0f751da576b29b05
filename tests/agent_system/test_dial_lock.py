"""Dial lock: rewards and click-in on hand-worked turns, stops at both ends, seeded episodes and groups, the
expert's shortest plans, admissible actions through the manager, and its config section."""

from __future__ import annotations

import re

import pytest

from agent_system.config_checks import ConfigError
from agent_system.environments import make_envs
from agent_system.environments.config import env_config_from_mapping
from agent_system.environments.env_package.dial_lock.env import DialLockEnv
from agent_system.environments.registry import get_env_manager_class, known_env_names
from agent_system.multi_turn_rollout.protocols import SamplingParams
from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
from agent_system.testing.policies import ExpertGenerator

STATE = re.compile(r"^Dial: (\d) of (\d)\nTarget: (\d)\nCurrent: (\d)$")


def dial_state(obs: str) -> tuple[int, int, int, int]:
    """(active dial 1-based, dials, code digit, current digit) read from an observation."""
    match = STATE.match(obs)
    assert match, obs
    return tuple(int(g) for g in match.groups())


def seed_where(predicate, num_dials: int = 2, max_digit: int = 4) -> tuple[DialLockEnv, str]:
    """A lock reset to the first seed whose first observation satisfies ``predicate``."""
    env = DialLockEnv(num_dials=num_dials, max_digit=max_digit)
    for seed in range(1000):
        obs, _ = env.reset(seed)
        if predicate(*dial_state(obs)[2:]):
            return env, obs
    raise AssertionError("no seed found")


def test_turns_rewards_click_in_and_opening():
    env, obs = seed_where(lambda code, current: current == code - 2)  # dial 1 needs two turns up
    assert dial_state(obs)[:2] == (1, 2)
    code = dial_state(obs)[2]
    obs, reward, terminated, truncated, info = env.step("-")  # the wrong way
    assert (reward, terminated, truncated, info["won"]) == (-1.0, False, False, False)
    assert dial_state(obs) == (1, 2, code, code - 3) or dial_state(obs) == (1, 2, code, 0)
    assert env.step("jump")[1] == -1.0 and env.step("")[1] == -1.0  # unknown actions: no turn, not closer
    while dial_state(obs)[3] < code - 1:
        obs, reward, *_ = env.step("+")
        assert reward == 0.0
    obs, reward, terminated, _, info = env.step("+")  # dial 1 clicks into place: dial 2 is active
    assert (reward, terminated, info["won"]) == (0.0, False, False)
    active, _, code2, current2 = dial_state(obs)
    assert active == 2 and current2 != code2
    turn = "+" if current2 < code2 else "-"
    for _ in range(abs(code2 - current2) - 1):
        obs, reward, terminated, _, _ = env.step(turn)
        assert (reward, terminated) == (0.0, False) and dial_state(obs)[0] == 2
    obs, reward, terminated, truncated, info = env.step(turn)
    assert (obs, reward, terminated, truncated, info["won"]) == ("The lock is open.", 1.0, True, False, True)


def test_dials_stop_at_both_ends():
    env, obs = seed_where(lambda code, current: current == 0, max_digit=3)
    obs, reward, *_ = env.step("-")
    assert dial_state(obs)[3] == 0 and reward == -1.0  # against the stop: no turn, not closer
    env, obs = seed_where(lambda code, current: current == 3, max_digit=3)
    obs, reward, *_ = env.step("+")
    assert dial_state(obs)[3] == 3 and reward == -1.0


def test_same_seed_same_episode_and_every_dial_starts_off_its_code():
    starts = set()
    for seed in range(200):
        a, b = DialLockEnv(num_dials=3, max_digit=3), DialLockEnv(num_dials=3, max_digit=3)
        obs_a, obs_b = a.reset(seed)[0], b.reset(seed)[0]
        while True:
            assert obs_a == obs_b
            if obs_a == "The lock is open.":
                break
            active, dials, code, current = dial_state(obs_a)
            assert dials == 3 and current != code and 0 <= current <= 3 and 0 <= code <= 3
            starts.add((active, code, current))
            action = a.expert_action()
            assert action == b.expert_action()
            obs_a, obs_b = a.step(action)[0], b.step(action)[0]
    # all 12 (code, current) pairs with current != code occur on each of the 3 dials
    assert len(starts) == 3 * 12


@pytest.mark.parametrize("num_dials,max_digit", [(1, 1), (2, 4), (3, 3)])
def test_expert_opens_every_lock_by_the_only_shortest_moves(num_dials, max_digit):
    for seed in range(100):
        env = DialLockEnv(num_dials=num_dials, max_digit=max_digit)
        obs, _ = env.reset(seed)
        steps = 0
        while not env.opened:
            _, _, code, current = dial_state(obs)
            expert = env.expert_action()
            assert expert == ("+" if current < code else "-")  # towards the code digit
            # the other turn is never closer, so the expert's move is the only shortest one
            other = DialLockEnv(num_dials=num_dials, max_digit=max_digit)
            other_obs, _ = other.reset(seed)
            for _ in range(steps):
                other_obs = other.step(other.expert_action())[0]
            assert other.step({"+": "-", "-": "+"}[expert])[1] == -1.0
            obs, reward, terminated, truncated, info = env.step(expert)
            steps += 1
            assert not truncated and reward in (0.0, 1.0)
        assert info["won"] and terminated and env.expert_action() is None
        assert steps <= num_dials * max_digit


def test_manager_groups_admissible_actions_and_expert_rollout():
    cfg = {"env": {"env_name": "dial_lock", "max_steps": 9, "history_length": 0, "rollout": {"n": 3},
                   "dial_lock": {"num_dials": 3, "max_digit": 3}},
           "data": {"train_batch_size": 4, "val_batch_size": 2}}
    train, val = make_envs(cfg)
    try:
        observations, infos = train.reset([11, 12, 13, 14])
        anchors = observations.anchor
        for task in range(4):
            assert len(set(anchors[3 * task:3 * task + 3])) == 1  # the copies of a task start identically
        assert all(info["admissible_actions"] == ["+", "-"] for info in infos)
        assert all(list(a) == ["+", "-"] for a in observations.admissible)
        assert "exactly one of '+', '-'" in observations.text[0] and anchors[0] in observations.text[0]
        _, _, _, step_infos = train.step(["<action>+</action>", "<action>up</action>", "no tags"] * 4)
        assert [i["is_action_valid"] for i in step_infos[:3]] == [True, False, False]

        batch = TrajectoryCollector().collect(val, ExpertGenerator(val), SamplingParams())
        assert batch.metrics["success_rate"] == 1.0 and batch.metrics["valid_action_ratio"] == 1.0
        for traj in batch.trajectories:  # the expert needs exactly the sum of the dials' starting distances
            states = [dial_state(s.anchor_obs) for s in traj.steps]
            first = {active: abs(code - current) for active, _, code, current in reversed(states)}
            assert sorted(first) == [1, 2, 3] and traj.length == sum(first.values()) <= 9
        assert {t.uid.split("-seed")[1] for t in batch.trajectories} == {"1000000", "1000001"}  # held-out seeds
    finally:
        train.close()
        val.close()


def test_config_section_is_checked_and_sets_the_standard_limit():
    config = env_config_from_mapping({"env_name": "dial_lock", "dial_lock": {"num_dials": 3, "max_digit": 3}})
    config.validate(known_env_names())
    assert get_env_manager_class("dial_lock").resolve_max_steps(config) == 2 * 3 * 3
    with pytest.raises(ConfigError, match=r"env\.dial_lock\.num_dials=0"):
        env_config_from_mapping({"dial_lock": {"num_dials": 0}})
    with pytest.raises(ConfigError, match=r"env\.dial_lock\.max_digit=10"):
        env_config_from_mapping({"dial_lock": {"max_digit": 10}})
    with pytest.raises(ConfigError, match=r"env\.dial_lock\.dials"):
        env_config_from_mapping({"dial_lock": {"dials": 2}})
