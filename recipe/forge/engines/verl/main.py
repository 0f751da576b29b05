"""``trainer.engine=verl``: the same run config, trained with verl 0.9.1 on Ray (FSDP/Megatron, vLLM/SGLang).

recipe/forge/main_forge.py dispatches here. :func:`run_verl`

1. takes the typed run config (recipe/forge/run_config.py, checked before Ray or any model starts; what this
   engine cannot honour is refused there by recipe/forge/engines/verl/settings.py);
2. builds verl's config from the composed one and writes the task files verl's dataloader reads: one row per task, ``extra_info.seed`` being the environment
   seed of the task (training seeds drawn from ``env.seed``; validation seeds ``env.val_seed_offset + i``, never
   seen in training), ``agent_name=forge_agent``;
3. points verl at the ``forge_agent`` loop and at the forge trainer of the run's verl mode
   (``trainer.v1.trainer_mode``: sync, colocate_async or separate_async; trainer.py), with ``rollout.n =
   env.rollout.n`` (the G sessions of one prompt are the G environment copies of one task, so verl's uid is the
   task group); in an async mode verl's rollout correction is on (async_mode.py); no reward workers start
   unless a reward model is on (:func:`idle_reward_workers`: the forge agent loop scores every trajectory from its
   environment, so verl's reward workers, 8 by default, would each import verl and then idle);
4. resolves ``trainer.device`` (``auto``: cuda when a CUDA device is visible or a Ray cluster is joined, else
   cpu) and, on the CPU, applies the CPU backend's settings (recipe/forge/engines/verl/cpu/settings.py);
5. hands the loggers other than ``jsonl`` to verl's Tracking; ``<trainer.default_local_dir>/metrics.jsonl`` is
   written by the forge trainer itself, in the embedded engine's format and by its resume rules
   (recipe/forge/engines/verl/metrics_file.py);
6. has every Ray process read torch files with torch's restricted unpickler (recipe/forge/runs/torch_files.py: a
   resumed checkpoint's shards, optimizer and RNG state never run code);
7. holds the run folder (recipe/forge/runs/run_folder.py), starts the watchdog that ends the Ray processes of this driver if it is killed
   (recipe/forge/engines/verl/reaper.py) and runs verl's own ``run_ppo`` with its V1 TaskRunner; a Ray process
   that died ends it with the trainer's WorkerDiedError (recipe/forge/engines/verl/worker_faults.py).
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf, open_dict

from agent_system.config_checks import ConfigError
from agent_system.environments import base as env_base
from recipe.forge.engines.verl.cpu.settings import (add_worker_env, apply_cpu_settings, joins_cluster,
                                                    resolve_device, use_cpu_platform_in_this_process)
from recipe.forge.engines.verl.agent_loop import AGENT_NAME
from recipe.forge.engines.verl.async_mode import apply_async_settings
from recipe.forge.engines.verl.metrics_file import OWN_LOGGERS_KEY
from recipe.forge.engines.verl.driver_console import MetricsConsole, write_verl_config
from recipe.forge.engines.verl.quiet import quiet_worker_env
from recipe.forge.engines.verl.reaper import start_reaper
from recipe.forge.engines.verl.settings import verl_config
from recipe.forge.engines.verl.worker_faults import unwrap
from recipe.forge.runs.console import say
from recipe.forge.run_config import RunConfig
from recipe.forge.runs.run_start import StartPlan, finish_line, start_run
from recipe.forge.runs.run_length import training_tasks
from recipe.forge.runs.durable import write_text_atomic
from recipe.forge.runs.torch_files import WORKER_ENV
from recipe.forge.runs.write_faults import writing

# served by the forge trainer's metrics writer (metrics.jsonl, TensorBoard in the run folder) and the driver's console
# line (MetricsConsole), not by verl's Tracking backends
OWN_LOGGERS = ("jsonl", "console", "tensorboard")


def task_rows(env_name: str, seeds: np.ndarray, split: str) -> pd.DataFrame:
    """One verl dataset row per task; the prompt is a placeholder (the agent loop builds the real prompts)."""
    return pd.DataFrame(
        {
            "data_source": [env_name] * len(seeds),
            "prompt": [[{"role": "user", "content": f"{env_name} {split} task {int(s)}"}] for s in seeds],
            "agent_name": [AGENT_NAME] * len(seeds),
            "extra_info": [{"index": i, "seed": int(s), "split": split} for i, s in enumerate(seeds)],
        }
    )


def task_seeds(env_cfg: Any, num_train: int, num_val: int) -> tuple[np.ndarray, np.ndarray]:
    """Training and validation seeds by the embedded engine's rule (agent_system.environments.base.task_seeds),
    the training ones drawn from ``env.seed``."""
    offset = int(env_cfg.val_seed_offset)
    rng = np.random.default_rng(int(env_cfg.seed))
    return env_base.task_seeds("train", num_train, offset, rng), env_base.task_seeds("val", num_val, offset)


def write_task_files(run: RunConfig, total_training_steps: int | None, out_dir: str) -> tuple[str, str]:
    """Write train.parquet / val.parquet under ``out_dir``; returns their paths."""
    num_train = training_tasks(run.data.train_batch_size, total_training_steps)
    num_val = run.data.val_batch_size or run.data.train_batch_size
    train_seeds, val_seeds = task_seeds(run.env, num_train, num_val)
    os.makedirs(out_dir, exist_ok=True)
    paths = os.path.join(out_dir, "train.parquet"), os.path.join(out_dir, "val.parquet")
    task_rows(run.env.env_name, train_seeds, "train").to_parquet(paths[0])
    task_rows(run.env.env_name, val_seeds, "val").to_parquet(paths[1])
    return paths


def logger_names(loggers: Any) -> list[str]:
    names = [loggers] if isinstance(loggers, str) else list(loggers or [])
    return list(dict.fromkeys(str(name) for name in names))


def verl_loggers(loggers: Any) -> list[str]:
    """``trainer.logger`` as verl's Tracking backends (ours, :data:`OWN_LOGGERS`, left out), order kept, duplicates
    dropped."""
    return [name for name in logger_names(loggers) if name not in OWN_LOGGERS]


def own_loggers(loggers: Any) -> list[str]:
    """The loggers of ``trainer.logger`` that the forge trainer and the driver serve themselves."""
    return [name for name in logger_names(loggers) if name in OWN_LOGGERS]


def idle_reward_workers(cfg: DictConfig) -> list[str]:
    """Start no verl reward workers (``reward.num_workers=0``, in place) where they could only idle: the forge
    agent loop sets every trajectory's ``reward_score`` from its environment, which verl's agent loop then never
    sends to a reward worker; with a reward model on (``reward.reward_model.enable``) verl scores through those
    workers, and they stay. One line per value changed, for the start-up log."""
    workers = OmegaConf.select(cfg, "reward.num_workers", default=None)
    if not workers or OmegaConf.select(cfg, "reward.reward_model.enable", default=False):
        return []
    with open_dict(cfg):
        cfg.reward.num_workers = 0
    return [f"reward.num_workers: {workers} -> 0 (the forge agent loop scores every trajectory from its environment: "
            "verl's reward workers would only idle)"]


def wired_verl_config(run: RunConfig) -> DictConfig:
    """verl's config of the run (:func:`verl_config`), wired for the forge agent loop and trainer and, on a CPU,
    with the CPU backend's settings; every derived or replaced value is printed. Writes nothing."""
    derived: list[str] = []
    cfg = verl_config(run, derived)
    for change in derived:
        print(f"[slea-rl] verl batch sizes: {change}", flush=True)
    device = resolve_device(cfg)
    for change in idle_reward_workers(cfg):
        print(f"[slea-rl] verl: {change}", flush=True)
    for change in apply_async_settings(cfg, run.verl.mode):
        print(f"[slea-rl] verl {run.verl.mode}: {change}", flush=True)
    if device == "cpu":
        changed = [change.split(":")[0].removeprefix("actor_rollout_ref.") for change in apply_cpu_settings(cfg)]
        if changed:
            print(f"[slea-rl] verl on the CPU: the CPU backend's settings replace the run's {', '.join(changed)} "
                  "(hf rollout server, FSDP2 on gloo, sdpa, fp32; docs/distributed.md)", flush=True)
    from recipe.forge.hf.model_paths import resolve_model_path

    with open_dict(cfg):
        # the packaged-model alias (smollm2-135m-instruct) becomes its converted local folder, for every process
        cfg.actor_rollout_ref.model.path = resolve_model_path(str(cfg.actor_rollout_ref.model.path))
        if cfg.get("critic") is not None and cfg.critic.get("model") is not None and cfg.critic.model.get("path"):
            cfg.critic.model.path = resolve_model_path(str(cfg.critic.model.path))
        cfg.actor_rollout_ref.rollout.agent.default_agent_loop = AGENT_NAME
        cfg.actor_rollout_ref.rollout.n = run.group_size
        cfg.trainer.v1.trainer_mode = run.verl.registered_mode  # verl picks the forge trainer of the run's mode
        cfg.trainer.use_v1 = True
        cfg.trainer.engine = "verl"
        cfg.trainer.device = device
        cfg.trainer[OWN_LOGGERS_KEY] = own_loggers(cfg.trainer.get("logger"))
        cfg.trainer.logger = verl_loggers(cfg.trainer.get("logger"))
        # the task files are a few rows of seeds: read in the trainer's process (verl's loader workers only start
        # processes, which Ray's shutdown killed with a traceback after a run that succeeded)
        cfg.data.dataloader_num_workers = 0
        add_worker_env(cfg, WORKER_ENV)  # a resume's shards are read without unpickling code (torch_files.py)
        add_worker_env(cfg, quiet_worker_env(), keep_given=True)
    return cfg


