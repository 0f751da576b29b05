"""The training loop of the in-process engines (the embedded trainer and the prompt-only runner): resume,
iterate, validate and checkpoint on schedule, log.

An engine gives :func:`fit` four things (:class:`IterativeEngine`): ``resume()`` (iterations already done),
``train_iteration(i)`` (one iteration's metrics), ``validate()`` (held-out metrics, with and without the library)
and ``save(done)`` (after which the oldest checkpoints beyond ``trainer.max_actor_ckpt_to_keep`` are deleted);
its ``iteration`` attribute is the number of iterations done, which a validation pass runs after and names its
dump by.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

from tqdm.auto import tqdm

from recipe.forge.runs.console import say
from recipe.forge.run_config import RunConfig
from recipe.forge.runs.run_start import StartPlan, finish_line, start_run


class IterativeEngine(Protocol):
    iteration: int

    def resume(self) -> int: ...

    def train_iteration(self, iteration: int) -> dict[str, float]: ...

    def validate(self) -> dict[str, float]: ...

    def save(self, iteration: int) -> object: ...


def is_due(done: int, every: int, total: int) -> bool:
    """Whether a periodic action (validation ``test_freq``, checkpoint ``save_freq``) runs after iteration ``done``
    of ``total``: every ``every`` iterations and after the last one; never when ``every`` <= 0."""
    return every > 0 and (done % every == 0 or done == total)


def fit(engine: IterativeEngine, run: RunConfig, description: str, plan: StartPlan | None = None
        ) -> list[dict[str, float]]:
    """Train ``engine`` to ``trainer.total_training_steps`` iterations; returns the metrics this process logged.

    ``plan``: how the run starts (recipe/forge/runs/run_start.py; decided, and said, here when None). With
    ``trainer.val_only`` it only evaluates the restored state (:func:`evaluate_only`). The run folder is held
    for the whole fit (recipe/forge/runs/run_folder.py): a second fit on it, in this process or another, is refused."""
    from recipe.forge.runs.run_folder import own_run_folder

    with own_run_folder(run.trainer.output_dir):
        plan = plan or start_run(run)
        if plan.complete:
            return []
        started = time.perf_counter()
        history = _fit(engine, run, description)
        if not run.trainer.val_only:
            say(finish_line(run.trainer.output_dir, history, time.perf_counter() - started))
        return history


def _fit(engine: IterativeEngine, run: RunConfig, description: str) -> list[dict[str, float]]:
    from recipe.forge.runs.checkpoint import prune_checkpoints
    from recipe.forge.runs.tracking import MetricsTracker
    from recipe.forge.runs.validation import evaluate_only, library_effect

    t = run.trainer
    start = engine.iteration = engine.resume()
    if t.val_only:
        return evaluate_only(t, start, engine.validate, run.composed)
    tracker = MetricsTracker(Path(t.output_dir), t.loggers, t.project_name, t.experiment_name, run.composed,
                             resume_after=start if start > 0 else None)
    history = []
    if start == 0 and t.val_before_train and t.test_freq > 0:
        history.append({"iteration": 0, **engine.validate()})
        tracker.log(0, history[-1])
    for iteration in tqdm(range(start, t.total_iterations), desc=description, initial=start,
                          total=t.total_iterations, disable=not run.local.progress):
        started = time.perf_counter()
        metrics = engine.train_iteration(iteration)
        done = engine.iteration = iteration + 1
        if is_due(done, t.test_freq, t.total_iterations):
            metrics.update(engine.validate())
            effect = library_effect(metrics)
            if effect is not None:
                tqdm.write(f"iteration {done}: {effect}")
        metrics["timing_s/step"] = time.perf_counter() - started
        tracker.log(done, metrics)
        history.append({"iteration": done, **metrics})
        if is_due(done, t.save_freq, t.total_iterations):
            engine.save(done)
            prune_checkpoints(t.output_dir, t.max_ckpt_to_keep)
        if done == t.total_iterations:
            save_library_copy(getattr(engine, "experience", None), run.algorithm, done)
    tracker.close()
    return history


def save_library_copy(experience, algorithm, done: int) -> None:
    """The library copy (``algorithm.forge.checkpoint_dir``) after a run's last iteration: evolution writes it every
    ``library_save_freq`` iterations, so a run whose length is not a multiple of that would leave an older copy
    (or, shorter than it, none)."""
    forge = algorithm.forge
    if experience is not None and forge.checkpoint_dir and done % forge.library_save_freq:
        experience.save(forge.checkpoint_dir)
