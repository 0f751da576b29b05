"""Typed schema of SLEA-RL's ``algorithm`` section, as verl's typed config.

``algorithm`` is instantiated as :class:`ForgeAlgoConfig`, a subclass of verl's ``AlgoConfig`` that adds the
``forge`` and ``gigpo`` sections, so verl's trainer and ours read the same typed object. The sections' own
checks live in config_rules.py (importable without verl); every check raises :class:`ConfigError` naming the
key, the value and what is allowed, before any environment or model exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import DictConfig, OmegaConf
from verl.base_config import BaseConfig
from verl.trainer.config import AlgoConfig

from agent_system.config_checks import ConfigError
from recipe.forge.config_rules import (
    ForgeValues, GiGPOValues, check_algorithm_scalars, reject_unknown,
)


@dataclass
class GiGPOConfig(BaseConfig, GiGPOValues):
    """GiGPOValues as verl's typed config (dict-like, frozen): ``algorithm.gigpo``."""


@dataclass
class ForgeConfig(BaseConfig, ForgeValues):
    """ForgeValues as verl's typed config (dict-like, frozen): ``algorithm.forge``."""


@dataclass
class ForgeAlgoConfig(AlgoConfig):
    """verl's AlgoConfig plus the step-level estimators' sections and the invalid-action penalty."""

    invalid_action_penalty_coef: float = 0.1
    gigpo: GiGPOConfig = field(default_factory=GiGPOConfig)
    forge: ForgeConfig = field(default_factory=ForgeConfig)

    def __post_init__(self):
        super_post_init = getattr(super(), "__post_init__", None)
        if super_post_init is not None:
            super_post_init()
        check_algorithm_scalars(self.gamma, self.lam, self.invalid_action_penalty_coef)


def instantiate_algorithm(section: DictConfig | dict) -> ForgeAlgoConfig:
    """Build the typed ``algorithm`` section, naming any unknown or mistyped key."""
    from verl.utils.config import omega_conf_to_dataclass

    plain = OmegaConf.to_container(section, resolve=True) if OmegaConf.is_config(section) else section
    cfg = OmegaConf.create(plain)
    cfg.pop("_target_", None)
    for sub, cls in (("forge", ForgeConfig), ("gigpo", GiGPOConfig)):
        if sub in cfg:
            reject_unknown(cfg[sub], cls, f"algorithm.{sub}")
    try:
        return omega_conf_to_dataclass(cfg, ForgeAlgoConfig)
    except ConfigError:
        raise
    except Exception as exc:  # OmegaConf's type and key errors carry the full key
        raise ConfigError(f"invalid algorithm section: {exc}") from exc
