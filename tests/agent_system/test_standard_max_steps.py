"""env.max_steps=null gives each environment its standard episode limit; a set value overrides it."""

import pytest

from agent_system.environments.config import env_config_from_mapping
from agent_system.environments.registry import get_env_manager_class, known_env_names

STANDARD = {
    "alfworld/AlfredTWEnv": 50,
    "webshop": 15,
    "sokoban": 15,
    "search": 10,
    "gym_cards/NumberLine-v0": 10,
    "gym_cards/EZPoints-v0": 8,
    "gym_cards/Blackjack-v0": 15,
    "dial_lock": 16,  # 2 x 2 dials x 4 turns
}


@pytest.mark.parametrize("env_name,steps", sorted(STANDARD.items()))
def test_standard_limit_when_unset(env_name, steps):
    config = env_config_from_mapping({"env_name": env_name})
    config.validate(known_env_names())
    assert config.max_steps is None
    assert get_env_manager_class(env_name).resolve_max_steps(config) == steps


@pytest.mark.parametrize("env_name", sorted(STANDARD))
def test_explicit_limit_wins(env_name):
    config = env_config_from_mapping({"env_name": env_name, "max_steps": 3})
    assert get_env_manager_class(env_name).resolve_max_steps(config) == 3


def test_manager_uses_the_resolved_limit():
    config = env_config_from_mapping({"env_name": "gym_cards/EZPoints-v0", "rollout": {"n": 2}})
    manager = get_env_manager_class("gym_cards/EZPoints-v0")(config, num_tasks=1, split="train")
    try:
        assert manager.max_steps == 8
    finally:
        manager.close()
