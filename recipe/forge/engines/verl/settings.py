"""The verl engine's start-up checks of a typed run config: what this engine cannot honour is refused before Ray
starts (each error names the key). Called by recipe/forge/run_config.py; a leaf of the engine: it imports only the
engine's check functions (no agent loop, trainer or Ray).

verl reads its own keys from the composed config (``RunConfig.composed``) when its trainer starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from omegaconf import OmegaConf

from agent_system.config_checks import ConfigError
from recipe.forge.engines.verl.cpu.settings import resolve_device

if TYPE_CHECKING:
    from recipe.forge.run_config import RunConfig


def check_verl_engine_config(run: RunConfig) -> None:
    """What this engine cannot honour, refused before Ray starts (each error names the key)."""
    from recipe.forge.engines.verl.batch_layout import check_micro_batches
    from recipe.forge.engines.verl.distill import check_distillation_config
    from recipe.forge.engines.verl.rollout_logprobs import check_rollout_log_probs

    cfg = OmegaConf.create(run.composed)  # verl's config, as main.verl_config builds it
    check_rollout_log_probs(cfg)
    check_micro_batches(cfg, run.group_size)
    check_distillation_config(run.algorithm, run.env)
    if run.algorithm.forge.extractor == "llm" and resolve_device(cfg) == "cpu":
        raise ConfigError(
            "algorithm.forge.extractor=llm needs the rollout servers' OpenAI endpoint, which the CPU backend's hf "
            "server does not have: use algorithm.forge.extractor=rule with trainer.device=cpu"
        )
