"""How a run starts in its folder, said in one line before any model loads: fresh, resumed from ``global_step_K``,
or already complete; and how it ends (:func:`finish_line`, :func:`interrupted_line`).

:func:`start_run` decides it from ``trainer.resume_mode`` (verl's modes, and verl's default ``auto``), the same way on
every engine:

* ``auto``: resume from the run folder's newest checkpoint (the embedded and prompt-only engines: the one
  ``latest_checkpointed_iteration.txt`` names when it is complete, else the newest complete one; the verl engine:
  the one the marker names, as verl's own loader reads it), else start fresh;
* ``resume_path``: resume from ``trainer.resume_from_path``;
* ``disable``: start fresh.

A run whose checkpoint already holds ``trainer.total_training_steps`` iterations is complete: the command says so
and stops without loading anything (a larger ``trainer.total_training_steps`` continues it). A fresh start in a
folder holding an earlier run's files (metrics, TensorBoard events, checkpoints, the library copy, rollout dumps,
evaluations, verl's task files) first moves them into ``<folder>/earlier_runs/<time>/`` and says so: a second run
never deletes or silently replaces the first. Hydra's records (``hydra/``) and the lock stay where they are.
"""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe.forge.runs.console import say
from recipe.forge.runs.run_folder import METRICS, STEP_FOLDER
from recipe.forge.runs.write_faults import writing

EARLIER_RUNS = "earlier_runs"
LATEST = "latest_checkpointed_iteration.txt"
# a run's own files and folders in its folder, besides its global_step_<k> checkpoints and the configured library
# copy and rollout dumps (when they lie inside the folder)
RUN_FILES = (METRICS, "tensorboard", "wandb_run_id", LATEST, "eval", "forge_tasks", "verl_config.yaml")
ENGINES = {"local": "embedded engine", "api": "prompt-only engine", "verl": "verl engine"}


@dataclass(frozen=True)
class StartPlan:
    """What a run does in its folder: ``resume_from`` (None: fresh) after ``done`` iterations of ``total``."""

    folder: Path
    engine: str
    total: int
    done: int = 0
    resume_from: Path | None = None
    val_only: bool = False
    moved_to: Path | None = None  # where a fresh start moved an earlier run's files

    @property
    def complete(self) -> bool:
        return self.resume_from is not None and self.done >= self.total and not self.val_only

    def banner(self, what: str) -> str:
        engine = ENGINES.get(self.engine, self.engine)
        if self.val_only:
            source = f"the checkpoint {self.resume_from}" if self.resume_from else "the initial policy"
            eval_dir = f"global_step_{self.done}" if self.done else "initial"
            return (f"evaluating {source} (trainer.val_only), {what}, {engine}; writing to "
                    f"{self.folder / 'eval' / eval_dir}")
        if self.complete:
            return (f"the run in {self.folder} is complete: {self.resume_from.name} holds all {self.total} iterations; "
                    "nothing to do (a larger trainer.total_training_steps continues it, trainer.resume_mode=disable "
                    "starts a new run and moves this one aside)")
        if self.resume_from is not None:
            start = f"resuming from {self.resume_from} ({self.done} of {self.total} iterations done)"
        else:
            start = f"starting fresh ({self.total} iterations)"
        return f"{start}: {what}, {engine}; writing to {self.folder}"


def checkpoint_iteration(path: Path) -> int:
    """The iterations a checkpoint holds: its ``trainer_state.json`` (the embedded and prompt-only engines) or its
    folder name (verl's ``global_step_<k>``)."""
    from recipe.forge.runs.checkpoint import read_trainer_state

    if (path / "trainer_state.json").is_file():
        return int(read_trainer_state(path)["iteration"])
    match = STEP_FOLDER.fullmatch(path.name)
    return int(match.group(1)) if match else 0


def verl_checkpoint(folder: Path) -> Path | None:
    """The checkpoint verl's ``resume_mode=auto`` loads: the ``global_step_<k>`` the marker names (CheckpointError
    when checkpoint folders exist that the marker does not name, where verl would start over over them)."""
    from recipe.forge.runs.checkpoint import refuse_fresh_start

    refuse_fresh_start(folder)
    marker = folder / LATEST
    if not marker.is_file():
        return None
    text = marker.read_text(errors="replace").strip()
    path = folder / f"global_step_{text}"
    return path if text.isdigit() and path.is_dir() else None


def resume_point(trainer: Any, engine: str) -> Path | None:
    """The checkpoint ``trainer.resume_mode`` resumes from on ``engine``, None for a fresh start."""
    from recipe.forge.runs.checkpoint import checkpoint_to_resume

    folder = Path(trainer.output_dir)
    if trainer.resume_mode == "disable":
        return None
    if trainer.resume_mode == "resume_path":
        return Path(trainer.resume_from_path)
    if engine == "verl":
        return verl_checkpoint(folder)
    return checkpoint_to_resume(folder, trainer.resume_mode, trainer.resume_from_path)


