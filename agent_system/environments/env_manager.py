"""``make_envs(config) -> (train_envs, val_envs)``: the entry point both engines call."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from agent_system.environments.base import EnvironmentManagerBase
from agent_system.environments.config import EnvConfig, env_config_from_mapping
from agent_system.environments.registry import get_env_manager_class, known_env_names


def _section(config: Any, key: str) -> Any:
    if isinstance(config, Mapping):
        return config.get(key)
    return getattr(config, key, None)


def env_config_of(config: Any) -> EnvConfig:
    """The validated EnvConfig of a full run config (DictConfig or mapping with an ``env`` section, or an object
    whose ``env`` is an EnvConfig, such as a typed RunConfig), or of an EnvConfig itself."""
    section = config if isinstance(config, EnvConfig) else _section(config, "env")
    if isinstance(section, EnvConfig):
        env = section
    else:
        try:
            from omegaconf import DictConfig, OmegaConf

            if isinstance(section, DictConfig):
                section = OmegaConf.to_container(section, resolve=True)
        except ImportError:
            pass
        env = env_config_from_mapping(section)
    env.validate(known_env_names())
    return env


def make_envs(config: Any, val_copies: int | None = None) -> tuple[EnvironmentManagerBase, EnvironmentManagerBase]:
    """Build the training manager (data.train_batch_size tasks x env.rollout.n copies, training seeds) and
    the validation manager (data.val_batch_size tasks x ``val_copies`` copies, env.rollout.n when None, held-out
    seeds from env.val_seed_offset on)."""
    env = env_config_of(config)
    val_env = env if val_copies is None else dataclasses.replace(env, rollout=dataclasses.replace(env.rollout, n=val_copies))
    data = _section(config, "data")
    train_b = _section(data, "train_batch_size") if data is not None else None
    val_b = _section(data, "val_batch_size") if data is not None else None
    if train_b is None or val_b is None:
        raise ValueError("make_envs needs data.train_batch_size and data.val_batch_size in the run config")
    manager_class = get_env_manager_class(env.env_name)
    train = manager_class(env, num_tasks=int(train_b), split="train")
    val = manager_class(val_env, num_tasks=int(val_b), split="val")
    return train, val
