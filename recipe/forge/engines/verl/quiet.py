"""What keeps the verl engine's console readable: the notes verl and its libraries repeat in every Ray process, or
once per episode, shown once or not at all (docs/distributed.md, "What a run prints").

* :func:`quiet_worker_env`, the environment of every Ray process of a run (main.wired_verl_config adds it, a value the
  run's own ``ray_kwargs.ray_init.runtime_env`` sets winning);
* :func:`each_note_once`, run by the plugin in every process: a warning verl logs each time an agent loop starts (once
  per episode) is shown the first time only.
"""

from __future__ import annotations

import logging
import os

# loggers of verl that log the same note each time an agent loop (one per episode) is built
REPEATING_LOGGERS = ("verl.utils.tokenizer.continuous_token_wiring",)


def quiet_worker_env() -> dict[str, str]:
    """verl's engines package warns once per optional training engine it cannot import (in each process);
    transformers and datasets draw a progress bar per model and task file loaded; TransferQueue warns on every batch
    that its 8 threads exceed a machine's physical cores (it then uses the cores: here it starts there) and logs its
    request statistics every 5 minutes; verl logs its progress notes at INFO. verl's and TransferQueue's logging keep
    the driver's ``VERL_LOGGING_LEVEL`` and ``TQ_PERF_LOG_FLUSH_INTERVAL`` where set."""
    import psutil

    return {"PYTHONWARNINGS": "ignore::UserWarning:verl.workers.engine", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
            "TQ_NUM_THREADS": str(min(8, psutil.cpu_count(logical=False) or 8)),
            "VERL_LOGGING_LEVEL": os.environ.get("VERL_LOGGING_LEVEL", "ERROR"),
            "TQ_PERF_LOG_FLUSH_INTERVAL": os.environ.get("TQ_PERF_LOG_FLUSH_INTERVAL", str(10**9))}


class OncePerMessage(logging.Filter):
    """Lets each distinct message (level and text) of a logger through once in a process."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[int, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.levelno, record.getMessage())
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


def each_note_once() -> None:
    """Give each of :data:`REPEATING_LOGGERS` a :class:`OncePerMessage` filter (once per process)."""
    for name in REPEATING_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, OncePerMessage) for existing in logger.filters):
            logger.addFilter(OncePerMessage())
