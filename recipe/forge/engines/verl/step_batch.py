"""The episode metrics of a batch of the verl engine's step rows.

verl stores every element of an agent loop's ``list[AgentLoopOutput]`` as its own row and copies the LAST
element's ``reward_score`` onto every row of the episode, so the agent loop carries each step's data in
``extra_fields`` (written by row_codec.row_from_record). The step samples, token-level scores, step returns and
advantages made from them are the ones the embedded engine uses (recipe/forge/step_samples.py); the trainer only
places them in its padded batch (trainer.compute_batch_advantages).
"""

from __future__ import annotations

import numpy as np

from recipe.forge.step_samples import StepSamples


def episode_metrics(samples: StepSamples) -> dict[str, float]:
    """Success rate, return, length and valid-action ratio of the episodes in a batch (one value per episode),
    under the embedded engine's names (recipe/forge/runs/metric_names.py)."""
    _, first = np.unique(samples.traj_uid.astype(str), return_index=True)
    n_steps = np.bincount(np.unique(samples.traj_uid.astype(str), return_inverse=True)[1])
    return {
        "success_rate": float(samples.success[first].mean()),
        "episode_reward/mean": float(samples.episode_return[first].mean()),
        "episode_reward/std": float(samples.episode_return[first].std()),
        "episode_length/mean": float(n_steps.mean()),
        "valid_action_ratio": float(samples.is_action_valid.mean()),
        "num_trajectories": float(len(first)),
        "num_steps": float(len(samples.traj_uid)),
    }
