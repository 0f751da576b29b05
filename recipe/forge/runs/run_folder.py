"""The run folder (``trainer.default_local_dir``): where it may be, who owns it, what a run may replace in it.

* **Paths** (:func:`check_run_paths`, a start-up config check): ``trainer.project_name`` and
  ``trainer.experiment_name`` are plain names (one path component, not ``.`` or ``..``, no separator or control
  character), and ``trainer.default_local_dir`` never climbs back out of a folder it names (``runs/a/../../x``),
  so the run folder is where the user pointed. The same checks guard Hydra's record of the run
  (:class:`RunPathCheck`), which Hydra writes into the run folder before the run starts.
* **Ownership** (:func:`hold_run_folder`; :func:`own_run_folder` adds the contents check): one run at a time.
  The run holds an advisory lock on ``<folder>/.run.lock`` (``fcntl.lockf``: the kernel releases it when the process ends, however it ends, and a
  forked child does not inherit it) with its pid, host and start time written in; a second run on the folder is
  refused with the holder's pid. A lock file left by a killed run is taken over, with a note. Every engine's
  trainer takes it itself (the in-process engines' fit loop, the verl engine's driver), so a run started from
  Python is held as one started from the command line, which takes it before any model loads.
* **Contents** (:func:`check_run_folder`): a run never deletes or replaces what it did not write. A
  ``global_step_<k>`` folder that is not a checkpoint (neither ours, with ``trainer_state.json``, nor verl's, with
  ``actor/`` or ``data.pt``) and a ``metrics.jsonl`` that is not a metrics file of a SLEA-RL or verl run are
  refused at start-up, whatever ``trainer.resume_mode`` is.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import socket
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from agent_system.config_checks import ConfigError
from agent_system.json_input import loads as read_json
from recipe.forge.runs.write_faults import RunFolderError, writing

LOCK_NAME = ".run.lock"
STEP_FOLDER = re.compile(r"global_step_(\d+)")
METRICS = "metrics.jsonl"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_held: set[str] = set()  # run folders this process holds (a POSIX lock does not stop its own process)
_owners: dict[str, int] = {}  # run folders held by own_run_folder -> the holding thread


# paths ----------------------------------------------------------------------------------------------------------

def check_plain_name(key: str, value: Any) -> None:
    """``value`` must be one path component: not empty, ``.`` or ``..``, without ``/``, ``\\`` or control
    characters (ConfigError naming ``key``)."""
    text = str(value) if value is not None else ""
    if not text or text in (".", "..") or "/" in text or "\\" in text or _CONTROL.search(text) or len(text) > 255:
        raise ConfigError(f"{key}={value!r} is not a plain name; allowed: one folder name (letters, digits, '_', "
                          "'-', '.', ..., without '/', '\\', control characters, and not '.' or '..')")


def check_run_dir(key: str, value: str) -> None:
    """``value`` must not climb back out of a folder it names (a ``..`` after a folder name) nor hold control
    characters: the run folder is then the folder the path spells (a leading ``../`` is the user's own choice)."""
    parts = Path(value).parts
    named = False
    for part in parts:
        if part == "..":
            if named:
                raise ConfigError(f"{key}={value!r} climbs out of the folder it names with '..'; allowed: a path "
                                  "without '..' after a folder name (write the folder it means instead)")
        elif part not in (".", os.sep):
            named = True
    if _CONTROL.search(value):
        raise ConfigError(f"{key}={value!r} holds control characters")


def check_run_paths(project_name: Any, experiment_name: Any, default_local_dir: str) -> None:
    """Every path check of the run folder (see the module docstring); ConfigError naming the key."""
    check_plain_name("trainer.project_name", project_name)
    check_plain_name("trainer.experiment_name", experiment_name)
    check_run_dir("trainer.default_local_dir", default_local_dir)


try:
    from hydra.experimental.callback import Callback
except ImportError:  # Hydra is a dependency; without it there is no command line to guard
    Callback = object  # type: ignore[assignment,misc]


class RunPathCheck(Callback):
    """A Hydra callback (``hydra.callbacks`` in forge_trainer.yaml): the path checks before Hydra creates
    ``hydra.run.dir`` inside the run folder; a bad path ends the command with one line and exit status 2."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        trainer = config.get("trainer") or {}
        try:
            check_run_paths(trainer.get("project_name"), trainer.get("experiment_name"),
                            str(trainer.get("default_local_dir")))
        except ConfigError as exc:
            print(f"config error: {exc}", file=sys.stderr)
            sys.exit(2)


# ownership ------------------------------------------------------------------------------------------------------

def _describe(holder: dict[str, Any]) -> str:
    started = holder.get("started")
    since = ""
    if isinstance(started, (int, float)):
        since = time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(started))
    return f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}{since}"


def _read_holder(fd: int) -> dict[str, Any] | None:
    """What the lock file says about its holder (read through ``fd``: opening the file again and closing it
    would drop this process's POSIX locks on it); None when empty or unreadable."""
    raw = os.pread(fd, 4096, 0)
    try:
        holder = read_json(raw, "the lock file") if raw.strip() else None
    except ValueError:
        return None
    return holder if isinstance(holder, dict) else None


@contextmanager
def hold_run_folder(folder: str | os.PathLike) -> Iterator[Path]:
    """Own ``folder`` (created if missing) for the block; RunFolderError when another run (or this process)
    holds it, naming the folder and the holder's pid. Yields the folder."""
    folder = Path(folder)
    where = folder.resolve()
    path = folder / LOCK_NAME
    key = str(where)
    if key in _held:
        raise RunFolderError(f"run folder {where} is already in use by a run of this process (pid {os.getpid()})")
    with writing("the run folder's lock", path):
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EAGAIN):
                raise
            holder = _read_holder(fd)
            raise RunFolderError(
                f"run folder {where} is in use by another run ({_describe(holder) if holder else 'pid unknown'}); "
                "wait for it to end, or give this run its own trainer.default_local_dir "
                "(or trainer.experiment_name)") from None
        left = _read_holder(fd)
        if left is not None:
            print(f"[slea-rl] run folder {where}: taking over the lock of {_describe(left)}, which ended without "
                  "releasing it", flush=True)
        me = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()})
        with writing("the run folder's lock", path):
            os.ftruncate(fd, 0)
            os.pwrite(fd, me.encode("utf-8"), 0)
        _held.add(key)
        try:
            yield folder
        finally:
            _held.discard(key)
            try:
                os.ftruncate(fd, 0)  # released cleanly: nothing for the next run to take over
            except OSError:
                pass
    finally:
        os.close(fd)  # closing drops the lock


