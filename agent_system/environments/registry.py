"""Registry of environment managers: the exact ``env.env_name`` maps to a lazily imported manager class.

Entries are "module:Class" strings so that listing or validating names imports no environment package.
"""

from __future__ import annotations

import importlib

from agent_system.config_checks import ConfigError

_MANAGERS: dict[str, str] = {
    "sokoban": "agent_system.environments.env_package.sokoban.manager:SokobanEnvironmentManager",
    "gym_cards/NumberLine-v0": "agent_system.environments.env_package.gym_cards.manager:GymCardsEnvironmentManager",
    "gym_cards/EZPoints-v0": "agent_system.environments.env_package.gym_cards.manager:GymCardsEnvironmentManager",
    "gym_cards/Points24-v0": "agent_system.environments.env_package.gym_cards.manager:GymCardsEnvironmentManager",
    "gym_cards/Blackjack-v0": "agent_system.environments.env_package.gym_cards.manager:GymCardsEnvironmentManager",
    "alfworld/AlfredTWEnv": "agent_system.environments.env_package.alfworld.manager:AlfworldEnvironmentManager",
    "alfworld": "agent_system.environments.env_package.alfworld.manager:AlfworldEnvironmentManager",  # short alias
    "search": "agent_system.environments.env_package.search.manager:SearchEnvironmentManager",
    "webshop": "agent_system.environments.env_package.webshop.manager:WebshopEnvironmentManager",
    "textworld": "agent_system.environments.env_package.textworld.manager:TextworldEnvironmentManager",
    "appworld": "agent_system.environments.env_package.appworld.manager:AppworldEnvironmentManager",
    "dial_lock": "agent_system.environments.env_package.dial_lock.manager:DialLockManager",
}


def known_env_names() -> list[str]:
    return sorted(_MANAGERS)


def register_env_manager(env_name: str, target: str) -> None:
    """Register (or replace) the manager for ``env_name``; ``target`` is "module:Class"."""
    if ":" not in target:
        raise ValueError(f"manager target {target!r} must be 'module:Class'")
    _MANAGERS[env_name] = target


def get_env_manager_class(env_name: str) -> type:
    if env_name not in _MANAGERS:
        raise ConfigError(f"env.env_name={env_name!r} is not a known environment; known: {known_env_names()}")
    module_name, _, class_name = _MANAGERS[env_name].partition(":")
    return getattr(importlib.import_module(module_name), class_name)
