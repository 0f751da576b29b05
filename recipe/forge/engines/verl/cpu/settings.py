"""``trainer.device`` for the verl engine, and what ``cpu`` sets.

``trainer.device`` is ``auto`` by default: ``cuda`` when this machine sees a CUDA device or the run joins an
existing Ray cluster (``ray_kwargs.ray_init.address`` or ``RAY_ADDRESS``), ``cpu`` otherwise. With ``cpu`` the
settings below replace whatever the run script chose, because on a CPU there is no alternative to them: each
change is printed at start-up.

A CPU run that starts its own Ray (no address) is given the logical CPUs and GPUs verl's placement groups ask for;
one that joins a cluster (``trainer.device=cpu`` with an address, e.g. the nodes of
recipe/forge/engines/verl/cpu/local_cluster.py) takes the resources its nodes were started with: Ray refuses
``num_cpus``/``num_gpus`` in ``ray.init`` when it connects to an existing cluster.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from agent_system.config_checks import ConfigError
from recipe.forge.engines.verl.async_mode import BACKEND, CPU_BACKEND
from recipe.forge.engines.verl.modes import verl_mode

DEVICES = ("auto", "cpu", "cuda", "npu")
FP32_MIXED_PRECISION = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}

# key -> value on the CPU, and why (the reason is printed when the run's value differs)
CPU_SETTINGS: dict[str, tuple[Any, str]] = {
    "trainer.device": ("cpu", "the cpu platform"),
    "actor_rollout_ref.rollout.name": ("hf", "vLLM/SGLang need a GPU: the Hugging Face rollout server"),
    "actor_rollout_ref.rollout.mode": ("async", "verl's server mode"),
    "actor_rollout_ref.rollout.tensor_model_parallel_size": (1, "an hf server is one process"),
    "actor_rollout_ref.actor.strategy": ("fsdp2", "FSDP1 needs a CUDA device id"),
    "actor_rollout_ref.ref.strategy": ("fsdp2", "FSDP1 needs a CUDA device id"),
    "critic.strategy": ("fsdp2", "FSDP1 needs a CUDA device id"),
    "actor_rollout_ref.model.use_remove_padding": (False, "needs flash-attention"),
    "critic.model.use_remove_padding": (False, "needs flash-attention"),
    "actor_rollout_ref.model.override_config.attn_implementation": ("sdpa", "flash-attention is CUDA-only"),
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile": (False, "slow to compile and no gain on a CPU"),
    "actor_rollout_ref.ref.fsdp_config.use_torch_compile": (False, "slow to compile and no gain on a CPU"),
    "actor_rollout_ref.actor.fsdp_config.mixed_precision": (FP32_MIXED_PRECISION, "fp32 like the rollout server"),
    "actor_rollout_ref.ref.fsdp_config.mixed_precision": (FP32_MIXED_PRECISION, "fp32 like the rollout server"),
}


def resolve_device(cfg: DictConfig) -> str:
    """``trainer.device`` with ``auto`` resolved (see the module docstring)."""
    device = str(OmegaConf.select(cfg, "trainer.device", default="auto"))
    if device not in DEVICES:
        raise ConfigError(f"trainer.device={device!r} is not one of {list(DEVICES)}")
    if device != "auto":
        return device
    return "cuda" if torch.cuda.is_available() or joins_cluster(cfg) else "cpu"


def joins_cluster(cfg: DictConfig) -> bool:
    """Whether verl's ``ray.init`` connects to an existing Ray cluster (an address in the config or in
    ``RAY_ADDRESS``) instead of starting one."""
    return bool(OmegaConf.select(cfg, "ray_kwargs.ray_init.address", default=None) or os.environ.get("RAY_ADDRESS"))


def apply_cpu_settings(cfg: DictConfig) -> list[str]:
    """Set :data:`CPU_SETTINGS` and the Ray start-up of a CPU run in ``cfg`` (in place).

    Returns one line per value that differed from the run's, for the start-up log.
    """
    changes = []
    with open_dict(cfg):
        for key, (value, why) in CPU_SETTINGS.items():
            section, _, leaf = key.rpartition(".")
            if OmegaConf.select(cfg, section, default=None) is None:
                continue  # e.g. no critic section
            old = OmegaConf.select(cfg, key, default=None)
            old_plain = OmegaConf.to_container(old, resolve=True) if OmegaConf.is_config(old) else old
            if old_plain != value:
                changes.append(f"{key}: {old_plain!r} -> {value!r} ({why})")
            OmegaConf.update(cfg, key, value, merge=False, force_add=True)
        separate = verl_mode(OmegaConf.select(cfg, "trainer.v1.trainer_mode")) == "separate_async"
        if separate:
            old = OmegaConf.select(cfg, BACKEND)
            if old != CPU_BACKEND:
                changes.append(f"{BACKEND}: {old!r} -> {CPU_BACKEND!r} (separate_async's weight sync: NCCL and its "
                               "kin need a GPU, the weights go through Ray's object store)")
            OmegaConf.update(cfg, BACKEND, CPU_BACKEND, merge=False)
        ray_init = cfg.ray_kwargs.ray_init
        if not joins_cluster(cfg):
            # verl's resource pools count GPUs only: Ray gets one logical GPU per worker (the standalone rollout's
            # too), and enough logical CPUs for verl's placement-group bundles (10 CPUs each), or the placement
            # group never becomes ready
            gpus = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
            if separate:
                rollout = cfg.actor_rollout_ref.rollout
                gpus += int(rollout.n_gpus_per_node) * int(rollout.nnodes)
            ray_init.num_gpus = gpus
            ray_init.num_cpus = max(int(ray_init.get("num_cpus") or 0), 10 * gpus + 8)
        add_worker_env(cfg, {"VERL_PLATFORM": "cpu"})
    return changes


def add_worker_env(cfg: DictConfig, env_vars: dict[str, str], keep_given: bool = False) -> None:
    """Set ``env_vars`` in the environment of every Ray process of the run (``ray_kwargs.ray_init.runtime_env``,
    what verl's ``run_ppo`` passes to ``ray.init``), keeping the other variables already there; with ``keep_given``,
    a variable already there keeps its value too."""
    ray_init = cfg.ray_kwargs.ray_init
    if ray_init.get("runtime_env") is None:
        ray_init.runtime_env = {}
    given = OmegaConf.to_container(OmegaConf.create(ray_init.runtime_env.get("env_vars") or {}))
    ray_init.runtime_env.env_vars = {**env_vars, **given} if keep_given else {**given, **env_vars}


def use_cpu_platform_in_this_process() -> None:
    """Select the cpu platform in the driver process (Ray's processes get ``VERL_PLATFORM`` from the runtime env)."""
    from verl.plugin.platform import set_platform

    from recipe.forge.engines.verl.cpu.platform import PlatformCPU

    os.environ["VERL_PLATFORM"] = "cpu"
    set_platform(PlatformCPU())
