"""Advantages for a StepBatch with any estimator: forge and gigpo through the step-sample core
(recipe/forge/step_samples.py, shared with the verl engine), GAE with the critic's values, and every other estimator of verl's registry called by name, as verl's trainer calls it."""

from __future__ import annotations

import torch

from recipe.forge.config_schema import ForgeAlgoConfig
from recipe.forge.engines.local.batch import StepBatch
from recipe.forge.engines.local.settings import check_estimator
from recipe.forge.step_samples import STEP_ESTIMATORS, samples_advantage, step_inputs

NEEDS_SUM_PI_SQUARED = ("optimal_token_baseline", "tir_optimal_token_baseline")


def compute_advantages(
    batch: StepBatch,
    algorithm: ForgeAlgoConfig,
    values: torch.Tensor | None = None,
    sum_pi_squared: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns, both (n, R), zero outside the response mask.

    Args:
        batch: the iteration's step samples.
        algorithm: the typed algorithm section (estimator name and its settings).
        values: (n, R) critic values, required by ``gae``.
        sum_pi_squared: (n, R) sum over the vocabulary of p^2, required by the optimal-token-baseline estimators.
    """
    from verl.trainer.ppo import core_algos

    name = algorithm.adv_estimator
    check_estimator(name)
    rewards, mask = batch.token_level_rewards, batch.response_mask
    if name in STEP_ESTIMATORS:
        inputs = step_inputs(batch.episode_samples, name, algorithm).take(batch.rows)
        return samples_advantage(name, rewards, mask, batch.samples, inputs, algorithm)
    if name == "gae":
        if values is None:
            raise ValueError("adv_estimator 'gae' needs critic values (critic.enable=true)")
        advantages, returns = core_algos.compute_gae_advantage_return(rewards, values, mask, gamma=algorithm.gamma,
                                                                      lam=algorithm.lam)
        return advantages * mask, returns * mask
    if name == "grpo":
        return core_algos.compute_grpo_outcome_advantage(
            rewards, mask, index=batch.uid, norm_adv_by_std_in_grpo=algorithm.norm_adv_by_std_in_grpo)
    kwargs = {"token_level_rewards": rewards, "response_mask": mask, "config": algorithm, "index": batch.uid}
    if name in NEEDS_SUM_PI_SQUARED:
        if sum_pi_squared is None:
            raise ValueError(f"adv_estimator {name!r} needs sum_pi_squared from the policy")
        kwargs.update(sum_pi_squared=sum_pi_squared, old_log_probs=batch.old_log_probs, rollout_is_weights=None)
    advantages, returns = core_algos.get_adv_estimator_fn(name)(**kwargs)
    return advantages * mask, returns * mask
