"""What ``slea-rl eval`` evaluates: a checkpoint of either engine or a plain Hugging Face model folder.

Checkpoints are recognised and checked as ``slea-rl export`` checks them (recipe/forge/runs/checkpoint_source.py):

* an embedded-engine checkpoint: the policy is built from the run config (the model path and LoRA keys it was
  trained with) and the checkpoint's weights loaded into it, as a resume loads them;
* a prompt-only checkpoint: its library, played by the endpoint of the run config's ``trainer.api``;
* a verl checkpoint: the actor's FSDP shards merged by verl's model merger into a temporary Hugging Face folder
  (as ``slea-rl export`` merges them), which is then played like a plain model;
* a Hugging Face model folder (``config.json``, no checkpoint files): that model, no library.

Every other path is refused with one line (:class:`EvalSourceError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from recipe.forge.runs.checkpoint_source import ExportError, inspect_checkpoint


class EvalSourceError(ValueError):
    """A path that is not something ``slea-rl eval`` can evaluate, or a damaged one."""


@dataclass(frozen=True)
class EvalSource:
    kind: str  # local | api | verl | hf
    path: Path
    iteration: int | None  # the checkpoint's iteration (None: a plain model folder)
    library_dir: Path | None  # the saved library, where the checkpoint has one
    policy: Path | None = None  # the embedded engine's policy/ or verl's actor/

    @property
    def run_dir(self) -> Path | None:
        """The run folder a checkpoint belongs to (None for a plain model folder)."""
        return None if self.kind == "hf" else self.path.parent

    @property
    def name(self) -> str:
        return self.path.name


def identify(path: str | Path) -> EvalSource:
    """What ``path`` is (see the module docstring), or EvalSourceError naming why it is none of them."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise EvalSourceError(f"{path}: no such folder (give a checkpoint global_step_<k>/ or a Hugging Face model folder)")
    is_checkpoint = (path / "trainer_state.json").exists() or (path / "actor").is_dir()
    if (path / "config.json").is_file() and not is_checkpoint:
        return EvalSource("hf", path.resolve(), None, None, path.resolve())
    try:
        checkpoint = inspect_checkpoint(path)
    except ExportError as exc:
        raise EvalSourceError(str(exc)) from None
    if checkpoint.engine == "api" and checkpoint.library is None:
        raise EvalSourceError(f"{path}: a prompt-only checkpoint without library/: nothing to evaluate")
    return EvalSource(checkpoint.engine, checkpoint.path, checkpoint.iteration, checkpoint.library, checkpoint.policy)


def library_folder(path: str | Path) -> Path:
    """The saved library of the checkpoint (or library folder) ``path``, for ``--library-from``."""
    path = Path(path).expanduser()
    if (path / "experience_library.json").is_file():
        return path
    for candidate in (path / "library", path / "forge_library"):
        if candidate.exists():
            return candidate
    raise EvalSourceError(f"{path}: holds no library (library/, forge_library/ or experience_library.json)")
