"""What ``slea-rl eval`` evaluates: a checkpoint of either engine or a plain Hugging Face model folder.

* an embedded-engine checkpoint ``<run>/global_step_<k>/`` (``trainer_state.json``, ``policy/``, and for forge
  ``library/``): the policy is built from the run config (the model path and LoRA keys it was trained with) and
  the checkpoint's weights loaded into it, as a resume loads them;
* a prompt-only checkpoint (``trainer_state.json`` and ``library/``, no ``policy/``): the library, played by the
  endpoint of the run config's ``trainer.api``;
* a verl checkpoint ``<run>/global_step_<k>/`` (``actor/``, and for forge ``forge_library/``): recognised, and
  refused with the command that merges its FSDP shards into a Hugging Face folder first (``slea-rl export``);
* a Hugging Face model folder (``config.json``): that model, no library.

Every other path is refused with one line (:class:`EvalSourceError`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path


class EvalSourceError(ValueError):
    """A path that is not something ``slea-rl eval`` can evaluate, or a damaged one."""


@dataclass(frozen=True)
class EvalSource:
    kind: str  # local | api | verl | hf
    path: Path
    iteration: int | None  # the checkpoint's iteration (None: a plain model folder)
    library_dir: Path | None  # the saved library, where the checkpoint has one

    @property
    def run_dir(self) -> Path | None:
        """The run folder a checkpoint belongs to (None for a plain model folder)."""
        return None if self.kind == "hf" else self.path.parent

    @property
    def name(self) -> str:
        return self.path.name


STEP_FOLDER = re.compile(r"global_step_(\d+)")


def checkpoint_iteration(path: Path) -> int:
    """The iteration of an embedded or prompt-only checkpoint, from its ``trainer_state.json``."""
    state_file = path / "trainer_state.json"
    try:
        iteration = json.loads(state_file.read_text())["iteration"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EvalSourceError(f"{state_file}: not a readable trainer state ({type(exc).__name__}: {exc})") from None
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
        raise EvalSourceError(f"{state_file}: iteration {iteration!r} is not an integer >= 0")
    return iteration


def identify(path: str | Path) -> EvalSource:
    """What ``path`` is (see the module docstring), or EvalSourceError naming why it is none of them."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise EvalSourceError(f"{path}: no such folder (give a checkpoint global_step_<k>/ or a Hugging Face model folder)")
    library = path / "library"
    if (path / "trainer_state.json").exists():
        iteration = checkpoint_iteration(path)
        kind = "local" if (path / "policy").is_dir() else "api"
        if kind == "api" and not library.is_dir():
            raise EvalSourceError(f"{path}: a checkpoint with neither policy/ nor library/: nothing to evaluate")
        return EvalSource(kind, path, iteration, library if library.is_dir() else None)
    if (path / "actor").is_dir():
        match = STEP_FOLDER.fullmatch(path.name)
        if match is None:
            raise EvalSourceError(f"{path}: a verl checkpoint folder is named global_step_<k>")
        forge_library = path / "forge_library"
        return EvalSource("verl", path, int(match.group(1)), forge_library if forge_library.exists() else None)
    if (path / "config.json").is_file():
        return EvalSource("hf", path, None, None)
    raise EvalSourceError(f"{path}: not a checkpoint (no trainer_state.json, no actor/) nor a Hugging Face model "
                          "folder (no config.json)")


def library_folder(path: str | Path) -> Path:
    """The saved library of the checkpoint (or library folder) ``path``, for ``--library-from``."""
    path = Path(path).expanduser()
    if (path / "experience_library.json").is_file():
        return path
    for candidate in (path / "library", path / "forge_library"):
        if candidate.exists():
            return candidate
    raise EvalSourceError(f"{path}: holds no library (library/, forge_library/ or experience_library.json)")