def attach_task_files(run: RunConfig, cfg: DictConfig) -> None:
    """Write the run's task files (:func:`write_task_files`) into ``<run folder>/forge_tasks`` and point ``cfg``
    at them."""
    task_dir = os.path.join(run.trainer.output_dir or "checkpoints", "forge_tasks")
    train_path, val_path = write_task_files(run, cfg.trainer.get("total_training_steps"), task_dir)
    with open_dict(cfg):
        cfg.data.train_files = train_path
        cfg.data.val_files = val_path


def prepare_verl_config(run: RunConfig) -> DictConfig:
    """verl's config of the run, wired for the forge agent loop and trainer, with its task files written."""
    cfg = wired_verl_config(run)
    attach_task_files(run, cfg)
    return cfg


def check_cpu_ranks(cfg: DictConfig, cores: int | None = None) -> None:
    """A CPU run that starts its own Ray runs one FSDP training process per ``trainer.n_gpus_per_node x
    trainer.nnodes``: more of them than this machine has cores only share the cores (verl's defaults ask for 8).
    ConfigError naming the keys; a run joining a cluster is left to the cluster's nodes."""
    if cfg.trainer.device != "cpu" or joins_cluster(cfg):
        return
    cores = cores or len(os.sched_getaffinity(0))
    ranks = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
    if ranks > cores:
        raise ConfigError(
            f"trainer.device=cpu runs trainer.n_gpus_per_node x trainer.nnodes = {ranks} training processes, more than "
            f"this machine's {cores} CPU cores: set trainer.n_gpus_per_node=1 (at most {cores}) and trainer.nnodes=1, "
            "as examples/forge/run_numberline_cpu.sh does")


