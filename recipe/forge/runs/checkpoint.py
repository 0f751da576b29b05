"""Trainer checkpoints: ``<output_dir>/global_step_<k>/`` holds everything an exact resume needs.

Contents: the policy weights (full model or LoRA adapter, in Hugging Face safetensors format) and the optimizer
(both absent in prompt-only mode, which trains no weights), the critic and its optimizer (PPO), the experience
library, every RNG the run draws from (python, numpy, torch, the sampler's generator, the mini-batch shuffler,
the environment task sampler) and the iteration.

Nothing a resume reads is unpickled, so a replaced file cannot run code: optimizer and critic state are read
with ``torch.load(weights_only=True)`` (tensors and plain containers only), the RNG states (``rng.json``) and
the trainer state (``trainer_state.json``) are JSON, the library is the experience store's checked JSON.
A resume reads and checks every file before it changes anything.

A checkpoint is written into a temporary folder of its writer and renamed to ``global_step_<k>`` once complete;
``<output_dir>/latest_checkpointed_iteration.txt`` (verl's convention) is then replaced atomically. A kill at
any moment leaves every ``global_step_<k>`` folder either complete or absent. ``trainer.resume_mode=auto``
resumes from the checkpoint the marker names, or, when that one is missing or incomplete (or the marker is
empty), from the newest complete one; it never starts over while checkpoint folders exist (if none of them
is complete, it stops with an error).

``trainer.max_actor_ckpt_to_keep`` (verl's key; null: keep all) keeps the newest N checkpoints
(:func:`prune_checkpoints`, after each save). A save never removes what it did not write: a ``global_step_<k>``
folder that is not a checkpoint is refused, and a full disk or a read-only folder ends the save with one line
naming the checkpoint, nothing of it kept, the earlier checkpoints intact.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import shutil
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from agent_system.json_input import loads as read_json
from recipe.forge.runs.durable import (
    TEMP_SUFFIX, CheckpointError, fsync_folder, remove_orphans, temp_name, write_text_atomic,
)
from recipe.forge.runs.run_folder import is_checkpoint_folder
from recipe.forge.runs.torch_files import load_tensors
from recipe.forge.runs.write_faults import writing

LATEST = "latest_checkpointed_iteration.txt"
STATE = "trainer_state.json"
RNG = "rng.json"
STEP_FOLDER = re.compile(r"global_step_(\d+)")


def checkpoint_dir(output_dir: str | Path, iteration: int) -> Path:
    return Path(output_dir) / f"global_step_{iteration}"


def is_complete(path: Path) -> bool:
    return (path / STATE).is_file()


def _read_marker(output_dir: Path) -> int | None:
    """The iteration the marker names, or None (absent, empty or not a number: warned)."""
    marker = output_dir / LATEST
    if not marker.exists():
        return None
    text = marker.read_text(errors="replace").strip()
    if not text.isdigit():
        warnings.warn(f"{marker} holds {text[:40]!r}, not an iteration number; looking for checkpoints instead")
        return None
    return int(text)


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The checkpoint the marker names when it is complete, else the newest complete one (warned); None when
    there is no checkpoint at all.

    Raises CheckpointError when checkpoint folders (or the marker) exist but none is complete: starting over
    would overwrite the run's metrics and checkpoints."""
    output_dir = Path(output_dir)
    named = _read_marker(output_dir)
    folders = _step_folders(output_dir)
    if named is not None and is_complete(checkpoint_dir(output_dir, named)):
        return checkpoint_dir(output_dir, named)
    complete = [p for _, p in folders if is_complete(p)]
    if complete:
        if named is not None:
            warnings.warn(f"{output_dir / LATEST} names iteration {named}, which is not a complete checkpoint; "
                          f"resuming from the newest complete one, {complete[-1].name}")
        return complete[-1]
    if folders or (output_dir / LATEST).exists():
        raise CheckpointError(
            f"{output_dir} holds checkpoint folders or a {LATEST} but no complete checkpoint (a folder with "
            f"{STATE}); refusing to start over, which would overwrite this run. Resume one explicitly "
            "(trainer.resume_mode=resume_path), or choose another trainer.default_local_dir or resume_mode=disable")
    return None


