"""The verl engine's section of the run config and its start-up checks, a leaf of the engine: it imports only
the engine's check functions (no agent loop, trainer or Ray). Called by recipe/forge/run_config.py.

``RunConfig.verl`` (:class:`VerlSettings`, typed once by :func:`read_verl`) holds what the engine's Ray processes
read besides the shared sections (``algorithm``, ``env``, ``data``, ``trainer``):

* ``mode``: verl's V1 trainer mode, by verl's own key ``trainer.v1.trainer_mode``: ``sync`` (the default),
  ``colocate_async`` or ``separate_async`` (modes.py; the forge trainer is registered once per mode);
* ``staleness``: verl's bound on off-policy rollouts in the async modes (``trainer.v1.sampler.max_off_policy_threshold``:
  a task group dispatched more than that many policy versions ago is dropped, or waited for, by
  ``max_off_policy_strategy``); None: unbounded;
* ``response_prefix``: ``trainer.local.response_prefix``, the prefilled start of every response (both engines).

:func:`check_verl_engine_config` refuses, before Ray starts, what this engine cannot honour (each error names the
key). verl reads its own keys from :func:`verl_config`: the composed config (``RunConfig.composed``) with the batch
sizes it would refuse derived.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from agent_system.config_checks import ConfigError
from recipe.forge.config_reader import ConfigReader
from recipe.forge.engines.verl.cpu.settings import resolve_device
from recipe.forge.engines.verl.modes import ASYNC_MODES, MODE_KEY, REGISTERED_MODES, VERL_MODES, verl_mode

if TYPE_CHECKING:
    from recipe.forge.run_config import RunConfig

STALENESS_STRATEGIES = ("drop", "wait")


@dataclass(frozen=True)
class StalenessBound:
    """verl's replay-buffer bound: a task group may span at most ``threshold`` policy versions (None: no bound)."""

    threshold: int | None
    strategy: str  # drop | wait


@dataclass(frozen=True)
class VerlSettings:
    mode: str  # one of modes.VERL_MODES
    staleness: StalenessBound
    response_prefix: str = ""

    @property
    def is_async(self) -> bool:
        return self.mode in ASYNC_MODES

    @property
    def registered_mode(self) -> str:
        """The trainer name verl's registry knows this mode by."""
        return REGISTERED_MODES[self.mode]


def read_verl(reader: ConfigReader) -> VerlSettings:
    mode = verl_mode(reader.get(MODE_KEY))
    if mode is None:
        reader.choice(MODE_KEY, VERL_MODES)  # the ConfigError naming the key and the allowed values
    return VerlSettings(
        mode=mode,
        staleness=StalenessBound(
            threshold=reader.integer("trainer.v1.sampler.max_off_policy_threshold", 1, nullable=True),
            strategy=reader.choice("trainer.v1.sampler.max_off_policy_strategy", STALENESS_STRATEGIES),
        ),
        response_prefix=str(reader.get("trainer.local.response_prefix") or ""),
    )


def verl_config(run: RunConfig, changes: list[str] | None = None) -> DictConfig:
    """verl's config (the composed run config, interpolations kept) as verl's trainer takes it, with the batch
    sizes verl would refuse for being too large derived (batch_layout.derive_batch_sizes); each change is appended
    to ``changes``."""
    from recipe.forge.engines.verl.batch_layout import derive_batch_sizes

    cfg = OmegaConf.create(run.composed)
    derived = derive_batch_sizes(cfg, run.data.train_batch_size, run.group_size)
    if changes is not None:
        changes.extend(derived)
    return cfg


def check_verl_engine_config(run: RunConfig) -> None:
    """What this engine cannot honour, refused before Ray starts (each error names the key)."""
    from recipe.forge.engines.verl.async_mode import check_async_config
    from recipe.forge.engines.verl.batch_layout import check_micro_batches
    from recipe.forge.engines.verl.distill import check_distillation_config
    from recipe.forge.engines.verl.rollout_logprobs import check_rollout_log_probs

    cfg = verl_config(run)
    if not run.verl.is_async:  # the async modes turn the rollout log-probs on (async_mode.apply_async_settings)
        check_rollout_log_probs(cfg)
    check_micro_batches(cfg, run.group_size)
    check_distillation_config(run.algorithm, run.env)
    distill = bool(run.algorithm.forge.use_distillation) and run.algorithm.adv_estimator == "forge"
    check_async_config(cfg, run.verl.mode, resolve_device(cfg), distill)
    if run.algorithm.forge.extractor == "llm" and resolve_device(cfg) == "cpu":
        raise ConfigError(
            "algorithm.forge.extractor=llm needs the rollout servers' OpenAI endpoint, which the CPU backend's hf "
            "server does not have: use algorithm.forge.extractor=rule with trainer.device=cpu"
        )