def check_with_verl(cfg: DictConfig) -> None:
    """verl's own start-up check (``validate_config``) of the wired config, its refusal as one ConfigError line. What it
    prints on the way (that it passed, that ``data.val_batch_size``, which sizes our validation task file, is
    deprecated in verl's dataloader) is left out."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config as verl_validate_config

    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # verl's note that it disables the critic; its trainer says it again
            verl_validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg),
                                 use_critic=need_critic(cfg))
    except (ValueError, AssertionError) as exc:
        raise ConfigError(f"verl refuses the config: {' '.join(str(exc).split())}") from None


def run_verl(run: RunConfig, plan: StartPlan | None = None) -> None:
    """Train with verl: wire verl's config, check it (ours, then verl's own, before anything is written or Ray
    starts), write the tasks and hand them to verl's ``run_ppo``. The run folder is held throughout
    (recipe/forge/runs/run_folder.py): a second run on it is refused before anything is written."""
    from recipe.forge.runs.run_folder import own_run_folder

    with own_run_folder(run.trainer.output_dir):
        plan = plan or start_run(run)
        if plan.complete:
            return
        started = time.perf_counter()
        _run_verl(run, plan)
        if not run.trainer.val_only:
            say(finish_line(run.trainer.output_dir, read_history(run.trainer.output_dir), time.perf_counter() - started))


def read_history(folder: str) -> list[dict]:
    """The metrics records of the run in ``folder`` (its metrics.jsonl; empty without one)."""
    from recipe.forge.runs.tracking import read_metrics

    path = os.path.join(folder, "metrics.jsonl")
    return read_metrics(path) if os.path.isfile(path) else []


def _run_verl(run: RunConfig, plan: StartPlan) -> None:
    cfg = wired_verl_config(run)
    check_cpu_ranks(cfg)
    if cfg.trainer.device == "cpu":
        use_cpu_platform_in_this_process()

    import recipe.forge.engines.verl.plugin  # noqa: F401  registrations in this (driver) process too
    from verl.trainer.main_ppo import run_ppo
    from verl.utils.device import auto_set_device

    from recipe.forge.engines.verl.task_runner import QuietTaskRunner

    auto_set_device(cfg)
    check_with_verl(cfg)
    attach_task_files(run, cfg)
    write_verl_config(cfg, run.trainer.output_dir)
    start_reaper()
    console = MetricsConsole(run.trainer.output_dir, after=-1 if plan.done == 0 else plan.done) \
        if "console" in cfg.trainer[OWN_LOGGERS_KEY] and not run.trainer.val_only else None
    try:
        with console or contextlib.nullcontext():
            run_ppo(cfg, task_runner_class=QuietTaskRunner)
    except Exception as exc:  # a WorkerDiedError of the trainer arrives inside the TaskRunner's RayTaskError
        died = unwrap(exc)
        if died is exc:
            raise
        raise died from None
