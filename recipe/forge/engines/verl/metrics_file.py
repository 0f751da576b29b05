"""``metrics.jsonl`` on the verl engine: the embedded engine's JSONL writer behind verl's Tracking.

verl's own ``file`` backend opens its file with mode "wb", so a resumed run used to erase the history before
it. The forge trainer instead wraps verl's Tracking in a :class:`MetricsFileTee`: every ``log(data, step)`` goes
to verl's backends as before (console, TensorBoard, W&B, ...) and to ``metrics.jsonl`` through the embedded
engine's :class:`~recipe.forge.runs.tracking.MetricsTracker`, so both engines write one format (one
object per iteration, ``"iteration": k``, which scripts/plot_training.py reads) by one set of rules:

* a fresh run starts the file afresh;
* a resume after step k keeps the lines up to k and drops later ones (they are rerun);
* ``trainer.val_only`` writes to ``eval/global_step_<k>/metrics.jsonl`` and leaves the training run's file alone.
"""

from __future__ import annotations

from typing import Any

from recipe.forge.runs.tracking import MetricsTracker
from recipe.forge.runs.validation import evaluation_dir


OWN_LOGGERS_KEY = "slea_rl_loggers"  # trainer.<key>: the loggers this writer serves (main.py moves them here)


def metrics_file_tracker(output_dir: str, resumed_at: int, val_only: bool, trainer: Any = None) -> MetricsTracker:
    """The JSONL writer of a run in ``output_dir`` (``trainer.default_local_dir``) restored at step
    ``resumed_at`` (0: a fresh start); with ``tensorboard`` among ``trainer.slea_rl_loggers``, also TensorBoard in
    ``<output_dir>/tensorboard`` (its rerun steps purged on a resume, as on the embedded engine). The console line of
    each iteration is printed by the driver (main.MetricsConsole), without Ray's process prefix."""
    loggers = [str(name) for name in (trainer.get(OWN_LOGGERS_KEY) or []) if str(name) == "tensorboard"] if trainer else []
    if val_only:
        return MetricsTracker(evaluation_dir(output_dir, resumed_at), loggers, "", "")
    return MetricsTracker(output_dir, loggers, "", "", resume_after=resumed_at if resumed_at > 0 else None)


class MetricsFileTee:
    """verl's Tracking, with each logged step also appended to a MetricsTracker's JSONL file."""

    def __init__(self, tracking: Any, tracker: MetricsTracker):
        self.tracking = tracking
        self.tracker = tracker

    def log(self, data: dict, step: int, **kwargs: Any) -> None:
        self.tracking.log(data=data, step=step, **kwargs)
        self.tracker.log(step, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tracking, name)