def earlier_run_files(folder: Path, extra: tuple[str | None, ...] = ()) -> list[Path]:
    """An earlier run's files in ``folder``: :data:`RUN_FILES`, its ``global_step_<k>`` folders and ``extra``
    paths (the library copy, the rollout dumps) where they lie directly inside ``folder``."""
    if not folder.is_dir():
        return []
    names = set(RUN_FILES)
    for path in extra:
        if path and Path(path).resolve().parent == folder.resolve():
            names.add(Path(path).name)
    return sorted(p for p in folder.iterdir() if p.name in names or STEP_FOLDER.fullmatch(p.name))


def move_aside(folder: Path, paths: list[Path]) -> Path:
    """Move ``paths`` (inside ``folder``) into a new ``folder/earlier_runs/<time>/``; returns it."""
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    target = folder / EARLIER_RUNS / stamp
    suffix = 1
    while target.exists():
        suffix += 1
        target = folder / EARLIER_RUNS / f"{stamp}_{suffix}"
    with writing("the earlier run's files", target):
        target.mkdir(parents=True)
        for path in paths:
            os.rename(path, target / path.name)
    return target


def start_run(run: Any) -> StartPlan:
    """Decide how ``run`` (a RunConfig) starts in its folder, move an earlier run's files aside on a fresh start,
    and say it in one line (see the module docstring). The caller holds the run folder."""
    t = run.trainer
    folder = Path(t.output_dir)
    resume_from = resume_point(t, run.engine)
    done = checkpoint_iteration(resume_from) if resume_from is not None else 0
    plan = StartPlan(folder=folder, engine=run.engine, total=t.total_iterations, done=done, resume_from=resume_from,
                     val_only=t.val_only)
    if resume_from is None and not t.val_only:
        library_copy = getattr(getattr(run.algorithm, "forge", None), "checkpoint_dir", None)
        earlier = earlier_run_files(folder, (library_copy, t.rollout_data_dir))
        if earlier:
            moved = move_aside(folder, earlier)
            say(f"{folder} held an earlier run ({', '.join(p.name for p in earlier)}): moved to {moved}; nothing "
                "was deleted")
            plan = StartPlan(**{**plan.__dict__, "moved_to": moved})
    say(plan.banner(f"{run.algorithm.adv_estimator} on {run.env.env_name}"))
    return plan


# the end of a run ------------------------------------------------------------------------------------------------

def saved_state(folder: Path) -> str:
    """What the run folder holds now: its newest complete checkpoint and the iterations in metrics.jsonl."""
    checkpoints = sorted((int(m.group(1)), p.name) for p in folder.glob("global_step_*")
                         if p.is_dir() and (m := STEP_FOLDER.fullmatch(p.name)) and _is_whole(p))
    logged = _logged_iterations(folder / METRICS)
    held = f"{checkpoints[-1][1]} is the newest checkpoint" if checkpoints else "no checkpoint yet"
    lines = f"metrics.jsonl holds iterations up to {max(logged)}" if logged else "no metrics yet"
    return f"{held}, {lines} ({folder})"


def _is_whole(path: Path) -> bool:
    from recipe.forge.runs.run_folder import is_checkpoint_folder

    return is_checkpoint_folder(path)


def _logged_iterations(path: Path) -> list[int]:
    from recipe.forge.runs.tracking import read_metrics

    if not path.is_file():
        return []
    return [int(r["iteration"]) for r in read_metrics(path) if isinstance(r.get("iteration"), (int, float))]


def finish_line(folder: str | os.PathLike, history: list[dict[str, float]], seconds: float) -> str:
    """The last line of a finished run: its time, what it saved, and the last validation's success rates."""
    minutes, rest = divmod(int(round(seconds)), 60)
    line = f"done in {minutes} min {rest} s: {saved_state(Path(folder))}"
    validated = [h for h in history if "val/success_rate" in h]
    if validated:
        last = validated[-1]
        line += f"; validation after iteration {int(last['iteration'])}: success {last['val/success_rate']:.3f}"
        if "val_no_library/success_rate" in last:
            line += f" with the library, {last['val_no_library/success_rate']:.3f} without"
    return line


def continue_command(argv: list[str]) -> str:
    """The command that continues an interrupted run: the same one (``resume_mode=auto`` is the default), less the
    search path main_forge.main adds and a ``disable`` or ``resume_path`` resume mode (and its path)."""
    program = ["slea-rl"] if Path(argv[0]).name == "slea-rl" else ["python", "-m", "recipe.forge.main_forge"]
    dropped = ("hydra.searchpath=", "trainer.resume_mode=", "trainer.resume_from_path=")
    return shlex.join(program + [a for a in argv[1:] if not a.startswith(dropped)])


def interrupted_line(folder: str | os.PathLike, argv: list[str]) -> str:
    """The one line a run stopped by Ctrl-C ends with: what it saved and the command that continues it."""
    return (f"interrupted: {saved_state(Path(folder))}; continue with the same command (it resumes from the newest "
            f"checkpoint): {continue_command(argv)}")
