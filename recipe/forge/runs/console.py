"""The run's own console lines (start banner, iteration metrics, end, interruption): printed, and under the command
line also written to Hydra's log of the run (``<run folder>/hydra/<time>/main_forge.log``) through the
``slea_rl.console`` logger (:func:`log_to_run_files`)."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

PREFIX = "[slea-rl] "
_log = logging.getLogger("slea_rl.console")
_log.propagate = False  # printed already: never a second time through a console handler
_log.setLevel(logging.INFO)


def log_to_run_files() -> None:
    """Write the console lines also to the log files the root logger writes (Hydra's ``main_forge.log`` of the run,
    under the command line; none with ``hydra/job_logging=disabled``)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and handler not in _log.handlers:
            _log.addHandler(handler)


def say(line: str, prefix: str = PREFIX, stream: TextIO | None = None) -> None:
    """Print ``prefix + line`` (to ``stream``, default stdout) and log ``line`` to the run's log file."""
    print(prefix + line, file=stream or sys.stdout, flush=True)
    _log.info(line)
