"""``forge`` and ``gigpo`` in verl's advantage-estimator registry.

verl's generic ``compute_advantage`` passes only token_level_rewards, response_mask, index (uid) and config. The
step-level estimators need the batch's steps: a :class:`recipe.forge.step_samples.StepSamples` as the keyword
``step_samples``, or the non-tensor batch verl forwards holding one column per StepSamples field but ``uid`` (verl's
``index`` is the task group; the hidden-state columns may be left out), as SLEA-RL's trainers build them. Both
entries then compute exactly as the engines do: :func:`recipe.forge.step_samples.step_inputs` (states, step groups
and step values by the estimator's section, every rule included) and
:func:`recipe.forge.step_samples.step_advantage`.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import numpy as np

from recipe.forge.step_samples import StepSamples, samples_advantage, step_inputs

SAMPLE_COLUMNS = tuple(f.name for f in fields(StepSamples) if f.name != "uid")
OPTIONAL_COLUMNS = ("hidden_state", "next_hidden_state")  # absent: "" (the environment reports no hidden state)


def _samples(kwargs: dict, index: Any, estimator: str) -> StepSamples:
    samples = kwargs.get("step_samples")
    if samples is None:
        batch = kwargs.get("non_tensor_batch") or {}
        missing = [name for name in SAMPLE_COLUMNS if name not in batch and name not in OPTIONAL_COLUMNS]
        if missing:
            raise ValueError(
                f"advantage estimator {estimator!r} needs the batch's steps (step_samples=StepSamples, or the "
                f"non-tensor columns {list(SAMPLE_COLUMNS)}; missing {missing}): run it through SLEA-RL's trainers "
                "(trainer.engine=local or verl with the forge trainer), which pass them"
            )
        samples = StepSamples(uid=np.asarray(index, dtype=object),
                              **{name: np.asarray(batch[name]) for name in SAMPLE_COLUMNS if name in batch})
    if index is not None:
        samples = replace(samples, uid=np.asarray(index, dtype=object))  # verl's task groups
    return samples


def _settings(config: Any) -> Any:
    if config is not None and hasattr(config, "get") and config.get("forge") is not None:
        return config
    from recipe.forge.config_schema import ForgeAlgoConfig

    return ForgeAlgoConfig()


def _advantage(estimator: str, token_level_rewards, response_mask, index, config, kwargs):
    algorithm = _settings(config)
    samples = _samples(kwargs, index, estimator)
    return samples_advantage(estimator, token_level_rewards, response_mask, samples,
                             step_inputs(samples, estimator, algorithm), algorithm)


def forge_adv_estimator(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    """verl-registry entry for ``forge``: ``config`` is the typed algorithm section (its ``forge``, ``gamma`` and
    ``invalid_action_penalty_coef``; defaults without one)."""
    return _advantage("forge", token_level_rewards, response_mask, index, config, kwargs)


def gigpo_adv_estimator(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    """verl-registry entry for ``gigpo``: ``config`` as for ``forge``, its ``gigpo`` section."""
    return _advantage("gigpo", token_level_rewards, response_mask, index, config, kwargs)


def register_with_verl() -> None:
    """Register ``forge`` and ``gigpo`` in verl's advantage-estimator registry (idempotent)."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    for name, fn in (("forge", forge_adv_estimator), ("gigpo", gigpo_adv_estimator)):
        ADV_ESTIMATOR_REGISTRY.setdefault(name, fn)


def known_adv_estimators() -> list[str]:
    """verl's registry (with our plugin's entries) plus the estimators verl's trainer handles inline."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, AdvantageEstimator

    register_with_verl()
    return sorted(set(ADV_ESTIMATOR_REGISTRY) | {e.value for e in AdvantageEstimator})
