"""Environments: the gym-style API, managers over B x G copies, prompts, projection and the registry.

Entry point: ``make_envs(config, val_copies=None) -> (train_envs, val_envs)``.
"""


def make_envs(config, val_copies: int | None = None):
    from agent_system.environments.env_manager import make_envs as _make_envs

    return _make_envs(config, val_copies)


__all__ = ["make_envs"]
