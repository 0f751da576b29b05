"""scripts/measure_benchmark.py: its interval and recurrence against hand-worked cases, its scripted figures on
the dial lock against the locks themselves, and the model path end to end with a tiny random model."""

from __future__ import annotations

import pytest

from agent_system.environments.env_package.dial_lock.env import DialLockEnv
from agent_system.multi_turn_rollout.protocols import StepRecord, TrajectoryRecord

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def script(load_script):
    return load_script("measure_benchmark.py")


def test_wilson_interval_matches_published_values(script):
    # Wilson score intervals, 95%: 0/10 -> [0, 0.2775]; 5/10 -> [0.2366, 0.7634]; 18/64 -> [0.1859, 0.4013]
    for (k, n), expected in {(0, 10): (0.0, 0.2775), (5, 10): (0.2366, 0.7634), (18, 64): (0.1859, 0.4013)}.items():
        assert script.wilson_interval(k, n) == pytest.approx(expected, abs=1e-4)


def trajectory(uid: str, copy: int, anchors: list[str]) -> TrajectoryRecord:
    steps = [StepRecord(uid=uid, traj_uid=f"{uid}-{copy}", step=i, anchor_obs=a, messages=[], plain_messages=[],
                        response_text="", action="", prompt_ids=[], response_ids=[], logprobs=[], reward=0.0,
                        is_action_valid=True, done=False) for i, a in enumerate(anchors)]
    return TrajectoryRecord(uid=uid, traj_uid=f"{uid}-{copy}", task="", task_type=None, steps=steps,
                            episode_reward=0.0, success=False, length=len(steps))


def test_recurrence_counts_states_of_earlier_tasks_only(script):
    trajectories = [trajectory("a", 0, ["x", "y", "x"]), trajectory("b", 0, ["y", "z"]), trajectory("b", 1, ["z"]),
                    trajectory("c", 0, ["z", "w"])]
    # a: nothing earlier (its own repeat of x does not count); b: y was seen in a, z is new to both of b's copies;
    # c: z was seen in b, w is new -> (1 + 1) recurring steps of 8
    assert script.recurrence_share(trajectories, tasks=3) == pytest.approx(2 / 8)
    assert script.recurrence_share(trajectories, tasks=2) == pytest.approx(1 / 6)
    assert script.recurrence_share(trajectories, tasks=1) == 0.0


def test_scripted_figures_on_the_dial_lock(script):
    tasks = 24
    result = script.measure("dial_lock_job", [], tasks=tasks, recurrence_tasks=16, model=False,
                            train_temperature=False, time_iteration=False, tiny=False)
    assert result["env"] == "dial_lock" and "base" not in result
    expert = result["expert"]
    assert expert["episodes"] == tasks and expert["success"] == 1.0 and expert["valid_action_ratio"] == 1.0
    # the locks of the held-out seeds, read directly: the expert turns each dial its distance, and a constant
    # action opens exactly the locks whose dials all turn that way
    locks = []
    for seed in range(1_000_000, 1_000_000 + tasks):
        env = DialLockEnv(num_dials=2, max_digit=4)
        env.reset(seed)
        locks.append(list(zip(env.code, env.digits)))
    distances = [sum(abs(c - d) for c, d in lock) for lock in locks]
    assert expert["episode_length_mean"] == pytest.approx(sum(distances) / tasks)
    ups = sum(all(c > d for c, d in lock) for lock in locks) / tasks
    downs = sum(all(c < d for c, d in lock) for lock in locks) / tasks
    assert result["constant"]["by_action"] == pytest.approx({"+": ups, "-": downs})
    assert result["constant"]["best_success"] == max(ups, downs)
    assert 0.0 < expert["recurrence"] < 1.0


def test_model_path_with_a_tiny_model(script):
    result = script.measure("dial_lock_job", ["env.max_steps=3"], tasks=2, recurrence_tasks=2, model=True,
                            train_temperature=True, time_iteration=True, tiny=True)
    for name, temperature in (("base", 0.4), ("base_train_temperature", 1.0)):
        run = result[name]
        assert run["episodes"] == 2 and run["temperature"] == temperature
        assert 2 <= run["steps"] <= 6 and run["seconds_per_step"] > 0 and run["prompt_tokens_per_step"] > 100
        low, high = run["success_ci95"]
        assert low <= run["success"] <= high
    iteration = result["iteration"]
    assert iteration["tasks_x_copies"] == [1, 4] and 4 <= iteration["step_samples"] <= 12
    assert iteration["wall_s"] >= iteration["timing_s/update_actor"] > 0