def refuse_fresh_start(output_dir: str | Path) -> None:
    """For an engine whose own code picks the checkpoint from the marker (verl starts over when the marker is
    missing or names a missing folder): raise CheckpointError when checkpoint folders exist but the marker
    does not name one of them, instead of letting the run start over and overwrite them."""
    output_dir = Path(output_dir)
    folders = sorted(p.name for p in output_dir.glob("global_step_*") if p.is_dir() and STEP_FOLDER.fullmatch(p.name))
    if not folders:
        return
    named = _read_marker(output_dir)
    if named is None or not checkpoint_dir(output_dir, named).is_dir():
        raise CheckpointError(
            f"{output_dir} holds {folders} but {LATEST} does not name one of them; refusing to start over, which "
            "would overwrite this run. Resume one explicitly (trainer.resume_mode=resume_path "
            "trainer.resume_from_path=<folder>), or choose another trainer.default_local_dir or resume_mode=disable")


def checkpoint_to_resume(output_dir: str | Path, resume_mode: str, resume_from_path: str | None) -> Path | None:
    """The checkpoint ``trainer.resume_mode`` asks for: none (``disable``, or ``auto`` with no checkpoint yet),
    the newest complete one (``auto``) or ``trainer.resume_from_path`` (``resume_path``)."""
    if resume_mode == "disable":
        return None
    return Path(resume_from_path) if resume_mode == "resume_path" else latest_checkpoint(output_dir)


# RNG states as JSON ---------------------------------------------------------------------------------------------

def _bytes(tensor: torch.Tensor) -> str:
    return base64.b64encode(tensor.numpy().tobytes()).decode("ascii")


def _tensor(text: Any, what: str) -> torch.Tensor:
    if not isinstance(text, str):
        raise CheckpointError(f"{RNG}: {what} must be a base64 string")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as exc:
        raise CheckpointError(f"{RNG}: {what} is not valid base64") from exc
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


