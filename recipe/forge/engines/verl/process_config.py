"""The run's typed config inside every Ray process of the verl engine, built once per process.

verl hands each of its processes (the TaskRunner, which holds the trainer, and every agent-loop worker) the config
the driver prepared from the run config (main.prepare_verl_config). The first SLEA-RL reader in a process types it
with :func:`recipe.forge.run_config.load_run_config`, the readers and checks the driver ran at start-up, and every
later reader in that process gets the same RunConfig: the agent loop, the step hooks (forge_steps.py), the library
driver and the trainer read its typed sections (``algorithm``, ``env``, ``trainer``, ``verl``), never a raw key.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from recipe.forge.run_config import RunConfig, load_run_config

_BUILT: dict[int, tuple[Any, RunConfig]] = {}  # id(verl config) -> (the config, kept alive; its RunConfig)


def process_run_config(config: DictConfig | dict) -> RunConfig:
    """The RunConfig of the verl config ``config`` (the object verl gave this process), typed on the first call."""
    held = _BUILT.get(id(config))
    if held is None or held[0] is not config:
        composed = config if isinstance(config, DictConfig) else OmegaConf.create(config)
        held = (config, load_run_config(composed))
        _BUILT[id(config)] = held
    return held[1]
