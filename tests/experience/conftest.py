"""Builders of step and trajectory records for the experience-library tests."""

from __future__ import annotations

import pytest

from agent_system.multi_turn_rollout.protocols import StepRecord, TrajectoryRecord
from recipe.forge.config_schema import ForgeConfig


def make_traj(uid, traj_uid, task, steps, reward, task_type="pick_and_place", clusters=None, valid=None,
              failure_reason=None, admissible=(), experts=None, end=None):
    """steps: list of (anchor_obs, action); the last step gets the whole reward; ``admissible``: the actions
    every state lists; ``experts``: the expert action of every step (default: none). Each step led to the next
    step's observation; the last one to ``end`` (default None: the environment ended the episode there)."""
    records = []
    following = [obs for obs, _ in steps[1:]] + [end]
    for i, (obs, action) in enumerate(steps):
        records.append(StepRecord(
            uid=uid, traj_uid=traj_uid, step=i, anchor_obs=obs, messages=[], plain_messages=[],
            response_text=f"<think>.</think><action>{action}</action>", action=action, prompt_ids=[],
            response_ids=[], logprobs=[], reward=reward if i == len(steps) - 1 else 0.0,
            is_action_valid=True if valid is None else valid[i], done=i == len(steps) - 1,
            cluster_id=None if clusters is None else clusters[i], admissible_actions=tuple(admissible),
            expert_action=None if experts is None else experts[i], next_anchor_obs=following[i]))
    return TrajectoryRecord(uid=uid, traj_uid=traj_uid, task=task, task_type=task_type, steps=records,
                            episode_reward=reward, success=reward > 0.5, length=len(records),
                            failure_reason=failure_reason)


@pytest.fixture
def traj():
    return make_traj


@pytest.fixture
def cfg():
    def build(**overrides):
        base = dict(warmup_iterations=0, min_library_size=0, library_save_freq=1000, checkpoint_dir="unused")
        base.update(overrides)
        return ForgeConfig(**base)
    return build


def run_iteration(system, iteration, seed, n_tasks=3, group=2, horizon=4):
    """One simulated iteration: ALFWorld-like episodes query the provider at every step, then evolve.

    Returns (the provider's outputs in order, the evolve metrics). Fully determined by ``seed``.
    """
    import random

    from agent_system.multi_turn_rollout.protocols import StepQuery
    from recipe.forge.experience import synthetic

    rng = random.Random(seed)
    system.begin_iteration(iteration)
    outputs, trajectories = [], []
    for task_i in range(n_tasks):
        task_type, task = synthetic.alfworld_task(rng)
        places = [synthetic.alfworld_observation(rng) for _ in range(horizon)]
        for g in range(group):
            uid, traj_uid = f"{iteration}-{task_i}", f"{iteration}-{task_i}-{g}"
            steps = []
            for step, obs in enumerate(places[: rng.randint(1, horizon)]):
                exp = system.provider.provide([StepQuery(obs, task, task_type, uid, traj_uid, step)])[0]
                outputs.append(exp)
                steps.append((obs, rng.choice(["go to drawer 1", "take mug 1 from desk 1", "look", "open fridge 1"]),
                              exp))
            reward = rng.choice([0.0, 10.0])
            t = make_traj(uid, traj_uid, task, [(o, a) for o, a, _ in steps], reward, task_type=task_type,
                          clusters=[e.cluster_id for _, _, e in steps])
            for record, (_, _, e) in zip(t.steps, steps):
                record.experience_ids = e.entry_ids
            trajectories.append(t)
    return outputs, system.evolve(trajectories, iteration)


@pytest.fixture
def iterate():
    return run_iteration


@pytest.fixture(scope="module")
def chromium() -> str:
    """The headless Chromium of agent_system/testing/browser.py; the test is skipped where none is installed."""
    from agent_system.testing.browser import SKIP_REASON, find_chromium

    return find_chromium() or pytest.skip(SKIP_REASON)
