"""Files that survive a kill at any moment and a second writer in the same folder.

A file is written under a temporary name unique to its writer (``.<name>.<host>.<pid>.<random>.tmp`` in the
target's folder), flushed, fsync'ed and ``os.replace``d onto its final name; then the folder is fsync'ed. A
reader therefore sees the old complete file or the new complete one. Temporaries left by a killed writer are
removed by a later writer only when they name this host and a process that no longer runs: a live writer's
temporaries are never touched.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
from pathlib import Path
from typing import IO, Callable

from recipe.forge.runs.write_faults import writing

TEMP_SUFFIX = ".tmp"


class CheckpointError(RuntimeError):
    """A checkpoint (or a file in one) cannot be used; the message names the file and the fault."""


def _host() -> str:
    return socket.gethostname().replace(".", "_") or "host"


def temp_name(name: str) -> str:
    """A temporary name for ``name`` that no other writer (thread, process or host) picks."""
    return f".{name}.{_host()}.{os.getpid()}.{secrets.token_hex(6)}{TEMP_SUFFIX}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def is_orphan(path: Path, name: str) -> bool:
    """Whether ``path`` is a temporary of ``name`` whose writer was on this host and no longer runs."""
    prefix = f".{name}."
    if not path.name.startswith(prefix) or not path.name.endswith(TEMP_SUFFIX):
        return False
    parts = path.name[len(prefix):-len(TEMP_SUFFIX)].rsplit(".", 2)
    if len(parts) != 3 or parts[0] != _host() or not parts[1].isdigit():
        return False
    return not _pid_alive(int(parts[1]))


def remove_orphans(folder: Path, name: str) -> None:
    """Delete the temporaries of ``name`` in ``folder`` left by killed writers of this host (files or folders)."""
    for path in folder.glob(f".{name}.*{TEMP_SUFFIX}"):
        if is_orphan(path, name):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, write: Callable[[IO[str]], None]) -> Path:
    """Write ``path`` atomically: ``write(handle)`` fills a per-writer temporary text file (UTF-8) that then
    replaces ``path``. Returns the path. A full disk or a read-only folder is a RunFolderError naming ``path``
    (the old file, if any, is left as it was)."""
    target = Path(path)
    with writing("", target):
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_orphans(target.parent, target.name)
        tmp = target.parent / temp_name(target.name)
        try:
            with open(tmp, "w", encoding="utf-8") as handle:
                write(handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_folder(target.parent)
    return target


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    return write_atomic(path, lambda handle: handle.write(text))
