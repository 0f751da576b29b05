"""Training rows from a rollout: one row per environment step, with its tensors and group keys."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from agent_system.multi_turn_rollout.protocols import RolloutBatch, StepRecord
from recipe.forge.hf.sequences import PackedSequences, pack
from recipe.forge.hf.vision_inputs import ImagePrompts
from recipe.forge.step_samples import StepSamples, token_level_scores


@dataclass
class StepBatch:
    """All step samples of one iteration.

    Attributes:
        packed: model inputs, (n, P + R).
        old_log_probs: (n, R) rollout log-probs of the response tokens (0 on padding).
        token_level_rewards: (n, R): the sample's episode score (step_samples.token_level_scores).
        samples: the rows' step samples (uid, traj_uid, anchor_obs, cluster_id, ... each (n,)).
        records: the StepRecords in row order (messages for distillation, texts for logging).
        episode_samples: the step samples of every step of the rollout's episodes, (m,) with m >= n: a step whose
            generation was empty is no row but still a step of its episode (its reward and its transition count in
            the step values, step_samples.step_inputs).
        rows: (n,) int64, the rows' positions in ``episode_samples``.
    """

    packed: PackedSequences
    old_log_probs: torch.Tensor
    token_level_rewards: torch.Tensor
    samples: StepSamples
    records: list[StepRecord]
    episode_samples: StepSamples
    rows: np.ndarray

    @property
    def response_mask(self) -> torch.Tensor:
        return self.packed.response_mask

    @property
    def uid(self) -> np.ndarray:
        return self.samples.uid

    def __len__(self) -> int:
        return len(self.records)


def build_step_batch(rollout: RolloutBatch, pad_id: int, invalid_penalty_coef: float,
                     image_prompts: ImagePrompts | None = None) -> StepBatch:
    """Pack every step record of ``rollout`` that has a generated response into training tensors (GiGPO
    semantics: one row per step); scores by recipe/forge/step_samples.py. ``image_prompts``: a vision-language
    policy's encoder, which processes the images of each record's messages again for its row."""
    rows = np.array([i for i, s in enumerate(rollout.steps) if s.response_ids], dtype=np.int64)
    if not rows.size:
        raise ValueError("the rollout produced no step with a generated response; nothing to train on")
    episode_samples = StepSamples.from_records(rollout.steps,
                                               {t.traj_uid: t.episode_reward for t in rollout.trajectories},
                                               {t.traj_uid: t.success for t in rollout.trajectories})
    records = [rollout.steps[i] for i in rows]
    samples = episode_samples.take(rows)
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
        samples=samples,
        records=records,
        episode_samples=episode_samples,
        rows=rows,
    )
