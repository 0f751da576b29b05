"""Validation passes: held-out tasks with the library and, for SLEA-RL, the same tasks without it, so the library's
contribution shows in the metrics. The embedded trainer and prompt-only mode run them here; the verl engine runs
the same two passes through verl's own validation and reports them with :func:`pass_metrics` too
(recipe/forge/engines/verl/forge_steps.py). With ``trainer.rollout_data_dir`` every pass's steps are dumped
(rollout_dump.py: ``val/<iteration>.jsonl``, ``val_no_library/<iteration>.jsonl``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from agent_system.multi_turn_rollout.protocols import RolloutBatch, SamplingParams
from agent_system.multi_turn_rollout.rollout_loop import rollout_metrics
from recipe.forge.runs.rollout_dump import RolloutDump, shown_entries


def validation_metrics(collector, envs, generator, sampling: SamplingParams, experience=None,
                       tokenizer: Any = None, dump: RolloutDump | None = None,
                       iteration: int = 0) -> dict[str, float]:
    """``val/*`` metrics (with the library when ``experience`` is given, and then the shown lessons' quality,
    ``val/forge/lesson_precision`` ...) and ``val_no_library/*`` (only then); with ``dump``, each pass's steps go to ``<dump dir>/<pass>/<iteration>.jsonl``."""
    runs = [("val", None)]
    if experience is not None:
        from recipe.forge.experience import ExperienceSystem

        # A read-only copy: validation observations must not found clusters in the training index.
        view = ExperienceSystem.from_snapshot(experience.snapshot(), tokenizer=tokenizer)
        runs = [("val", view), ("val_no_library", None)]
    metrics: dict[str, float] = {}
    for prefix, system in runs:
        provider = system.provider if system is not None else None
        batch = collector.collect(envs, generator, sampling, experience_provider=provider, dynamic_sampling=False)
        metrics.update(pass_metrics(prefix, batch, system))
        if dump is not None:
            entries = shown_entries(batch.trajectories, system.library if system is not None else None)
            dump.write(batch.trajectories, iteration, entries, pass_name=prefix)
    return metrics


def pass_metrics(prefix: str, batch: RolloutBatch, system=None) -> dict[str, float]:
    """``<prefix>/*``: a validation pass's episode metrics (success rate, rewards, lengths, valid actions, ...) and,
    for a pass rolled out with ``system``'s experiences, the quality of the lessons it showed the held-out states
    (``<prefix>/forge/lesson_precision`` ..., checked against the environment's expert)."""
    metrics = {f"{prefix}/{k}": v for k, v in rollout_metrics(batch).items()}
    if system is not None:
        metrics.update({f"{prefix}/{k}": v for k, v in system.lesson_quality(batch.steps).items()})
    return metrics


def library_effect(metrics: dict[str, float]) -> str | None:
    """One line on what the library did in a validation (``val/*`` with it, ``val_no_library/*`` without it, on
    the same held-out tasks), or None when ``metrics`` holds no such pair."""
    if "val/success_rate" not in metrics or "val_no_library/success_rate" not in metrics:
        return None
    with_library, without = metrics["val/success_rate"], metrics["val_no_library/success_rate"]
    episodes = int(metrics.get("val/num_trajectories", 0))
    line = (f"validation on {episodes} held-out episodes: success {with_library:.3f} with the library, "
            f"{without:.3f} without it ({with_library - without:+.3f})")
    if "val/forge/lesson_precision" in metrics:
        line += f"; precision of the lessons shown {metrics['val/forge/lesson_precision']:.3f}"
    return line


def evaluation_dir(output_dir: str | Path, iteration: int) -> Path:
    """Where a ``trainer.val_only`` pass of the checkpoint after ``iteration`` writes its metrics."""
    return Path(output_dir) / "eval" / (f"global_step_{iteration}" if iteration else "initial")


def evaluate_only(settings, iteration: int, validate: Callable[[], dict[str, float]],
                  config: dict | None = None) -> list[dict[str, float]]:
    """``trainer.val_only``: one validation pass of the restored checkpoint, logged on its own.

    Metrics go to ``<default_local_dir>/eval/global_step_<iteration>/`` (``eval/initial`` without a
    checkpoint), never into the training run's metrics.jsonl. Returns the one logged entry."""
    from recipe.forge.runs.tracking import MetricsTracker

    tracker = MetricsTracker(evaluation_dir(settings.output_dir, iteration), settings.loggers,
                             settings.project_name, f"{settings.experiment_name}_eval", config)
    metrics = {"iteration": iteration, **validate()}
    tracker.log(iteration, metrics)
    tracker.close()
    return [metrics]