def _plain(value: Any) -> Any:
    """numpy arrays and scalars inside an RNG state -> JSON lists and numbers."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def capture_rng(generators: dict[str, Any]) -> dict[str, Any]:
    """JSON-ready states of the global RNGs plus named torch.Generator / numpy Generator objects."""
    version, internal, gauss = random.getstate()
    state = {
        "python": {"version": version, "internal": list(internal), "gauss": gauss},
        "numpy": _plain(np.random.get_state(legacy=False)),
        "torch": _bytes(torch.get_rng_state()),
        "cuda": [_bytes(s) for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else None,
    }
    for name, gen in generators.items():
        state[name] = _bytes(gen.get_state()) if isinstance(gen, torch.Generator) else _plain(gen.bit_generator.state)
    return state


def _numpy_global(state: Any) -> dict[str, Any]:
    if not isinstance(state, dict) or not isinstance(state.get("state"), dict):
        raise CheckpointError(f"{RNG}: numpy state must be an object with a 'state' object")
    key = state["state"].get("key")
    if not isinstance(key, list) or len(key) != 624:
        raise CheckpointError(f"{RNG}: numpy state.key must be a list of 624 integers")
    return {**state, "state": {**state["state"], "key": np.asarray(key, dtype=np.uint32)}}


def prepare_rng(state: Any, generators: dict[str, Any]) -> Callable[[], None]:
    """Check :func:`capture_rng`'s ``state`` against ``generators`` (CheckpointError naming the fault) and return
    the function that sets every RNG from it: nothing is set unless all of the state is usable."""
    if not isinstance(state, dict):
        raise CheckpointError(f"{RNG} must hold an object")
    missing = [k for k in ("python", "numpy", "torch", *generators) if k not in state]
    if missing:
        raise CheckpointError(f"{RNG} lacks the states {missing}")
    py = state["python"]
    internal = py.get("internal") if isinstance(py, dict) else None
    if not isinstance(internal, list) or len(internal) != 625 or not all(type(v) is int for v in internal):
        raise CheckpointError(f"{RNG}: python.internal must be a list of 625 integers")
    python_rng = random.Random()
    try:
        python_rng.setstate((py.get("version"), tuple(internal), py.get("gauss")))
        numpy_state = _numpy_global(state["numpy"])
        np.random.RandomState().set_state(numpy_state)
        torch_state = _tensor(state["torch"], "torch")
        torch.Generator().set_state(torch_state)
        cuda = [_tensor(s, "cuda") for s in state.get("cuda") or []]
        named: dict[str, Any] = {}
        for name, gen in generators.items():
            if isinstance(gen, torch.Generator):
                named[name] = _tensor(state[name], name)
                torch.Generator().set_state(named[name])
            else:
                named[name] = state[name]
                type(gen.bit_generator)().state = named[name]
    except CheckpointError:
        raise
    except (TypeError, ValueError, KeyError, RuntimeError, OverflowError) as exc:
        raise CheckpointError(f"{RNG} holds an unusable RNG state ({type(exc).__name__}: {exc})") from exc

    def apply() -> None:
        random.setstate(python_rng.getstate())
        np.random.set_state(numpy_state)
        torch.set_rng_state(torch_state)
        if cuda and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(cuda)
        for name, gen in generators.items():
            if isinstance(gen, torch.Generator):
                gen.set_state(named[name])
            else:
                gen.bit_generator.state = named[name]

    return apply


def restore_rng(state: Any, generators: dict[str, Any]) -> None:
    prepare_rng(state, generators)()


# save / load ----------------------------------------------------------------------------------------------------

def save_checkpoint(output_dir: str | Path, iteration: int, *, policy=None, optimizer=None, rng: dict[str, Any],
                    critic=None, critic_optimizer=None, experience=None, extra: dict | None = None) -> Path:
    """Write the checkpoint of ``iteration`` (see the module docstring); returns its folder.

    A full disk, a quota, a read-only or forbidden folder is a RunFolderError of one line naming the checkpoint
    and the fault; nothing of the failed checkpoint is kept and the earlier ones are untouched. A folder of the
    checkpoint's name that is not a checkpoint is refused (CheckpointError), never removed."""
    output_dir = Path(output_dir)
    path = checkpoint_dir(output_dir, iteration)
    if path.exists() and not (path.is_dir() and is_checkpoint_folder(path)):
        raise CheckpointError(f"{path} is not a checkpoint (no {STATE}); refusing to replace it with the checkpoint "
                              "of this run: move it away, or choose another trainer.default_local_dir")
    previous = _newest_complete_other_than(output_dir, path)
    intact = (f"; the previous checkpoint {previous} is intact (trainer.resume_mode=auto resumes from it)"
              if previous else "; no earlier checkpoint")
    with writing(f"the checkpoint of iteration {iteration}", path, after=intact):
        output_dir.mkdir(parents=True, exist_ok=True)
        remove_orphans(output_dir, path.name)
        staging = output_dir / temp_name(path.name)
        staging.mkdir()
        try:
            if policy is not None:
                policy.save(staging / "policy")
            if optimizer is not None:
                torch.save(optimizer.state_dict(), staging / "optimizer.pt")
            if critic is not None:
                torch.save({"critic": critic.state_dict(), "optimizer": critic_optimizer.state_dict()},
                           staging / "critic.pt")
            if experience is not None:
                experience.save(staging / "library")
            (staging / RNG).write_text(json.dumps(capture_rng(rng)))
            write_text_atomic(staging / STATE, json.dumps({"iteration": iteration, **(extra or {})}))
            _replace_folder(staging, path)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        write_text_atomic(output_dir / LATEST, str(iteration))
    return path


