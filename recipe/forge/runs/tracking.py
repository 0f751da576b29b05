"""Per-iteration metrics to the console, a JSONL file, TensorBoard and Weights & Biases.

The JSONL file (``<output_dir>/metrics.jsonl``, one object per iteration with ``"iteration"``) is always
written: scripts/plot_training.py reads it. TensorBoard and W&B are used when listed in ``trainer.logger``;
W&B only when the ``wandb`` package is installed (otherwise a warning, not a crash). The W&B run id is kept in
``<output_dir>/wandb_run_id``, so a resumed run (``trainer.resume_mode``) continues the same W&B run instead of
starting a new one. ``WANDB_MODE=offline`` works as usual (the run is synced later with ``wandb sync``).

Resuming after iteration ``k`` (``resume_after=k``): JSONL lines of later iterations are dropped (they are rerun)
and TensorBoard is told to purge its events from step ``k + 1`` on, so no step appears twice; a fresh start
deletes the JSONL file and purges every earlier TensorBoard event of the folder (a run killed before its first
checkpoint starts over cleanly). A file that is not a metrics file of a SLEA-RL (or verl) run is never replaced
(recipe/forge/runs/run_folder.py); a full disk is one line naming the file. A torn last line
(a kill or a full disk mid-append) is dropped with a warning instead of making the file unreadable.
"""

from __future__ import annotations

import json
import math
import uuid
import warnings
from pathlib import Path
from typing import Any

from agent_system.json_input import loads as read_json
from recipe.forge.runs.console import say
from recipe.forge.runs.durable import write_text_atomic
from recipe.forge.runs.metric_names import with_current_names
from recipe.forge.runs.run_folder import check_metrics_file
from recipe.forge.runs.write_faults import writing

CONSOLE_KEYS = ("success_rate", "episode_reward/mean", "valid_action_ratio", "episode_length/mean",
                "actor/pg_loss", "forge/library_total_size", "val/success_rate", "val_no_library/success_rate",
                "timing_s/step")


def console_line(iteration: int, metrics: dict[str, Any]) -> str:
    """The short line an iteration prints (:data:`CONSOLE_KEYS` it has); the metrics file holds the full set."""
    shown = "  ".join(f"{k}={float(metrics[k]):.4g}" for k in CONSOLE_KEYS if isinstance(metrics.get(k), (int, float)))
    return f"[iter {iteration}] {shown}"


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a metrics JSONL file, former metric names read as their current ones
    (recipe/forge/runs/metric_names.py); a line that is not a JSON object (torn by a kill mid-append) is dropped with
    a warning naming it."""
    records = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = read_json(line, f"{path}:{number}")
        except ValueError:  # torn, foreign, nested too deeply, an integer of thousands of digits
            record = None
        if not isinstance(record, dict):
            warnings.warn(f"{path}:{number} is not a complete JSON record ({line[:60]!r}); dropped")
            continue
        records.append(with_current_names(record))
    return records


class MetricsTracker:
    def __init__(self, output_dir: str | Path, loggers: list[str], project: str, experiment: str,
                 config: dict[str, Any] | None = None, resume_after: int | None = None):
        """``resume_after``: None starts the run's metrics afresh; an iteration resumes after it (see above)."""
        self.path = Path(output_dir) / "metrics.jsonl"
        with writing("the metrics file", self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
        check_metrics_file(self.path)  # never replace (or rewrite) a file no run of ours wrote
        resume = resume_after is not None
        if resume:
            self._truncate_after(resume_after)
        elif self.path.exists():
            self.path.unlink()
        self.console = "console" in loggers
        self.tensorboard = None
        self.wandb = None
        if "tensorboard" in loggers:
            from torch.utils.tensorboard import SummaryWriter

            # purge: a fresh start hides every earlier event of this folder, a resume those of the rerun steps
            self.tensorboard = SummaryWriter(str(Path(output_dir) / "tensorboard"),
                                             purge_step=resume_after + 1 if resume else 0)
        if "wandb" in loggers:
            try:
                import wandb
            except ImportError:
                warnings.warn("trainer.logger lists wandb but the wandb package is not installed; skipping it")
            else:
                self.wandb = wandb.init(project=project, name=experiment, config=config, resume="allow",
                                        id=self._wandb_run_id(resume))

    def _wandb_run_id(self, resume: bool) -> str:
        """The saved run id when resuming (and one was saved), otherwise a new one, saved for later resumes."""
        id_file = self.path.parent / "wandb_run_id"
        if resume and id_file.exists():
            return id_file.read_text().strip()
        run_id = uuid.uuid4().hex[:12]  # W&B accepts any letters and digits
        write_text_atomic(id_file, run_id + "\n")
        return run_id

    def _truncate_after(self, iteration: int) -> None:
        """Drop JSONL records of iterations after ``iteration`` (they will be rerun) and torn lines."""
        if not self.path.exists():
            return
        kept = [r for r in read_metrics(self.path)
                if isinstance(r.get("iteration"), (int, float)) and r["iteration"] <= iteration]
        write_text_atomic(self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        clean = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(float(v))}
        with writing(f"the metrics of iteration {iteration}", self.path), self.path.open("a") as handle:
            handle.write(json.dumps({"iteration": iteration, **clean}, sort_keys=True) + "\n")
        if self.console:
            say(console_line(iteration, clean), prefix="")
        if self.tensorboard is not None:
            for key, value in clean.items():
                self.tensorboard.add_scalar(key, value, iteration)
            self.tensorboard.flush()
        if self.wandb is not None:
            self.wandb.log(clean, step=iteration)

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.wandb is not None:
            self.wandb.finish()
