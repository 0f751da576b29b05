"""Training rows from a rollout: one row per environment step, with its tensors and group keys."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from agent_system.multi_turn_rollout.protocols import RolloutBatch, StepRecord
from recipe.forge.core_forge import apply_invalid_action_penalty, compute_step_discounted_returns
from recipe.forge.engines.local.sequences import PackedSequences, pack


@dataclass
class StepBatch:
    """All step samples of one iteration.

    Attributes:
        packed: model inputs, (n, P + R).
        old_log_probs: (n, R) rollout log-probs of the response tokens (0 on padding).
        token_level_rewards: (n, R): the sample's episode score (trajectory return minus the step's
            invalid-action penalty) on its last response token, 0 elsewhere.
        step_returns: (n,) discounted step returns with the invalid-action penalty applied.
        uid, traj_uid, anchor_obs: (n,) object arrays; cluster_id: (n,) object array (None when no library).
        is_action_valid: (n,) bool.
        records: the StepRecords in row order (messages for distillation, texts for logging).
    """

    packed: PackedSequences
    old_log_probs: torch.Tensor
    token_level_rewards: torch.Tensor
    step_returns: np.ndarray
    uid: np.ndarray
    traj_uid: np.ndarray
    anchor_obs: np.ndarray
    cluster_id: np.ndarray
    is_action_valid: np.ndarray
    records: list[StepRecord]

    @property
    def response_mask(self) -> torch.Tensor:
        return self.packed.response_mask

    def __len__(self) -> int:
        return len(self.records)


def build_step_batch(rollout: RolloutBatch, pad_id: int, gamma: float, invalid_penalty_coef: float) -> StepBatch:
    """Pack every step record of ``rollout`` into training tensors (GiGPO semantics: one row per step)."""
    records = [s for s in rollout.steps if s.response_ids]
    if not records:
        raise ValueError("the rollout produced no step with a generated response; nothing to train on")
    traj_return = {t.traj_uid: t.episode_reward for t in rollout.trajectories}
    packed = pack([r.prompt_ids for r in records], [r.response_ids for r in records], pad_id)
    n, r_len = packed.responses.shape
    old = torch.zeros((n, r_len), dtype=torch.float32)
    lengths = torch.tensor([len(r.response_ids) for r in records])
    flat_logp = torch.tensor([lp for r in records for lp in r.logprobs], dtype=torch.float32)
    old[packed.response_mask.bool()] = flat_logp

    rewards = np.array([r.reward for r in records], dtype=np.float64)
    traj_uid = np.array([r.traj_uid for r in records], dtype=object)
    steps = np.array([r.step for r in records], dtype=np.int64)
    valid = np.array([r.is_action_valid for r in records], dtype=bool)
    discounted = compute_step_discounted_returns(rewards, traj_uid, steps, gamma)
    episode = np.array([traj_return[r.traj_uid] for r in records], dtype=np.float64)
    step_returns, episode_scores = apply_invalid_action_penalty(discounted, episode, valid, invalid_penalty_coef)

    token_rewards = torch.zeros((n, r_len), dtype=torch.float32)
    token_rewards[torch.arange(n), lengths - 1] = torch.as_tensor(episode_scores, dtype=torch.float32)
    return StepBatch(
        packed=packed,
        old_log_probs=old,
        token_level_rewards=token_rewards,
        step_returns=step_returns,
        uid=np.array([r.uid for r in records], dtype=object),
        traj_uid=traj_uid,
        anchor_obs=np.array([r.anchor_obs for r in records], dtype=object),
        cluster_id=np.array([r.cluster_id for r in records], dtype=object),
        is_action_valid=valid,
        records=records,
    )