def _replace_folder(staging: Path, path: Path) -> None:
    """Rename the complete ``staging`` folder to ``path``; an existing ``path`` (a re-save) is moved aside first,
    so ``path`` is at every moment complete or absent (absent: a resume takes the newest other checkpoint)."""
    old = None
    if path.exists():
        old = path.parent / temp_name(path.name)
        os.rename(path, old)
    os.rename(staging, path)
    fsync_folder(path.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _newest_complete_other_than(output_dir: Path, path: Path) -> str | None:
    folders = [p for _, p in _step_folders(output_dir) if p != path and is_complete(p)]
    return folders[-1].name if folders else None


def _step_folders(output_dir: Path) -> list[tuple[int, Path]]:
    """The ``global_step_<k>`` folders of ``output_dir``, by iteration."""
    return sorted((int(m.group(1)), p) for p in output_dir.glob("global_step_*")
                  if p.is_dir() and (m := STEP_FOLDER.fullmatch(p.name)))


def prune_checkpoints(output_dir: str | Path, keep: int | None) -> list[Path]:
    """Delete the oldest checkpoints so that the newest ``keep`` remain (``trainer.max_actor_ckpt_to_keep``;
    None: keep all); returns the deleted folders.

    Only complete checkpoints this code wrote (a ``trainer_state.json`` naming the folder's iteration) are
    deleted, never the newest ``keep`` nor the one the marker names; each is renamed to a temporary name
    first, so a kill mid-delete leaves no half checkpoint under a checkpoint's name."""
    if not keep:
        return []
    output_dir = Path(output_dir)
    for leftover in output_dir.glob(f".global_step_*{TEMP_SUFFIX}"):  # renamed by a delete that was killed
        remove_orphans(output_dir, leftover.name[1:].split(".", 1)[0])
    named = _read_marker(output_dir)
    ours = [(k, p) for k, p in _step_folders(output_dir) if _written_here(p, k)]
    deleted = []
    for k, folder in ours[:-keep]:
        if k == named:
            continue
        doomed = output_dir / temp_name(folder.name)
        os.rename(folder, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        deleted.append(folder)
    return deleted


def _written_here(path: Path, iteration: int) -> bool:
    try:
        return read_trainer_state(path)["iteration"] == iteration
    except CheckpointError:
        return False


def _load_json(path: Path) -> Any:
    if not path.is_file():
        old = path.with_suffix(".pt")
        hint = f" (it has {old.name}, written by an older version; pickled files are not loaded)" if old.exists() else ""
        raise CheckpointError(f"{path} is missing{hint}")
    try:
        return read_json(path.read_bytes(), str(path))
    except ValueError as exc:
        raise CheckpointError(f"{path} is not valid JSON ({type(exc).__name__})") from exc


def read_trainer_state(path: str | Path) -> dict[str, Any]:
    """``trainer_state.json`` of a complete checkpoint, with a non-negative integer ``iteration``."""
    path = Path(path)
    if not is_complete(path):
        raise CheckpointError(f"{path} is not a complete checkpoint (no {STATE})")
    state = _load_json(path / STATE)
    if not isinstance(state, dict) or type(state.get("iteration")) is not int or state["iteration"] < 0:
        raise CheckpointError(f"{path / STATE} must hold an object with an integer iteration >= 0")
    return state


def load_checkpoint(path: str | Path, *, policy=None, optimizer=None, rng: dict[str, Any], critic=None,
                    critic_optimizer=None, experience=None) -> dict[str, Any]:
    """Restore everything :func:`save_checkpoint` wrote, in place; returns the trainer state (iteration...).

    Every file is read and checked before anything is restored; a bad file raises CheckpointError. (A state
    that is well-formed but does not fit the model, such as another model's optimizer, is found only while
    restoring; the run stops there with that error.)"""
    path = Path(path)
    state = read_trainer_state(path)
    restore_rngs = prepare_rng(_load_json(path / RNG), rng)
    optimizer_state = load_tensors(path / "optimizer.pt") if optimizer is not None else None
    critic_state = load_tensors(path / "critic.pt") if critic is not None else None
    if critic_state is not None and (not isinstance(critic_state, dict) or set(critic_state) != {"critic", "optimizer"}):
        raise CheckpointError(f"{path / 'critic.pt'} must hold exactly 'critic' and 'optimizer'")
    if policy is not None and not (path / "policy").is_dir():
        raise CheckpointError(f"{path / 'policy'} is missing")
    if experience is not None:
        experience.load(path / "library")  # checks the whole file before it replaces the library
    try:
        if optimizer is not None:
            optimizer.load_state_dict(optimizer_state)
        if critic is not None:
            critic.load_state_dict(critic_state["critic"])
            critic_optimizer.load_state_dict(critic_state["optimizer"])
    except (ValueError, KeyError, TypeError, RuntimeError) as exc:
        raise CheckpointError(f"{path}: the optimizer or critic state does not fit this model ({exc})") from exc
    if policy is not None:
        policy.load_weights(path / "policy")
    restore_rngs()
    return state


def resume_from_checkpoint(output_dir: str | Path, resume_mode: str, resume_from_path: str | None,
                           **parts: Any) -> int:
    """Restore the checkpoint ``trainer.resume_mode`` asks for (:func:`checkpoint_to_resume`) into ``parts``
    (:func:`load_checkpoint`'s keyword arguments); returns the iterations it had done, 0 when starting fresh."""
    path = checkpoint_to_resume(output_dir, resume_mode, resume_from_path)
    if path is None:
        return 0
    return int(load_checkpoint(path, **parts)["iteration"])
