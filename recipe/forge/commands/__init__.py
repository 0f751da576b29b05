"""The commands beside training (``slea-rl eval``, ``slea-rl export``, ``slea-rl-library``,
``slea-rl-trajectories``): each stands on the shared rooms (recipe/forge/runs, recipe/forge/hf,
recipe/forge/experience), never on another command."""

from __future__ import annotations

import logging
import warnings

# what verl's platform manager logs when no accelerator is present (the messages' format strings)
_PLATFORM_FALLBACK_MESSAGES = ("No supported accelerator detected", "Platform '%s' (%s) is registered but not available")


def silence_irrelevant_verl_warnings() -> None:
    """Hide what importing verl prints about back-ends nobody asked for, in this process only.

    verl warns once per optional training engine it cannot import (torchtitan, veomni, automodel, mindspeed,
    megatron) and, on a machine without an accelerator, that it falls back to the nvidia platform. Neither
    matters to the embedded engine, and the distributed engine fails with verl's own error when a back-end it
    was told to use is missing. Ray workers keep verl's warnings."""
    warnings.filterwarnings("ignore", message=r".* engine is not available", category=UserWarning)
    # a filter, not a level: verl's module sets its logger's level when it is imported
    logging.getLogger("verl.plugin.platform.platform_manager").addFilter(_not_a_platform_fallback)


def _not_a_platform_fallback(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_PLATFORM_FALLBACK_MESSAGES)
