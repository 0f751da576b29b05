"""Torch checkpoint files (``*.pt``) read without running code, on every command and every engine.

``torch.load(weights_only=False)`` unpickles whatever a file holds, and a pickle may call any function: loading a
received checkpoint that way runs its author's code. verl's model merger and its FSDP checkpoint manager load
their shards that way. Here every ``*.pt`` is read with torch's restricted unpickler (``weights_only=True``):
tensors (DTensors with their mesh and placements), plain containers and numbers, and :data:`NUMPY_GLOBALS`, the
numpy array pieces of the RNG states verl saves in ``extra_state_*.pt``. Anything else is refused before it is
built, naming the file and what it asked for.

* :func:`load_tensors`: our own reads (the embedded engine's optimizer and critic state);
* :func:`refuse_code`: the check of a file a library will load, before it loads it: CheckpointError naming the
  file and the imports its pickle asks for beyond the allowed ones (read from the pickle, no tensor data loaded);
* :func:`weights_only_loads`: a block in which every ``torch.load`` of this process, a library's
  ``weights_only=False`` included, uses the restricted unpickler (torch's own ``TORCH_FORCE_WEIGHTS_ONLY_LOAD``);
  :func:`restrict_torch_loads` the same for the rest of a command (``slea-rl``, ``eval``, ``export``) and the
  processes it starts;
* :data:`WORKER_ENV`: the same switch for the Ray processes of a verl run (its runtime_env), whose checkpoint
  manager loads the shards of a resume; :func:`allow_checkpoint_globals` runs in each of them (verl's plugin).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Iterator

from recipe.forge.runs.durable import CheckpointError

FORCE = "TORCH_FORCE_WEIGHTS_ONLY_LOAD"
WORKER_ENV = {FORCE: "1"}


def numpy_globals() -> list[tuple[Any, str]]:
    """numpy's array rebuild function and its array and dtype classes (what ``np.random.get_state()`` pickles to),
    under the names numpy 2 and numpy 1 pickle them by."""
    import numpy as np

    reconstruct = np.zeros(1).__reduce__()[0]  # numpy's _reconstruct, wherever this version keeps it
    dtype_classes = {type(np.dtype(code)) for code in "?bBhHiIlLqQefdgFDG"}  # numpy 2's dtypes.UInt32DType, ...
    return [(reconstruct, "numpy._core.multiarray._reconstruct"), (reconstruct, "numpy.core.multiarray._reconstruct"),
            (np.ndarray, "numpy.ndarray"), (np.dtype, "numpy.dtype"), *sorted(dtype_classes, key=str)]


def allow_checkpoint_globals() -> None:
    """Let the restricted unpickler build what verl's checkpoints hold: DTensors (torch registers them when
    ``torch.distributed.tensor`` is imported) and :func:`numpy_globals`."""
    import torch
    import torch.distributed.tensor  # noqa: F401  registers DTensor, DeviceMesh and placements as safe

    torch.serialization.add_safe_globals(numpy_globals())


def _why(exc: BaseException) -> str:
    """The line of torch's refusal that says what the file asked for (its message is a page of advice)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    named = [line for line in lines if "GLOBAL" in line or "but got" in line]
    return (named or lines or [type(exc).__name__])[0][:300]


def refuse_code(path: str | os.PathLike) -> None:
    """CheckpointError unless ``path`` is a torch file whose pickle imports only what :func:`load_tensors` allows
    (a static read of its ``data.pkl``: no tensor data is loaded, nothing is built)."""
    import torch

    allow_checkpoint_globals()
    path = Path(path)
    try:
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
    except Exception as exc:  # not a torch zip file, a damaged archive, a damaged pickle
        raise CheckpointError(f"{path} is not a readable torch checkpoint file ({type(exc).__name__}: "
                              f"{_why(exc)})") from None
    if unsafe:
        raise CheckpointError(f"{path} asks to import {', '.join(sorted(unsafe)[:5])} when loaded, which a checkpoint "
                              "of weights never needs: refused (loading it could run code)")


def load_tensors(path: str | os.PathLike) -> Any:
    """The content of the torch file ``path``: tensors, plain containers, numbers (CheckpointError naming the
    file for anything else, a missing file or a damaged one)."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} is missing")
    allow_checkpoint_globals()
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError... for foreign content
        raise CheckpointError(f"{path} cannot be read as plain tensors ({type(exc).__name__}: "
                              f"{_why(exc)}); it is not loaded") from None


def restrict_torch_loads() -> None:
    """From now on every ``torch.load`` of this process and of the processes it starts uses the restricted
    unpickler (torch's opposite switch, which would make every load fail beside this one, is dropped)."""
    os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    os.environ[FORCE] = "1"


@contextlib.contextmanager
def weights_only_loads() -> Iterator[None]:
    """Within the block every ``torch.load`` of this process reads with the restricted unpickler, whatever its
    ``weights_only`` argument says (for libraries that pass ``weights_only=False``)."""
    allow_checkpoint_globals()
    before = os.environ.get(FORCE)
    os.environ[FORCE] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(FORCE, None)
        else:
            os.environ[FORCE] = before
