"""The run's own console lines (start banner, iteration metrics, end, interruption): printed, and under the command
line also written to Hydra's log of the run (``<run folder>/hydra/<time>/main_forge.log``) through the
``slea_rl.console`` logger, which forge_trainer.yaml sends to that file only."""

from __future__ import annotations

import logging

PREFIX = "[slea-rl] "
_log = logging.getLogger("slea_rl.console")


def say(line: str, prefix: str = PREFIX) -> None:
    """Print ``prefix + line`` and log ``line`` to the run's log file."""
    print(prefix + line, flush=True)
    _log.info(line)
