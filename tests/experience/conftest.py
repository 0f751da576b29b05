"""Builders of step and trajectory records for the experience-library tests."""

from __future__ import annotations

import pytest

from agent_system.multi_turn_rollout.protocols import StepRecord, TrajectoryRecord
from recipe.forge.config_schema import ForgeConfig


def make_traj(uid, traj_uid, task, steps, reward, task_type="pick_and_place", clusters=None, valid=None,
              failure_reason=None):
    """steps: list of (anchor_obs, action); the last step gets the whole reward."""
    records = []
    for i, (obs, action) in enumerate(steps):
        records.append(StepRecord(
            uid=uid, traj_uid=traj_uid, step=i, anchor_obs=obs, messages=[], plain_messages=[],
            response_text=f"<think>.</think><action>{action}</action>", action=action, prompt_ids=[],
            response_ids=[], logprobs=[], reward=reward if i == len(steps) - 1 else 0.0,
            is_action_valid=True if valid is None else valid[i], done=i == len(steps) - 1,
            cluster_id=None if clusters is None else clusters[i]))
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
