"""TextWorld generated games (tw-make, cached) and AppWorld through its bridge process (against the bundled
stand-in apps: AppWorld's data cannot be downloaded here)."""

from __future__ import annotations

import os
import time

import pytest

from agent_system.environments.env_package.appworld.env import AppworldEnv, BridgeError, strip_fence
from agent_system.environments.env_package.textworld.env import TextworldEnv, clean_feedback
from agent_system.environments.env_package.textworld.games import ensure_games, tw_make_command

pytestmark = pytest.mark.timeout(300)


def test_clean_feedback_drops_banner_prompt_and_status():
    raw = "$$$$ banner $$$\n\nGoal: get the coin.\n\n-= Room =-\nA coin.\n\n\n>  -= Room =-0/1\n"
    assert clean_feedback(raw, "Goal: get the coin.") == "Goal: get the coin.\n\n-= Room =-\nA coin."


def test_tw_make_command_settings():
    cmd = tw_make_command("tw-cooking", 2, 7, "val", "/tmp/g.z8")
    assert cmd[1] == "tw-cooking" and "--open" in cmd and cmd[cmd.index("--split") + 1] == "valid"
    assert "--level" not in cmd and cmd[cmd.index("--recipe") + 1] == "2"
    assert tw_make_command("tw-treasure_hunter", 3, 0, "train", "/tmp/g.z8")[-2:] == ["--level", "3"]
    with pytest.raises(ValueError, match="tw-cooking level 9"):
        tw_make_command("tw-cooking", 9, 0, "train", "/tmp/g.z8")
    with pytest.raises(ValueError, match="unknown TextWorld challenge"):
        tw_make_command("tw-zork", 1, 0, "train", "/tmp/g.z8")


@pytest.mark.slow
def test_generated_games_are_cached_and_won_by_the_walkthrough(tmp_path):
    paths = ensure_games(str(tmp_path), "tw-coin_collector", 2, "train", 2, progress=False)
    stamps = [os.path.getmtime(p) for p in paths]
    assert ensure_games(str(tmp_path), "tw-coin_collector", 2, "train", 2, progress=False) == paths
    assert [os.path.getmtime(p) for p in paths] == stamps  # cached: not made again
    val = ensure_games(str(tmp_path), "tw-coin_collector", 2, "val", 1, progress=False)
    assert not set(val) & set(paths)
    env = TextworldEnv(paths, challenge="tw-coin_collector")
    obs, info = env.reset(1)
    assert info["task"] and obs.startswith(info["task"][:20]) and "$$" not in obs
    obs, reward, done, _, info = env.step("dance wildly")
    assert (reward, done) == (0, False) and env.expert_action() is None  # strayed from the walkthrough
    obs, info = env.reset(1)
    total, done, steps = 0.0, False, 0
    while not done:
        action = env.expert_action()
        assert action is not None and action in info["admissible_actions"], (action, info["admissible_actions"])
        obs, reward, done, _, info = env.step(action)
        total += reward
        steps += 1
    assert info["won"] and total == 1.0 and steps >= 1
    env.close()


def test_appworld_bridge_with_the_standin():
    env = AppworldEnv(dataset="train", use_standin=True)
    try:
        obs, info = env.reset(0)
        assert "How many songs" in obs and info["task_id"] == "music_count"
        out, reward, done, _, _ = env.step("```python\nprint(len(apis.music.list_songs()))\n```")
        assert out.strip().isdigit() and not done
        out, reward, done, _, info = env.step("apis.nope.call()")
        assert "Execution failed" in out and not done
        out, reward, done, _, info = env.step("apis.supervisor.complete_task(answer=-1)")
        assert done and reward == 0.0 and info["task_score"] == 0.5 and not info["won"]
        env.reset(4)  # index wraps around the dataset's task ids
        solution = env.expert_action()
        assert solution is not None and env.expert_action() is None  # offered once per episode
        _, reward, done, _, info = env.step(solution)
        assert done and reward == 10.0 and info["won"]
    finally:
        env.close()


