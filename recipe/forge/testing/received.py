"""What a received checkpoint or run folder may hold, built for the attacks on ``slea-rl eval`` / ``export`` and
resumes (tests/local_engine/test_received_checkpoints.py, scripts/reliability_attacks/received.py)."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path


class RunsCode:
    """Unpickling this runs ``touch <marker>``: what a planted pickle in a checkpoint file could do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def plant_code(path: Path, marker: Path) -> None:
    """Replace the torch file ``path`` with one whose unpickling creates ``marker``."""
    import torch

    torch.save({"weight": RunsCode(marker)}, path)


def write_verl_checkpoint(folder: Path, model_dir: str | Path) -> Path:
    """``folder`` (``<run>/global_step_<k>``) laid out as verl's FSDP checkpoint manager writes one rank's checkpoint
    of the Hugging Face model in ``model_dir``: the actor's state dict as ``model_world_size_1_rank_0.pt``,
    ``fsdp_config.json`` and the model's config and tokenizer in ``actor/huggingface/``. Returns ``folder``."""
    import torch
    from transformers import AutoModelForCausalLM

    actor = Path(folder) / "actor"
    (actor / "huggingface").mkdir(parents=True)
    torch.save(AutoModelForCausalLM.from_pretrained(model_dir).state_dict(), actor / "model_world_size_1_rank_0.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    for item in Path(model_dir).iterdir():  # verl's huggingface/ holds all but the weights
        if item.suffix != ".safetensors":
            shutil.copy(item, actor / "huggingface" / item.name)
    return Path(folder)


TINY_RUN = [  # a NumberLine run of seconds: 2 tasks x 2 copies, at most 3 steps, a checkpoint at its end
    "env.env_name=gym_cards/NumberLine-v0", "env.gym_cards.target_max=3", "env.max_steps=3", "env.rollout.n=2",
    "env.history_length=0", "data.train_batch_size=2", "data.val_batch_size=1", "trainer.total_training_steps=1",
    "trainer.test_freq=-1", "trainer.save_freq=1", "trainer.val_before_train=false", "trainer.local.progress=false",
    "trainer.logger=[jsonl]", "algorithm.forge.warmup_iterations=0", "algorithm.forge.min_library_size=0",
    "actor_rollout_ref.rollout.response_length=8", "actor_rollout_ref.actor.use_kl_loss=false",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "trainer.n_gpus_per_node=1",  # on the verl engine: one training process, as a CPU runs it
]


def tiny_run(out: Path, *extra: str) -> list[str]:
    """The overrides of a tiny run whose folder is ``out``."""
    return [*TINY_RUN, f"trainer.default_local_dir={out}", f"algorithm.forge.checkpoint_dir={out}/library", *extra]


def tiny_api_run(out: Path, url: str, *extra: str) -> list[str]:
    """A tiny prompt-only run against the chat endpoint ``url`` (``.../v1``)."""
    return tiny_run(out, "trainer.engine=api", f"trainer.api.base_url={url}", "trainer.api.model=stub",
                    "trainer.api.timeout_s=30", "trainer.api.retry_backoff_s=0.01", *extra)


def write_record(run: Path, overrides: list[str], config: str = "trainer:\n  engine: api\n", started: bool = True,
                 name: str = "2026-01-01_00-00-00_000000") -> Path:
    """A Hydra record in the run folder ``run`` as slea-rl leaves one (``started``: of a run that passed its checks)."""
    from omegaconf import OmegaConf

    from recipe.forge.runs.records import mark_started

    record = run / "hydra" / name
    (record / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(overrides), record / ".hydra" / "overrides.yaml")
    (record / ".hydra" / "config.yaml").write_text(config)
    if started:
        mark_started(record)
    return record


def alias_bomb(levels: int = 9) -> str:
    """A YAML document whose nested aliases expand to 9^levels items."""
    names = [chr(97 + i) for i in range(levels)]
    lines = [f"{names[0]}: &{names[0]} [x, x, x, x, x, x, x, x, x]"]
    lines += [f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip(names, names[1:])]
    return "\n".join(lines) + "\n"


def small_system(seed: int = 0, checkpoint_dir: str | None = None):
    """An ExperienceSystem with entries in every level and a few clusters (no model)."""
    from recipe.forge.config_schema import ForgeConfig
    from recipe.forge.experience import ExperienceSystem
    from recipe.forge.experience.library import LEVELS, Candidate

    rng = random.Random(seed)
    system = ExperienceSystem.from_config(ForgeConfig(warmup_iterations=0, min_library_size=0,
                                                      checkpoint_dir=checkpoint_dir))
    for n in range(12):
        cid = system.index.assign(f"room {n % 4} holds a {rng.choice(['key', 'box', 'lamp'])} and door {n}", n)
        zone = "golden" if n % 2 else "warning"
        level = LEVELS[zone][n % 3]
        system.library.admit(Candidate(f"lesson {n}: {'open' if n % 2 else 'avoid'} door {n} {rng.random():.6f}",
                                       zone, level, float(n), task=f"task {n}", key=f"room {n % 4}",
                                       cluster_ids=[cid]), n)
    system.iteration, system.version = 12, 12
    return system


DAMAGED_WEIGHTS = ("truncated weights", "garbage weights", "weights of another model")


def damaged_copy(checkpoint: Path, target: Path, how: str) -> Path:
    """A copy of the embedded engine's checkpoint at ``target`` whose ``policy/model.safetensors`` has one of the
    :data:`DAMAGED_WEIGHTS`: cut in half, 64 bytes of 0xff, or a valid file of another model's tensors."""
    import torch
    from safetensors.torch import save_file

    shutil.copytree(checkpoint, target)
    weights = target / "policy" / "model.safetensors"
    if how == "truncated weights":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif how == "garbage weights":
        weights.write_bytes(b"\xff" * 64)
    elif how == "weights of another model":
        save_file({"model.embed_tokens.weight": torch.zeros(3, 3)}, str(weights))
    else:
        raise ValueError(f"{how!r} is none of {DAMAGED_WEIGHTS}")
    return target
