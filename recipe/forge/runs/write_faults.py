"""Failed writes as one line: a full disk, a quota, a file-size limit, a read-only or forbidden folder.

The libraries a run writes through report these faults each in its own way: Python raises ``OSError``
(``[Errno 28] No space left on device``), safetensors a ``SafetensorError`` ("I/O error: No space left on
device (os error 28)"), tokenizers a bare ``Exception`` ("... (os error 28)"), Ray a ``RayTaskError`` whose
cause is one of those. :func:`write_fault` recognises all of them; :func:`writing` turns one raised while
writing a named thing into a :class:`RunFolderError` that names the thing, the path and the fault.
"""

from __future__ import annotations

import errno
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM})
# how Rust libraries (safetensors, tokenizers) and remote tracebacks spell an OS error
_SPELLED = re.compile(r"\(os error (\d+)\)|\[Errno (\d+)\]")


class RunFolderError(RuntimeError):
    """The run folder cannot be used or written: the message names the folder (or file) and the fault."""


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, its causes and contexts, and a Ray task error's remote cause, each once."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [current.__cause__, current.__context__, getattr(current, "cause", None)]


def write_fault(exc: BaseException) -> str | None:
    """The fault's short text (``No space left on device (errno 28)``) when ``exc`` is, or was caused by, a
    write refused by the file system; None for any other error."""
    chain = list(_chain(exc))
    for current in chain:  # an OSError itself names its file (a permission error without one is no file's)
        if isinstance(current, OSError) and current.errno in WRITE_ERRNOS and (
                current.filename or current.errno not in (errno.EACCES, errno.EPERM)):
            at = f" at {current.filename}" if current.filename else ""
            return f"{os.strerror(current.errno)} (errno {current.errno}){at}"
    for current in chain:  # how other libraries and remote tracebacks spell one
        if isinstance(current, OSError):
            continue
        for match in _SPELLED.finditer(str(current)):
            number = int(match.group(1) or match.group(2))
            if number in WRITE_ERRNOS:
                return f"{os.strerror(number)} (errno {number})"
    return None


@contextmanager
def writing(what: str, path: str | os.PathLike, after: str = "", redescribe: bool = True) -> Iterator[None]:
    """Run the block that writes ``what`` (a description; empty: the path says it) to ``path``; a write fault
    raised in it becomes a RunFolderError "cannot write <what> to <path>: <fault>" plus ``after`` (e.g. what
    is still intact). A RunFolderError an inner block (or a Ray actor) raised for a write fault is described
    again (the outer block names what the user asked for) unless ``redescribe`` is false, when its own line is
    kept. Other errors pass unchanged."""
    try:
        yield
    except Exception as exc:
        described, fault = _described(exc), write_fault(exc)
        if described is not None and (not redescribe or fault is None):
            if described is exc:
                raise
            raise RunFolderError(str(described)) from exc  # e.g. raised in a Ray actor: its line, not the traceback
        if fault is None:
            raise
        raise RunFolderError(_message(what, path, fault, after)) from exc


def _described(exc: BaseException) -> RunFolderError | None:
    """The first RunFolderError in ``exc``'s chain (a Ray task error wraps one raised in an actor)."""
    return next((e for e in _chain(exc) if type(e) is RunFolderError), None)


def _message(what: str, path: str | os.PathLike, fault: str | None, after: str) -> str:
    target = f"{what} to {Path(path)}" if what else str(Path(path))
    return f"cannot write {target}: {fault}{after}"
