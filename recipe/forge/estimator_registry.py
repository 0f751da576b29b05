"""``forge`` and ``gigpo`` in verl's advantage-estimator registry.

verl's generic ``compute_advantage`` passes only token_level_rewards, response_mask, index (uid) and config; the
step data comes from SLEA-RL's trainers, either as keyword arguments (``step_rewards``: the penalised discounted
step returns, ``traj_index``, ``anchor_obs``, ``step_group_keys``: the observation clusters) or inside the
``non_tensor_batch`` it forwards (keys ``step_rewards``, ``traj_uid``, ``anchor_obs``, ``cluster_id``). Both
entries compute through :func:`recipe.forge.step_samples.step_advantage`, as the engines do.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from recipe.forge.step_samples import step_advantage

STEP_INPUTS = ("step_rewards", "traj_index", "anchor_obs", "step_group_keys")
_NON_TENSOR_NAMES = {"step_rewards": "step_rewards", "traj_index": "traj_uid", "anchor_obs": "anchor_obs",
                     "step_group_keys": "cluster_id"}


def _step_inputs(kwargs: dict, needed: Sequence[str], estimator: str) -> dict:
    found = {name: kwargs.get(name) for name in STEP_INPUTS}
    batch = kwargs.get("non_tensor_batch") or {}
    for name, key in _NON_TENSOR_NAMES.items():
        if found[name] is None and key in batch:
            found[name] = batch[key]
    missing = [name for name in needed if found[name] is None]
    if missing:
        raise ValueError(
            f"advantage estimator {estimator!r} needs per-step inputs {missing}: run it through SLEA-RL's "
            "trainers (trainer.engine=local or verl with the forge trainer), which pass the step data"
        )
    return found


def _section(config: Any, name: str) -> Any:
    section = config.get(name) if config is not None and hasattr(config, "get") else None
    if section is None:
        from recipe.forge.config_schema import ForgeConfig, GiGPOConfig

        section = {"forge": ForgeConfig, "gigpo": GiGPOConfig}[name]()
    return section


def forge_adv_estimator(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    """verl-registry entry for ``forge``: reads ``config.forge`` (a ForgeAlgoConfig) for its settings."""
    settings = _section(config, "forge")
    needed = ("step_rewards", "traj_index", "step_group_keys") if settings.use_step_rewards else ("traj_index",)
    step = _step_inputs(kwargs, needed, "forge")
    returns = step["step_rewards"] if step["step_rewards"] is not None else np.zeros(len(index))
    return step_advantage("forge", token_level_rewards, response_mask, returns, index, step["traj_index"],
                          settings=settings, cluster_id=step["step_group_keys"])


def gigpo_adv_estimator(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    """verl-registry entry for ``gigpo``: reads ``config.gigpo`` for its settings."""
    settings = _section(config, "gigpo")
    step = _step_inputs(kwargs, ("step_rewards", "traj_index", "anchor_obs"), "gigpo")
    return step_advantage("gigpo", token_level_rewards, response_mask, step["step_rewards"], index,
                          step["traj_index"], settings=settings, anchor_obs=step["anchor_obs"])


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
