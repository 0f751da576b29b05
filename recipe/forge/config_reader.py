"""One way to read a key of a composed run config: :class:`ConfigReader`, each read checked and named.

Hydra composes recipe/forge/config/forge_trainer.yaml on top of verl's ppo_trainer, so every key verl defines is
present with verl's default; a missing key means the config was not composed from it, which is an error here,
never a default restated in our code. Needs neither verl nor torch.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from omegaconf import DictConfig, OmegaConf

from agent_system.config_checks import ConfigError, check_choice, check_int, check_range

_ABSENT = object()


class ConfigReader:
    """Typed, checked reads of dotted keys (``trainer.save_freq``) of a composed config; every fault is a
    ConfigError naming the key, the value and what is allowed."""

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg

    def get(self, key: str) -> Any:
        """The value at ``key``, resolved (lists and sections as plain Python objects)."""
        value = OmegaConf.select(self.cfg, key, default=_ABSENT)
        if value is _ABSENT:
            raise ConfigError(f"{key} is missing from the run config; compose it from recipe/forge/config/"
                              "forge_trainer.yaml, which holds verl's defaults")
        return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value

    def number(self, key: str, low: float | None = None, high: float | None = None, **inclusive: bool) -> float:
        value = self.get(key)
        check_range(key, value, low, high, **inclusive)
        return float(value)

    def integer(self, key: str, low: int | None = None, nullable: bool = False) -> int | None:
        value = self.get(key)
        if value is None and nullable:
            return None
        check_int(key, value, low)
        return value

    def flag(self, key: str, nullable: bool = False) -> bool | None:
        value = self.get(key)
        if value is None and nullable:
            return None
        if not isinstance(value, bool):
            raise ConfigError(f"{key}={value!r} must be true or false" + (" or null" if nullable else ""))
        return value

    def text(self, key: str, nullable: bool = False) -> str | None:
        value = self.get(key)
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            raise ConfigError(f"{key}={value!r} must be a string")
        return value

    def choice(self, key: str, allowed: Sequence[Any]) -> Any:
        value = self.get(key)
        check_choice(key, value, list(allowed))
        return value

    def names(self, key: str, allowed: Sequence[str]) -> tuple[str, ...]:
        """A string or a list of strings, each one of ``allowed``."""
        value = self.get(key)
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list):
            raise ConfigError(f"{key}={value!r} must be a name or a list of names from {list(allowed)}")
        for name in values:
            check_choice(f"{key}[]", name, list(allowed))
        return tuple(values)

    def pair_of_fractions(self, key: str) -> tuple[float, float]:
        """Two numbers, each in [0, 1) (Adam's betas)."""
        value = self.get(key)
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise ConfigError(f"{key}={value!r} must be two numbers [beta1, beta2], each in [0, 1)")
        for n, beta in enumerate(value):
            check_range(f"{key}[{n}]", beta, 0.0, 1.0, high_inclusive=False)
        return float(value[0]), float(value[1])

    def section(self, key: str, known: Sequence[str]) -> dict[str, Any]:
        """A section as a plain dict (``{}`` when absent or null), refusing keys not in ``known``."""
        value = OmegaConf.select(self.cfg, key, default=None)
        if value is None:
            return {}
        if not OmegaConf.is_dict(value):
            raise ConfigError(f"{key}={value!r} must be a section (mapping)")
        plain = {k: v for k, v in OmegaConf.to_container(value, resolve=True).items() if k != "_target_"}
        unknown = sorted(set(plain) - set(known))
        if unknown:
            raise ConfigError(f"unknown key {key}.{unknown[0]}; known keys: {sorted(known)}")
        return plain

    def typed(self, key: str, convert: Callable[[Any], Any], **overrides: Any) -> Any:
        """``convert`` (verl's ``omega_conf_to_dataclass``) of the section at ``key``, resolved, with ``overrides``
        set in it; what ``convert`` refuses (e.g. both micro-batch keys set) becomes a ConfigError naming the
        section."""
        section = self.get(key)
        if not isinstance(section, dict):
            raise ConfigError(f"{key}={section!r} must be a section (mapping)")
        try:
            return convert(OmegaConf.create({**section, **overrides}))
        except ConfigError:
            raise
        except Exception as exc:  # verl raises ValueError / AssertionError / Hydra's InstantiationException
            raise ConfigError(f"{key}: verl refuses this section: {exc}") from exc
