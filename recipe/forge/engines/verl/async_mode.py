"""verl's asynchronous V1 trainer modes for SLEA-RL: what run_verl sets for them and what it refuses before Ray starts.

``trainer.v1.trainer_mode`` (verl's own key) is ``sync`` (the default), ``colocate_async`` or ``separate_async``;
recipe/forge/engines/verl/settings.py types it and trainer.py registers the forge trainer once per mode.

In both async modes the rows are trained after the policy that generated them has been updated (a partial
rollout resumed across a weight update, a group finished while the trainer trained on another): the mode is
off-policy, so verl's rollout correction runs there. :func:`apply_async_settings` turns on the rollout servers'
log-probs and, when the run asked for no correction at all, token-level truncated importance weights
(``algorithm.rollout_correction.rollout_is=token``, verl's threshold 2.0), printing each change; a run that sets
``rollout_is``, ``rollout_rs`` or ``bypass_mode`` itself keeps its own choice.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from agent_system.config_checks import ConfigError

CORRECTION = "algorithm.rollout_correction"
LOG_PROBS = "actor_rollout_ref.rollout.calculate_log_probs"
BACKEND = "actor_rollout_ref.rollout.checkpoint_engine.backend"
CPU_BACKEND = "object_store"  # recipe/forge/engines/verl/cpu/object_store_engine.py


def apply_async_settings(cfg: DictConfig, mode: str) -> list[str]:
    """Set the rollout correction of an async ``mode`` in ``cfg`` (in place; nothing for ``sync``); one line per
    value changed, for the start-up log."""
    if mode == "sync":
        return []
    changes = []
    why = f"{mode} trains on rollouts of older policies"
    with open_dict(cfg):
        if not OmegaConf.select(cfg, LOG_PROBS, default=False):
            changes.append(f"{LOG_PROBS}: false -> true ({why}: the rollout correction needs them)")
            OmegaConf.update(cfg, LOG_PROBS, True, merge=False)
        correction = OmegaConf.select(cfg, CORRECTION, default=None)
        chosen = correction is not None and any(
            correction.get(key) for key in ("rollout_is", "rollout_rs", "bypass_mode"))
        if not chosen:
            changes.append(f"{CORRECTION}.rollout_is: None -> 'token' ({why}: truncated importance weights)")
            OmegaConf.update(cfg, f"{CORRECTION}.rollout_is", "token", merge=False, force_add=True)
    return changes


def check_async_config(cfg: Any, mode: str, device: str, distill: bool) -> None:
    """What an async ``mode`` cannot run with, refused before Ray starts (each error names the key). ``cfg``: the
    composed config; ``device``: the resolved ``trainer.device``; ``distill``: self-distillation is on."""
    if mode != "separate_async":
        return
    section = f"trainer.v1.{mode}"
    sync_step = int(OmegaConf.select(cfg, f"{section}.parameter_sync_step"))
    batch = int(OmegaConf.select(cfg, "data.train_batch_size"))
    mini = int(OmegaConf.select(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size"))
    if batch != sync_step * mini:
        raise ConfigError(
            f"trainer.v1.trainer_mode=separate_async trains {section}.parameter_sync_step={sync_step} mini-batches "
            f"of actor_rollout_ref.actor.ppo_mini_batch_size={mini} tasks per iteration, so data.train_batch_size must "
            f"be their product {sync_step * mini}, got {batch}")
    for key in ("actor_rollout_ref.rollout.nnodes", "actor_rollout_ref.rollout.n_gpus_per_node"):
        if int(OmegaConf.select(cfg, key, default=0) or 0) <= 0:
            raise ConfigError(f"trainer.v1.trainer_mode=separate_async runs its rollout on devices of its own: set "
                              f"{key} to at least 1 (got {OmegaConf.select(cfg, key, default=None)!r})")
    if device != "cpu" and str(OmegaConf.select(cfg, BACKEND)) == "naive":
        raise ConfigError(f"trainer.v1.trainer_mode=separate_async syncs weights to its own rollout devices: "
                          f"{BACKEND}=naive only serves colocated servers; use nccl (or nixl, mooncake, ...)")
    bypass = bool(OmegaConf.select(cfg, f"{CORRECTION}.bypass_mode", default=False))
    if distill and sync_step > 1 and not bypass:
        raise ConfigError(
            f"algorithm.forge.use_distillation=true with separate_async and {section}.parameter_sync_step={sync_step}: "
            "verl computes the old log-probs of the later mini-batches with the weights of the sync's start, which the "
            "distillation rows added after them would not share; use parameter_sync_step=1, colocate_async, or "
            f"{CORRECTION}.bypass_mode=true")
