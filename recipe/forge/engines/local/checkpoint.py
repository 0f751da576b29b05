"""Trainer checkpoints: ``<output_dir>/global_step_<k>/`` holds everything an exact resume needs.

Contents: the policy weights (full model or LoRA adapter, in Hugging Face format) and the optimizer (both
absent in prompt-only mode, which trains no weights), the critic and its optimizer (PPO), the experience library, every RNG the run draws from (python, numpy, torch, the
sampler's generator, the mini-batch shuffler, the environment task sampler) and the iteration.
``<output_dir>/latest_checkpointed_iteration.txt`` names the newest complete checkpoint (verl's convention),
written last so that an interrupted save is never picked up.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

LATEST = "latest_checkpointed_iteration.txt"


def checkpoint_dir(output_dir: str | Path, iteration: int) -> Path:
    return Path(output_dir) / f"global_step_{iteration}"


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    marker = Path(output_dir) / LATEST
    if not marker.exists():
        return None
    path = checkpoint_dir(output_dir, int(marker.read_text().strip()))
    return path if (path / "trainer_state.json").exists() else None


def checkpoint_to_resume(output_dir: str | Path, resume_mode: str, resume_from_path: str | None) -> Path | None:
    """The checkpoint ``trainer.resume_mode`` asks for: none (``disable``, or ``auto`` with no checkpoint yet),
    the newest one (``auto``) or ``trainer.resume_from_path`` (``resume_path``)."""
    if resume_mode == "disable":
        return None
    return Path(resume_from_path) if resume_mode == "resume_path" else latest_checkpoint(output_dir)


def capture_rng(generators: dict[str, Any]) -> dict[str, Any]:
    """Serialisable states of the global RNGs plus named torch.Generator / numpy Generator objects."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }
    for name, gen in generators.items():
        state[name] = gen.get_state() if isinstance(gen, torch.Generator) else gen.bit_generator.state
    return state


def restore_rng(state: dict[str, Any], generators: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    for name, gen in generators.items():
        if isinstance(gen, torch.Generator):
            gen.set_state(state[name])
        else:
            gen.bit_generator.state = state[name]


def save_checkpoint(output_dir: str | Path, iteration: int, *, policy=None, optimizer=None, rng: dict[str, Any],
                    critic=None, critic_optimizer=None, experience=None, extra: dict | None = None) -> Path:
    path = checkpoint_dir(output_dir, iteration)
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    if policy is not None:
        policy.save(path / "policy")
    if optimizer is not None:
        torch.save(optimizer.state_dict(), path / "optimizer.pt")
    if critic is not None:
        torch.save({"critic": critic.state_dict(), "optimizer": critic_optimizer.state_dict()}, path / "critic.pt")
    if experience is not None:
        experience.save(path / "library")
    torch.save(capture_rng(rng), path / "rng.pt")
    (path / "trainer_state.json").write_text(json.dumps({"iteration": iteration, **(extra or {})}))
    (Path(output_dir) / LATEST).write_text(str(iteration))
    return path


def load_checkpoint(path: str | Path, *, policy=None, optimizer=None, rng: dict[str, Any], critic=None,
                    critic_optimizer=None, experience=None) -> dict[str, Any]:
    """Restore everything :func:`save_checkpoint` wrote, in place; returns the trainer state (iteration...)."""
    path = Path(path)
    if not (path / "trainer_state.json").exists():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no trainer_state.json)")
    if policy is not None:
        policy.load_weights(path / "policy")
    if optimizer is not None:
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    if critic is not None:
        saved = torch.load(path / "critic.pt", weights_only=False)
        critic.load_state_dict(saved["critic"])
        critic_optimizer.load_state_dict(saved["optimizer"])
    if experience is not None:
        experience.load(path / "library")
    restore_rng(torch.load(path / "rng.pt", weights_only=False), rng)
    return json.loads((path / "trainer_state.json").read_text())
