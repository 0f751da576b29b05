"""EnvironmentManagerBase and make_envs: groups, held-out validation seeds, reproducibility, prompts,
memory, anchors, the registry and outcome arrays."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from agent_system.testing.configs import env_config, run_config

from agent_system.config_checks import ConfigError
from agent_system.environments import make_envs
from agent_system.environments.env_package.sokoban.manager import SokobanEnvironmentManager
from agent_system.environments.registry import get_env_manager_class
from agent_system.testing.faulty_env import FaultyEnvironmentManager

ALL_BUILTIN = ["sokoban", "gym_cards/NumberLine-v0", "gym_cards/EZPoints-v0", "gym_cards/Points24-v0", "gym_cards/Blackjack-v0",
               "dial_lock"]


@pytest.mark.parametrize("env_name", ALL_BUILTIN)
def test_make_envs_sizes_and_identical_group_starts(env_name):
    train, val = make_envs(run_config(env_name, n=4, train_b=3, val_b=2))
    assert (train.num_envs, val.num_envs) == (12, 8)
    obs, infos = train.reset()
    anchors = np.array(obs.anchor, dtype=object).reshape(3, 4)
    assert (anchors == anchors[:, :1]).all()
    assert len(set(anchors[:, 0])) >= 2 or env_name == "gym_cards/NumberLine-v0"
    uids = np.array(train.uids).reshape(3, 4)
    assert (uids == uids[:, :1]).all() and len(set(uids[:, 0])) == 3
    assert len(set(train.traj_uids)) == 12
    assert train.active.all()


def test_make_envs_accepts_an_omegaconf_config_and_rejects_unknown_names():
    from omegaconf import OmegaConf

    train, _ = make_envs(OmegaConf.create(run_config("gym_cards/Blackjack-v0", n=2, train_b=2)))
    assert train.num_envs == 4
    with pytest.raises(ConfigError, match="choose one of") as err:
        make_envs(run_config("sokobann"))
    assert "sokoban" in str(err.value) and "gym_cards/Points24-v0" in str(err.value)
    with pytest.raises(ConfigError, match="known"):
        get_env_manager_class("nope")
    with pytest.raises(ValueError, match="train_batch_size"):
        make_envs({"env": {"env_name": "sokoban"}})


def test_validation_seeds_are_held_out_and_fixed():
    train, val = make_envs(run_config(n=2, train_b=64, val_b=8, val_seed_offset=1000))
    train_seeds = np.concatenate([train.next_task_seeds() for _ in range(50)])
    assert train_seeds.max() < 1000
    v1, v2 = val.next_task_seeds(), val.next_task_seeds()
    assert np.array_equal(v1, v2) and v1.min() >= 1000
    assert not set(train_seeds) & set(v1)


def test_task_seed_rule_names_bad_splits_and_needs_an_rng_to_draw():
    from agent_system.environments.base import task_seeds

    assert task_seeds("val", 3, 50).tolist() == [50, 51, 52]
    drawn = task_seeds("train", 200, 50, np.random.default_rng(0))
    assert drawn.dtype == np.int64 and drawn.min() >= 0 and drawn.max() < 50
    with pytest.raises(ValueError, match="needs an rng"):
        task_seeds("train", 3, 50)
    with pytest.raises(ValueError, match=r"split='test' is not one of \['train', 'val'\]"):
        task_seeds("test", 3, 50)


def play(manager, seeds, actions):
    obs, _ = manager.reset(seeds)
    trace = [tuple(obs.anchor)]
    for a in actions:
        obs, r, d, _ = manager.step([f"<action>{a}</action>"] * manager.num_envs)
        trace.append((tuple(obs.anchor), tuple(r), tuple(d)))
    return trace


def test_same_seed_reproduces_the_episode():
    moves = ["up", "left", "down", "right", "right", "up"]
    a = play(SokobanEnvironmentManager(env_config(n=2), num_tasks=2, split="train"), [5, 9], moves)
    b = play(SokobanEnvironmentManager(env_config(n=2), num_tasks=2, split="train"), [5, 9], moves)
    assert a == b
    c = play(SokobanEnvironmentManager(env_config(n=2), num_tasks=2, split="train"), [6, 9], moves)
    assert a != c


def test_step_validity_rewards_and_max_steps():
    m = SokobanEnvironmentManager(env_config(n=1, max_steps=3), num_tasks=2, split="train")
    m.reset([1, 2])
    _, rewards, dones, infos = m.step(["<think>t</think><action>up</action>", "just go up"])
    assert infos[0]["is_action_valid"] and not infos[1]["is_action_valid"]
    assert infos[1]["action"] == ""  # a malformed answer never moves the player
    assert rewards[1] == pytest.approx(-0.1)
    m.step(["<action>UP</action>", "<action>fly</action>"])
    assert m.last_info[0]["action"] == "up" and m.last_info[0]["is_action_valid"]
    assert not m.last_info[1]["is_action_valid"]  # well formed but not an admissible action
    _, _, dones, _ = m.step(["<action>up</action>"] * 2)
    assert dones.all() and not m.active.any() and (m.step_count == 3).all()
    with pytest.raises(ValueError, match="one per environment"):
        m.step(["<action>up</action>"])


def test_finished_environments_are_not_stepped_again():
    m = SokobanEnvironmentManager(env_config(n=1), num_tasks=2, split="train")
    m.reset([3, 4])
    while m.active[0]:
        m.step([f"<action>{m.expert_actions([0])[0]}</action>", "<action>left</action>"])
    assert m.won[0]
    frozen = (m.pool.envs[0].state, int(m.step_count[0]), float(m.episode_reward[0]), m.last_obs[0])
    obs, rewards, dones, _ = m.step(["<action>down</action>", "<action>left</action>"])
    assert (m.pool.envs[0].state, int(m.step_count[0]), float(m.episode_reward[0]), m.last_obs[0]) == frozen
    assert rewards[0] == 0.0 and dones[0] and obs.text[0] == ""  # no prompt for a finished environment
    m.step([None, "<action>left</action>"])  # inactive entries may be None


def test_prompt_history_and_anchor():
    m = SokobanEnvironmentManager(env_config(n=1, history_length=2), num_tasks=1, split="train")
    obs, _ = m.reset([7])
    first = obs.anchor[0]
    assert "Before this step" not in obs.text[0] and first in obs.text[0]
    for a in ["up", "left", "down"]:
        obs, _, _, _ = m.step([f"<think>secret reasoning</think><action>{a}</action>"])
    text, anchor = obs.text[0], obs.anchor[0]
    assert anchor == m.last_obs[0] and "Push" not in anchor and "Action" not in anchor  # raw observation only
    assert "[Step 2]" in text and "[Step 3]" in text and "[Step 1]" not in text  # last 2 steps only
    assert "Action: left" in text and "Action: down" in text and "secret reasoning" not in text
    none = SokobanEnvironmentManager(env_config(n=1, history_length=0), num_tasks=1, split="train")
    none.reset([7])
    obs, _, _, _ = none.step(["<action>up</action>"])
    assert "Before this step" not in obs.text[0]


def test_require_think_switch():
    m = SokobanEnvironmentManager(env_config(n=1, require_think=True), num_tasks=1, split="train")
    obs, _ = m.reset([1])
    assert "(required)" in obs.text[0]
    _, _, _, infos = m.step(["<action>up</action>"])
    assert not infos[0]["is_action_valid"]


def test_image_mode_observations():
    m = SokobanEnvironmentManager(env_config(n=2, sokoban={"mode": "rgb_array"}), num_tasks=1, split="train")
    obs, _ = m.reset([2])
    assert obs.image[0].shape == (96, 96, 3) and np.array_equal(obs.image[0], obs.image[1])
    assert "shown in the image" in obs.text[0]


def test_success_evaluator_per_task_type():
    cfg = env_config(n=2, resources_per_worker={"num_workers": 1, "step_timeout_s": 20.0})
    m = FaultyEnvironmentManager(cfg, num_tasks=2, split="train", env_name="testing/faulty")
    try:
        m.reset([2, 3])  # even, odd
        for _ in range(3):
            m.step(["<action>go</action>", "<action>go</action>", "<action>go</action>", "<action>x</action>"])
        out = m.success_evaluator()
        assert out["success"].tolist() == [True, True, True, True]
        assert out["success/even"][:2].tolist() == [1.0, 1.0] and np.isnan(out["success/even"][2:]).all()
        assert np.isnan(out["success/odd"][:2]).all()
    finally:
        m.close()


def test_make_envs_from_the_composed_run_config():
    import os

    from hydra import compose, initialize_config_dir

    config_dir = os.path.abspath(os.path.join(os.path.dirname(__file__), "../../recipe/forge/config"))
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose("forge_trainer", overrides=["data.train_batch_size=2", "data.val_batch_size=3", "env.rollout.n=2"])
    train, val = make_envs(cfg)
    assert (train.num_envs, val.num_envs) == (4, 6)
    assert val.next_task_seeds().tolist() == [cfg.env.val_seed_offset + k for k in range(3)]


_VALID = ("<action>hit</action>", "<think>low total</think><action> Stand </action>", "<action>HIT</action>")


@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=300), st.sampled_from(_VALID), st.sampled_from(["<action>fold</action>", "<action>hit"])), min_size=2, max_size=2))
def test_any_model_output_is_a_step_not_an_error(answers):
    m = _CARDS_MANAGER
    m.reset([1])
    _, _, _, infos = m.step(answers)
    for a, info in zip(answers, infos):
        assert info["is_action_valid"] == (a in _VALID)
        assert info["action"] in ("hit", "stand", "", "fold")
    assert m.step_count.tolist() == [1, 1]


_CARDS_MANAGER = get_env_manager_class("gym_cards/Blackjack-v0")(env_config("gym_cards/Blackjack-v0", n=2), num_tasks=1, split="train")
