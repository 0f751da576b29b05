"""The forge trainer's advantage step on a synthetic batch (no Ray): token-level scores, discounted step
returns with the invalid-action penalty, padding rows, and agreement with recipe/forge/core_forge.py; the
shared step-sample core (recipe/forge/step_samples.py) read from verl rows; the iteration's episode metrics."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from recipe.forge.config_schema import ForgeAlgoConfig, ForgeConfig
from recipe.forge.core_forge import compute_forge_advantage, compute_gigpo_advantage
from recipe.forge.engines.verl.row_codec import samples_from_rows
from recipe.forge.engines.verl.trainer import compute_batch_advantages
from recipe.forge.step_samples import step_returns

GAMMA = 0.5
COEF = 0.1


@pytest.fixture
def batch(make_row):
    def row(traj, step, reward, valid, ret, cluster, anchor, success=False):
        return {**make_row(traj, step, reward, ret, cluster, anchor, valid, success, library_version=3),
                "reward_extra_info": {"episode_return": ret}}

    # task u1: trajectory a (3 steps, rewards 0,-1,10, step 1 invalid), trajectory b (2 steps, 0,0)
    # task u2: trajectory c (1 step, reward 1); one verl padding row (copy of the first row's fields)
    rows = [
        row("u1-a", 0, 0.0, True, 9.0, 7, "start", True),
        row("u1-a", 2, 10.0, True, 9.0, 9, "end", True),  # out of order on purpose
        row("u1-a", 1, -1.0, False, 9.0, 8, "mid", True),
        row("u1-b", 0, 0.0, True, 0.0, 7, "start"),
        row("u1-b", 1, 0.0, True, 0.0, 8, "mid"),
        row("u2-c", 0, 1.0, True, 1.0, 7, "start"),
        row("u1-a", 0, 0.0, True, 9.0, 7, "start", True),  # padding
    ]
    uid = np.array(["u1", "u1", "u1", "u1", "u1", "u2", "pad"], dtype=object)
    lengths = [3, 2, 4, 1, 2, 3, 0]
    mask = torch.zeros(7, 5, dtype=torch.int64)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    real = np.array([True] * 6 + [False])
    # the paper's step part (discounted returns), whose figures are worked by hand below
    algo = ForgeAlgoConfig(gamma=GAMMA, invalid_action_penalty_coef=COEF, forge=ForgeConfig(step_value="return"))
    return rows, uid, mask, real, algo


def test_step_returns_by_hand(batch):
    rows, *_ = batch
    steps = samples_from_rows(rows[:6])
    # a: R0 = 0 + .5*(-1) + .25*10 = 2, R1 = -1 + 5 = 4 (-0.1 invalid), R2 = 10; b: 0, 0; c: 1
    np.testing.assert_allclose(step_returns(steps, GAMMA, COEF), [2.0, 10.0, 3.9, 0.0, 0.0, 1.0])


def test_token_scores_sit_on_the_last_response_token(batch):
    rows, uid, mask, real, algo = batch
    out = compute_batch_advantages("grpo", uid, mask, rows, real, algo)
    assert set(out) == {"rm_scores"}  # other estimators run verl's own step on these scores
    scores = out["rm_scores"]
    np.testing.assert_allclose(scores.sum(-1).numpy(), [9.0, 9.0, 8.9, 0.0, 0.0, 1.0, 0.0], atol=1e-6)
    assert scores[0, 2] == 9.0 and scores[2, 3] == pytest.approx(8.9) and scores[6].abs().sum() == 0


def test_forge_step_matches_compute_forge_advantage(batch):
    rows, uid, mask, real, algo = batch
    out = compute_batch_advantages("forge", uid, mask, rows, real, algo)
    scores = out["rm_scores"][:6]
    expected, _ = compute_forge_advantage(
        scores, np.array([2.0, 10.0, 3.9, 0.0, 0.0, 1.0]), mask[:6], uid[:6],
        [r["traj_uid"] for r in rows[:6]], [r["cluster_id"] for r in rows[:6]],
    )
    torch.testing.assert_close(out["advantages"][:6], expected.to(torch.float32))
    assert out["advantages"][6].abs().sum() == 0 and torch.equal(out["advantages"], out["returns"])
    # hand check of row 0: episode 9 - mean(9, 9, 8.9, 0, 0) = 3.62; step group (u1, 7) = {2.0, 0.0} -> +1
    assert float(out["advantages"][0, 0]) == pytest.approx(3.62 + 1.0, abs=1e-5)
    assert out["advantages"][0, 3:].abs().sum() == 0  # zero outside the response


def test_gigpo_step_groups_by_anchor(batch):
    rows, uid, mask, real, algo = batch
    out = compute_batch_advantages("gigpo", uid, mask, rows, real, algo)
    expected, _ = compute_gigpo_advantage(
        out["rm_scores"][:6], np.array([2.0, 10.0, 3.9, 0.0, 0.0, 1.0]), mask[:6],
        [r["anchor_obs"] for r in rows[:6]], uid[:6], [r["traj_uid"] for r in rows[:6]],
    )
    torch.testing.assert_close(out["advantages"][:6], expected.to(torch.float32))


def test_rows_without_step_fields_are_named(batch):
    rows, uid, mask, real, algo = batch
    broken = [dict(r) for r in rows]
    del broken[2]["traj_uid"]
    with pytest.raises(ValueError, match="forge_agent"):
        compute_batch_advantages("forge", uid, mask, broken, real, algo)
    no_cluster = [dict(r, cluster_id=None) for r in rows]
    with pytest.raises(ValueError, match="cluster id"):
        compute_batch_advantages("forge", uid, mask, no_cluster, real, algo)


def _episode_rows(traj: str, task_type: str | None, rewards: list[float], success: bool,
                  task_score: float | None = None, failure: str | None = None) -> list[dict]:
    """The rows the agent loop writes for one episode of task ``traj.split('-')[0]`` (row codec)."""
    from agent_system.multi_turn_rollout.protocols import StepRecord, TrajectoryRecord
    from recipe.forge.engines.verl.row_codec import StepExtras, row_from_record

    uid = traj.split("-")[0]
    info = {} if task_score is None else {"task_score": task_score}
    steps = [StepRecord(uid=uid, traj_uid=traj, step=k, anchor_obs="obs", messages=[], plain_messages=[],
                        response_text="", action="", prompt_ids=[], response_ids=[], logprobs=[], reward=r,
                        is_action_valid=k > 0, done=k == len(rewards) - 1, cluster_id=k, info=info)
             for k, r in enumerate(rewards)]
    episode = TrajectoryRecord(uid=uid, traj_uid=traj, task="", task_type=task_type, steps=steps,
                               episode_reward=sum(rewards), success=success, length=len(rewards),
                               failure_reason=failure)
    return [row_from_record(step, episode, StepExtras(agent_worker="w:1")) for step in steps]


def test_iteration_metrics_are_the_embedded_engines_episode_metrics():
    """The verl engine's training episode metrics, worked by hand for three episodes (ALFWorld-style task types,
    a graded task score, one episode ended by a worker fault): per task type, task score and failures included."""
    from recipe.forge.engines.verl.forge_steps import iteration_metrics

    rows = (_episode_rows("t1-a", "pick", [0.0, 1.0], True, task_score=1.0)
            + _episode_rows("t1-b", "pick", [0.0, 0.0, 0.0], False, task_score=0.5)
            + _episode_rows("t2-a", "clean", [0.0], False, failure="worker_died: pid 7"))
    m = iteration_metrics(rows)
    assert m["num_trajectories"] == 3 and m["num_steps"] == 6
    assert m["success_rate"] == pytest.approx(1 / 3)
    assert m["success_rate/pick"] == pytest.approx(0.5) and m["success_rate/clean"] == 0.0
    assert m["episode_reward/mean"] == pytest.approx(1 / 3)
    assert m["episode_reward/std"] == pytest.approx(np.std([1.0, 0.0, 0.0]))
    assert m["episode_length/mean"] == pytest.approx(2.0) and m["episode_length/max"] == 3.0
    assert m["valid_action_ratio"] == pytest.approx(3 / 6)  # every episode's first step is invalid here
    assert m["task_score/mean"] == pytest.approx((1.0 + 0.5 + 0.0) / 3)  # an episode without a score counts 0
    assert m["failures/total"] == 1.0 and m["failures/worker_died"] == 1.0
    assert m["prompt/trimmed_steps"] == 0.0