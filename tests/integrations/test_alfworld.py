"""ALFWorld: the offline generator writes loadable, solvable games of all six task types in the official
layout; the loader reads official data; the engine's caches change nothing; the manager plays them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from agent_system.environments.env_package.alfworld import game_generator as gen
from agent_system.environments.env_package.alfworld.engine import AlfredTextGame
from agent_system.environments.env_package.alfworld.game_files import collect_official_games, generated_games, official_data_root, task_type_of
from agent_system.environments.env_package.alfworld.scenes import TASK_TYPES, split_scene_numbers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _games(root, split, n):
    return generated_games(root, split, n, workers=1, progress=False)


def _load(path):
    with open(path) as f:
        return json.load(f)


def test_pddl_name_follows_alfred_mangling():
    assert gen.pddl_name("Cabinet|+00.68|+00.50|-02.20") == "Cabinet_bar__plus_00_dot_68_bar__plus_00_dot_50_bar__minus_02_dot_20"
    assert gen.pddl_name("Sink|-01.90|+00.97|-01.50|SinkBasin").endswith("_bar_SinkBasin")


def test_one_game_per_task_type_in_the_official_layout(alfworld_games_dir):
    paths = _games(alfworld_games_dir, "train", 6)
    assert [task_type_of(p) for p in paths] == [TASK_TYPES[t] for t in list(TASK_TYPES)]
    for seed, path in enumerate(paths):
        folder = os.path.basename(os.path.dirname(os.path.dirname(path)))
        assert folder.startswith(list(TASK_TYPES)[seed] + "-")
        traj = _load(os.path.join(os.path.dirname(path), "traj_data.json"))
        assert traj["task_type"] == list(TASK_TYPES)[seed]
        assert traj["scene"]["scene_num"] in split_scene_numbers("train")


def test_problem_obeys_the_parser_rules(alfworld_games_dir):
    for path in _games(alfworld_games_dir, "train", 6):
        problem = _load(path)["pddl_problem"]
        assert ":metric" not in problem and "totalCost" not in problem and "total-cost" not in problem
        # :init follows the :objects block directly
        assert re.search(r"\(:objects.*?\n\s*\)\s*\n\s*\(:init", problem, re.DOTALL)
        # every object placed in a receptacle whose type may hold it has that canContain fact
        types_of = dict(re.findall(r"\(objectType (\S+) (\S+)\)", problem)) | dict(re.findall(r"\(receptacleType (\S+) (\S+)\)", problem))
        contain = set(re.findall(r"\(canContain (\S+) (\S+)\)", problem))
        goal = re.search(r"\(receptacleType \?r (\S+)\)", problem.split("(:goal")[1])
        goal_objects = re.search(r"\(objectType \?o1? (\S+)\)", problem.split("(:goal")[1]).group(1)
        if goal:
            assert (goal.group(1), goal_objects) in contain, "the goal receptacle type must be able to hold the target"
        for obj, rec in re.findall(r"\(inReceptacle (\S+) (\S+)\)", problem):
            if not types_of[obj].startswith(("DeskLamp", "FloorLamp")):
                assert (types_of[rec], types_of[obj]) in contain


def test_stored_walkthrough_wins_only_at_its_last_step(alfworld_games_dir):
    for path in _games(alfworld_games_dir, "train", 6):
        game = _load(path)
        engine = AlfredTextGame()
        state = engine.load_and_reset(path)
        assert not state["won"]
        for k, command in enumerate(game["walkthrough"]):
            assert command in state["admissible_commands"], command
            assert "help" not in state["admissible_commands"]
            state = engine.step(command)
            assert state["won"] == (k == len(game["walkthrough"]) - 1)


def test_generation_is_deterministic_and_splits_use_their_scenes(tmp_path):
    a = gen.sample_task("eval_out_of_distribution", 9)
    b = gen.sample_task("eval_out_of_distribution", 9)
    assert gen.problem_pddl(a) == gen.problem_pddl(b)
    assert a.scene.number in split_scene_numbers("eval_out_of_distribution")
    assert not set(split_scene_numbers("eval_out_of_distribution")) & set(split_scene_numbers("train"))
    assert gen.problem_pddl(gen.sample_task("train", 9)) != gen.problem_pddl(a)


def test_unsolvable_or_wrong_games_are_rejected():
    spec = gen.sample_task("train", 0)  # pick_and_place_simple
    game, _ = gen.build_game(spec)
    # a walkthrough that stops before the last command does not win: verification must refuse it
    with pytest.raises(gen.GameGenerationError):
        gen.verify_walkthrough(game, game["walkthrough"][:-1])
    # without canContain for the goal receptacle the put is impossible: the game is unsolvable
    broken = dict(game)
    target, parent = spec.object_target, spec.parent_target
    broken["pddl_problem"] = game["pddl_problem"].replace(f"(canContain {parent}Type {target}Type)", "")
    with pytest.raises(gen.GameGenerationError):
        gen.verify_walkthrough(broken, game["walkthrough"])


def test_official_layout_is_read_and_filtered(alfworld_games_dir, tmp_path, monkeypatch):
    source = _games(alfworld_games_dir, "train", 1)[0]
    base = tmp_path / "data" / "json_2.1.1" / "train"

    def place(folder, solvable=True):
        d = base / folder / "trial_T1"
        d.mkdir(parents=True)
        game = _load(source)
        game["solvable"] = solvable
        (d / "game.tw-pddl").write_text(json.dumps(game))
        (d / "traj_data.json").write_text("{}")
        return str(d / "game.tw-pddl")

    keep = place("pick_and_place_simple-Apple-None-Fridge-12")
    place("pick_and_place_with_movable_recep-Apple-Bowl-Fridge-12")
    place("pick_heat_then_place_in_recep-AppleSliced-None-Fridge-12")
    place("pick_cool_then_place_in_recep-Egg-None-Fridge-12", solvable=False)
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "data"))
    root = official_data_root("")
    assert root == str(tmp_path / "data")
    assert collect_official_games(root, "train") == [keep]
    with pytest.raises(FileNotFoundError, match="json_2.1.1"):
        official_data_root(str(tmp_path))


def test_engine_caches_do_not_change_the_game(alfworld_games_dir):
    """Transcript with the memoised parsers (this process) == plain TextWorld + ALFWorld demangler (a fresh one)."""
    path = _games(alfworld_games_dir, "train", 6)[3]
    walkthrough = _load(path)["walkthrough"]
    # (passed inside the script: importing alfworld rewrites sys.argv)
    script = (
        f"path, walkthrough = {path!r}, {walkthrough!r}\n"
        "import json, textworld\n"
        "from textworld.envs.pddl import PddlEnv\n"
        "from alfworld.agents.environment.alfred_tw_env import AlfredDemangler\n"
        "env = AlfredDemangler(shuffle=False)(PddlEnv(textworld.EnvInfos(won=True, admissible_commands=True)))\n"
        "env.load(json.load(open(path)))\n"
        "s = env.reset(); out = [[s['feedback'], sorted(s['admissible_commands'])]]\n"
        "for c in walkthrough:\n"
        "    s, _, _ = env.step(c); out.append([s['feedback'], sorted(s['admissible_commands'])])\n"
        "print(json.dumps(out))\n"
    )
    ref = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout)
    engine = AlfredTextGame()
    s = engine.load_and_reset(path)
    mine = [[s["feedback"], s["admissible_commands"]]]
    for c in walkthrough:
        s = engine.step(c)
        mine.append([s["feedback"], s["admissible_commands"]])
    assert mine == [[f, [c for c in cmds if c != "help"]] for f, cmds in ref]


def test_manager_plays_generated_games(alfworld_games_dir):
    from agent_system.environments.config import env_config_from_mapping
    from agent_system.environments.env_package.alfworld.manager import AlfworldEnvironmentManager

    cfg = env_config_from_mapping({"env_name": "alfworld/AlfredTWEnv", "max_steps": 50, "rollout": {"n": 2},
                                   "resources_per_worker": {"num_workers": 2},
                                   "alfworld": {"generated_games_dir": alfworld_games_dir, "num_generated_games": 6}})
    envs = AlfworldEnvironmentManager(cfg, num_tasks=3, split="train")
    try:
        obs, infos = envs.reset([0, 2, 3])
        start, hidden_start = list(obs.anchor), envs.hidden_state_of(range(6))
        assert obs.anchor[0] == obs.anchor[1] and obs.anchor[2] == obs.anchor[3]
        assert "Your task is to:" in obs.anchor[0] and "Welcome to TextWorld" not in obs.anchor[0]
        assert [i["task_type"] for i in infos] == ["pick", "pick", "clean", "clean", "heat", "heat"]
        # copy 1 of each task sends an invalid action first: nothing happens, flagged invalid, episode goes on
        first = envs.expert_actions(range(6))
        actions = [f"<action>{a}</action>" if k % 2 == 0 else "<action>dance wildly</action>" for k, a in enumerate(first)]
        obs, rewards, dones, infos = envs.step(actions)
        assert [i["is_action_valid"] for i in infos] == [True, False] * 3
        # "Nothing happens." is no state: the anchor stays the state's own observation, the prompt says it happened
        assert "Nothing happens." in obs.text[1] and obs.anchor[1] == start[1] and not dones.any()
        assert envs.next_anchors([0, 1]) == [obs.anchor[0], start[1]] and obs.anchor[0] != start[0]
        # walking and nothing happening moved no object: the hidden state is as it was
        assert envs.hidden_state_of([0, 1]) == [infos[0]["hidden_state"], hidden_start[1]] == hidden_start[:2]
        hidden_first_step = envs.hidden_state_of(range(6))
        while envs.active.any():
            acts = envs.expert_actions(range(6))
            envs.step([f"<action>{a}</action>" if a else "" for a in acts])
        outcome = envs.success_evaluator()
        assert outcome["success"].all()
        # every task moved its object (and cleaned or heated it): no hidden state is the start's
        assert all(a != b for a, b in zip(envs.hidden_state_of(range(6)), hidden_first_step))
        np.testing.assert_array_equal(envs.episode_reward, np.full(6, 10.0))
        assert set(outcome) == {"success", "success/pick", "success/clean", "success/heat"}
        assert envs.step_count[1] == envs.step_count[0] + 1
    finally:
        envs.close()


def test_nothing_happens_can_be_its_own_anchor_as_in_published_gigpo(alfworld_games_dir):
    from agent_system.environments.config import env_config_from_mapping
    from agent_system.environments.env_package.alfworld.manager import AlfworldEnvironmentManager

    cfg = env_config_from_mapping({"env_name": "alfworld/AlfredTWEnv", "max_steps": 5, "rollout": {"n": 1},
                                   "alfworld": {"generated_games_dir": alfworld_games_dir, "num_generated_games": 6,
                                                "nothing_happens_anchor": "text"}})
    envs = AlfworldEnvironmentManager(cfg, num_tasks=1, split="train")
    try:
        envs.reset([0])
        obs, _, _, infos = envs.step(["<action>dance wildly</action>"])
        assert obs.anchor == ["Nothing happens."] and envs.next_anchors([0]) == ["Nothing happens."]
    finally:
        envs.close()


def test_expert_replans_once_after_the_agent_strays(alfworld_games_dir):
    from agent_system.environments.env_package.alfworld.env import AlfworldEnv

    paths = _games(alfworld_games_dir, "train", 6)
    env = AlfworldEnv(paths)
    obs, info = env.reset(5)  # pick2
    stored = _load(paths[5])["walkthrough"]
    assert env.expert_action() == stored[0]
    detour = next(a for a in info["admissible_actions"] if a.startswith("go to") and a != stored[0])
    env.step(detour)
    total, done, steps = 0.0, False, 0
    while not done and steps < 40:
        action = env.expert_action()
        assert action is not None
        _, reward, done, _, info = env.step(action)
        total += reward
        steps += 1
    assert done and info["won"] and total == 10.0


def test_the_hidden_state_tells_what_the_agent_holds_where_the_observation_does_not(alfworld_games_dir):
    """A receptacle's observation reads the same before and after the agent picked the task's object up elsewhere;
    the hidden state (a digest of the game's facts) differs. A command that changes nothing ("Nothing happens.",
    "inventory") leaves it as it was."""
    from agent_system.environments.env_package.alfworld.env import AlfworldEnv

    paths = _games(alfworld_games_dir, "train", 6)
    env = AlfworldEnv(paths)
    _, info = env.reset(0)  # pick: the walkthrough goes to the object, takes it, goes to the target, puts it
    start = info["hidden_state"]
    assert env.step("dance wildly")[0] == "Nothing happens." and env.step("dance wildly")[4]["hidden_state"] == start
    assert env.step("inventory")[4]["hidden_state"] == start
    walkthrough = _load(paths[0])["walkthrough"]
    places = {a for a in walkthrough if a.startswith("go to")}
    elsewhere = next(a for a in info["admissible_actions"] if a.startswith("go to") and a not in places)
    before, _, _, _, info = env.step(elsewhere)
    empty_handed = info["hidden_state"]
    for action in walkthrough[:walkthrough.index(next(a for a in walkthrough if a.startswith("take"))) + 1]:
        env.step(action)
    after, _, _, _, info = env.step(elsewhere)
    assert after == before and info["hidden_state"] != empty_handed
