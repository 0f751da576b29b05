"""Small configs for tests and scripts: an EnvConfig or a full run-config mapping with a few overrides."""

from __future__ import annotations

from agent_system.environments.config import EnvConfig, env_config_from_mapping


def env_config(env_name: str = "sokoban", n: int = 4, **overrides) -> EnvConfig:
    """EnvConfig for ``env_name`` with G = ``n`` and any other env.* keys as nested mappings."""
    return env_config_from_mapping({"env_name": env_name, "rollout": {"n": n}, **overrides})


def run_config(env_name: str = "sokoban", n: int = 4, train_b: int = 4, val_b: int = 2, **env_overrides) -> dict:
    """A run-config mapping with the ``env`` and ``data`` sections make_envs reads."""
    return {"env": {"env_name": env_name, "rollout": {"n": n}, **env_overrides}, "data": {"train_batch_size": train_b, "val_batch_size": val_b}}
