"""Training rows from a rollout: one row per environment step, with its tensors and group keys."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from agent_system.multi_turn_rollout.protocols import RolloutBatch, StepRecord
from recipe.forge.hf.sequences import PackedSequences, pack
from recipe.forge.hf.vision_inputs import ImagePrompts
from recipe.forge.step_samples import StepSamples, step_returns, token_level_scores


@dataclass
class StepBatch:
    """All step samples of one iteration.

    Attributes:
        packed: model inputs, (n, P + R).
        old_log_probs: (n, R) rollout log-probs of the response tokens (0 on padding).
        token_level_rewards: (n, R): the sample's episode score (step_samples.token_level_scores).
        step_returns: (n,) discounted step returns with the invalid-action penalty applied (step_samples.step_returns).
        samples: the rows' step samples (uid, traj_uid, anchor_obs, cluster_id, ... each (n,)).
        records: the StepRecords in row order (messages for distillation, texts for logging).
    """

    packed: PackedSequences
    old_log_probs: torch.Tensor
    token_level_rewards: torch.Tensor
    step_returns: np.ndarray
    samples: StepSamples
    records: list[StepRecord]

    @property
    def response_mask(self) -> torch.Tensor:
        return self.packed.response_mask

    @property
    def uid(self) -> np.ndarray:
        return self.samples.uid

    def __len__(self) -> int:
        return len(self.records)


def build_step_batch(rollout: RolloutBatch, pad_id: int, gamma: float, invalid_penalty_coef: float,
                     image_prompts: ImagePrompts | None = None) -> StepBatch:
    """Pack every step record of ``rollout`` that has a generated response into training tensors (GiGPO
    semantics: one row per step); returns and scores by recipe/forge/step_samples.py. ``image_prompts``: a
    vision-language policy's encoder, which processes the images of each record's messages again for its row."""
    records = [s for s in rollout.steps if s.response_ids]
    if not records:
        raise ValueError("the rollout produced no step with a generated response; nothing to train on")
    samples = StepSamples.from_records(records, {t.traj_uid: t.episode_reward for t in rollout.trajectories},
                                       {t.traj_uid: t.success for t in rollout.trajectories})
    images = None if image_prompts is None else [image_prompts.images(r.messages, r.prompt_ids) for r in records]
    packed = pack([r.prompt_ids for r in records], [r.response_ids for r in records], pad_id, images=images)
    n, r_len = packed.responses.shape
    old = torch.zeros((n, r_len), dtype=torch.float32)
    flat_logp = torch.tensor([lp for r in records for lp in r.logprobs], dtype=torch.float32)
    old[packed.response_mask.bool()] = flat_logp
    return StepBatch(
        packed=packed,
        old_log_probs=old,
        token_level_rewards=token_level_scores(samples, packed.response_mask, invalid_penalty_coef),
        step_returns=step_returns(samples, gamma, invalid_penalty_coef),
        samples=samples,
        records=records,
    )