# contents -------------------------------------------------------------------------------------------------------

def is_checkpoint_folder(path: Path) -> bool:
    """Whether ``path`` is a checkpoint a run of this project wrote: the embedded or prompt-only engine's (with
    ``trainer_state.json``) or verl's (with ``actor/`` or ``data.pt``)."""
    return (path / "trainer_state.json").is_file() or (path / "actor").is_dir() or (path / "data.pt").is_file()


def _is_metrics_record(line: str) -> bool:
    try:
        record = read_json(line, "a metrics line")
    except ValueError:
        return False
    return isinstance(record, dict) and ("iteration" in record or {"step", "data"} <= set(record))


def check_metrics_file(path: str | os.PathLike) -> None:
    """RunFolderError when ``path`` exists and is not a metrics file of a SLEA-RL run (``{"iteration": k, ...}``
    lines) or of verl's file logger (``{"step", "data"}`` lines); a torn last line is allowed."""
    path = Path(path)
    if not path.exists():
        return
    if not path.is_file():
        raise RunFolderError(f"{path} is not a file; refusing to replace it (move it away, or choose another "
                             "trainer.default_local_dir)")
    with path.open("rb") as handle:
        lines = [line.decode("utf-8", errors="replace") for line in handle]
    content = [(number, line) for number, line in enumerate(lines, 1) if line.strip()]
    for position, (number, line) in enumerate(content):
        torn_last = position == len(content) - 1 and not line.endswith("\n")
        if not _is_metrics_record(line) and not torn_last:
            raise RunFolderError(
                f"{path} was not written by a SLEA-RL run (line {number} is not a metrics record: {line[:60]!r}); "
                "refusing to replace it: move it away, or choose another trainer.default_local_dir")


def check_run_folder(folder: str | os.PathLike) -> None:
    """RunFolderError naming the first thing in ``folder`` a run would delete or replace without having written
    it: a ``global_step_<k>`` folder that is not a checkpoint, a foreign ``metrics.jsonl``."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    for path in sorted(folder.iterdir()):
        if STEP_FOLDER.fullmatch(path.name) and not (path.is_dir() and is_checkpoint_folder(path)):
            raise RunFolderError(
                f"{path} is named like a checkpoint but is not one (no trainer_state.json, no verl actor/); a run "
                "would delete or overwrite it: move it away, or choose another trainer.default_local_dir")
    check_metrics_file(folder / METRICS)


@contextmanager
def own_run_folder(folder: str | os.PathLike) -> Iterator[Path]:
    """Hold ``folder`` (:func:`hold_run_folder`) and check its contents (:func:`check_run_folder`) for the block: what
    a run takes before it reads or writes anything there. Within a block of the same thread it holds already (the
    command line holds the folder before it builds the trainer, whose fit takes it again) it changes nothing;
    from any other thread or process it is refused with RunFolderError."""
    key = str(Path(folder).resolve())
    if _owners.get(key) == threading.get_ident():
        yield Path(folder)
        return
    with hold_run_folder(folder) as held:
        check_run_folder(held)
        _owners[key] = threading.get_ident()
        try:
            yield held
        finally:
            del _owners[key]