def test_appworld_code_that_never_ends_is_killed_with_what_it_started(tmp_path):
    """Issue 14: model-written code ran in the bridge with no time limit; now a request past timeout_s kills the
    bridge's whole process group, the episode fails, and the next reset starts a fresh bridge."""
    from agent_system.workers.in_process import run_step

    env = AppworldEnv(dataset="train", use_standin=True, timeout_s=2.0)
    try:
        env.reset(0)
        started = time.monotonic()
        result = run_step(env, "while True:\n    pass")
        assert time.monotonic() - started < 10
        assert result.terminated and "ran longer than timeout_s=2 s" in result.info["failure_reason"]
        obs, _ = env.reset(1)  # a fresh bridge
        assert "Task:" in obs
    finally:
        env.close()


def test_appworld_code_sees_a_reduced_environment_and_no_import(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-of-the-trainer")
    env = AppworldEnv(dataset="train", use_standin=True)
    try:
        env.reset(0)
        out, *_ = env.step("import os\nprint(os.environ)")
        assert "Execution failed" in out and "__import__" in out
        out, *_ = env.step("print(open('/etc/hostname').read())")
        assert "Execution failed" in out and "open" in out
    finally:
        env.close()
    from agent_system.environments.env_package.appworld.env import bridge_environment

    reduced = bridge_environment(use_standin=True)
    assert "OPENAI_API_KEY" not in reduced and set(reduced) <= {
        "PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "SYSTEMROOT", "PYTHONPATH",
        "PYTHONDONTWRITEBYTECODE"} | {k for k in reduced if k.startswith("APPWORLD")}


def test_appworld_bridge_failure_is_reported():
    import importlib.util

    if importlib.util.find_spec("appworld") is None:  # no appworld package: the bridge exits and says why
        env = AppworldEnv(dataset="train", use_standin=False)
        with pytest.raises(BridgeError, match="appworld"):
            env.reset(0)
        env.close()
    env = AppworldEnv(dataset="no_such_split", use_standin=True)
    with pytest.raises(BridgeError, match="unknown dataset"):
        env.reset(0)
    env.close()


def test_strip_fence():
    assert strip_fence("```python\nx = 1\n```") == "x = 1"
    assert strip_fence("x = 1") == "x = 1"


def test_appworld_manager_in_worker_processes():
    from agent_system.environments.config import env_config_from_mapping
    from agent_system.environments.env_package.appworld.manager import AppworldEnvironmentManager

    cfg = env_config_from_mapping({"env_name": "appworld", "max_steps": 3, "rollout": {"n": 2}, "appworld": {"use_standin": True}})
    envs = AppworldEnvironmentManager(cfg, num_tasks=2, split="val")
    try:
        obs, infos = envs.reset([0, 1])
        assert [i["task_id"] for i in infos] == ["music_count_dev", "music_count_dev", "wallet_total_dev", "wallet_total_dev"]
        _, _, _, infos = envs.step(["<action>print(1)</action>", "<action> </action>", "no tags", "<action>print(2)</action>"])
        assert [i["is_action_valid"] for i in infos] == [True, False, False, True]
        while envs.active.any():
            envs.step([f"<action>{a}</action>" if a else "<action>print(0)</action>" for a in envs.expert_actions(range(4))])
        assert envs.success_evaluator()["success"].all()
    finally:
        envs.close()


def test_textworld_level_is_validated_per_challenge():
    from agent_system.config_checks import ConfigError
    from agent_system.environments.config import env_config_from_mapping
    from agent_system.environments.registry import known_env_names

    with pytest.raises(ConfigError, match="env.textworld.level=5"):
        env_config_from_mapping({"textworld": {"challenge": "tw-cooking", "level": 5}}).validate(known_env_names())
    env_config_from_mapping({"textworld": {"challenge": "tw-treasure_hunter", "level": 30}}).validate(known_env_names())
