"""What a checkpoint folder holds, checked before anything is exported: its engine, iteration, policy and library.

* the embedded engine (``trainer_state.json`` and ``policy/``): ``policy/`` is a Hugging Face model folder
  (``config.json`` and safetensors weights) or a peft LoRA adapter (``adapter_config.json`` and
  ``adapter_model.safetensors``), the library in ``library/``;
* prompt-only mode (``trainer.engine=api``): ``trainer_state.json`` without ``policy/`` and ``optimizer.pt``
  (it trains no weights), the library in ``library/``;
* verl (``actor/``): verl's FSDP shards ``model_world_size_<n>_rank_<r>.pt`` for every rank, its
  ``fsdp_config.json`` and the model's config and tokenizer in ``actor/huggingface/``; the library in
  ``forge_library/``; the iteration is the folder's number (``global_step_<k>``).

Anything else, or a part missing, is an :class:`ExportError` naming the path and what is wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from agent_system.json_input import loads as read_json
from recipe.forge.runs.durable import CheckpointError
from recipe.forge.runs.checkpoint import read_trainer_state
from recipe.forge.experience.store import FILENAME

STEP_FOLDER = re.compile(r"global_step_(\d+)")


class ExportError(RuntimeError):
    """The checkpoint cannot be exported: the message names the path and the fault."""


@dataclass(frozen=True)
class CheckpointSource:
    """A checked checkpoint: ``engine`` is ``local``, ``api`` or ``verl``; ``policy`` the embedded engine's
    ``policy/`` or verl's ``actor/`` (None in prompt-only mode); ``lora`` whether ``policy/`` is an adapter."""

    path: Path
    engine: str
    iteration: int
    policy: Path | None
    lora: bool
    library: Path | None

    @property
    def run(self) -> Path:
        return self.path.parent


def inspect_checkpoint(path: str | Path) -> CheckpointSource:
    """The checked :class:`CheckpointSource` of ``path``; ExportError when it is not a complete checkpoint."""
    path = Path(path).expanduser().resolve()
    if not path.is_dir():
        raise ExportError(f"{path} is not a folder (give a checkpoint folder, <run>/global_step_<k>)")
    if (path / "trainer_state.json").is_file():
        return _embedded(path)
    if (path / "actor").is_dir() or (path / "data.pt").is_file():
        return _verl(path)
    raise ExportError(f"{path} is not a checkpoint (no trainer_state.json of the embedded engine, nor verl's actor/)")


def _library(path: Path, name: str) -> Path | None:
    folder = path / name
    if not folder.exists():
        return None
    if not (folder / FILENAME).is_file():
        raise ExportError(f"{folder} holds no {FILENAME}: the checkpoint is incomplete")
    return folder


def _embedded(path: Path) -> CheckpointSource:
    try:
        iteration = read_trainer_state(path)["iteration"]
    except CheckpointError as exc:
        raise ExportError(str(exc)) from exc
    policy = path / "policy"
    if not policy.is_dir():
        if (path / "optimizer.pt").exists():
            raise ExportError(f"{policy} is missing (the checkpoint has optimizer.pt, so it trained a policy): "
                              "the checkpoint is incomplete")
        return CheckpointSource(path, "api", iteration, None, False, _library(path, "library"))
    if (policy / "adapter_config.json").is_file():
        if not (policy / "adapter_model.safetensors").is_file():
            raise ExportError(f"{policy} has adapter_config.json but no adapter_model.safetensors")
        return CheckpointSource(path, "local", iteration, policy, True, _library(path, "library"))
    if not (policy / "config.json").is_file() or not list(policy.glob("*.safetensors")):
        raise ExportError(f"{policy} is neither a Hugging Face model (config.json and *.safetensors) nor a LoRA "
                          "adapter (adapter_config.json): the checkpoint is incomplete")
    return CheckpointSource(path, "local", iteration, policy, False, _library(path, "library"))


def _verl(path: Path) -> CheckpointSource:
    match = STEP_FOLDER.fullmatch(path.name)
    if match is None:
        raise ExportError(f"{path} looks like a verl checkpoint but is not named global_step_<k> (its iteration)")
    actor = path / "actor"
    if not actor.is_dir():
        raise ExportError(f"{actor} is missing: the verl checkpoint has no policy")
    world_size = _world_size(actor / "fsdp_config.json")
    missing = [f.name for f in (actor / f"model_world_size_{world_size}_rank_{r}.pt" for r in range(world_size))
               if not f.is_file()]
    if missing:
        raise ExportError(f"{actor} lacks the FSDP shards {missing[:4]}: the checkpoint is incomplete")
    if not (actor / "huggingface" / "config.json").is_file():
        raise ExportError(f"{actor / 'huggingface' / 'config.json'} is missing (verl saves the model's config there)")
    return CheckpointSource(path, "verl", int(match.group(1)), actor, False, _library(path, "forge_library"))


def _world_size(config: Path) -> int:
    if not config.is_file():
        raise ExportError(f"{config} is missing: not a verl FSDP checkpoint (Megatron checkpoints are not exported)")
    try:
        size = read_json(config.read_bytes(), str(config)).get("world_size")
    except (ValueError, AttributeError) as exc:
        raise ExportError(f"{config} is not a JSON object ({type(exc).__name__})") from exc
    if type(size) is not int or size < 1:
        raise ExportError(f"{config} has world_size={size!r}, not a positive integer")
    return size
