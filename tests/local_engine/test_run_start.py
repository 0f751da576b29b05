"""How a run starts in its folder (recipe/forge/runs/run_start.py): resumed by default, complete when it is, an earlier run
moved aside on a fresh start (never deleted), one line each; and a run stopped by Ctrl-C and started again."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from recipe.forge.main_forge import run, validate
from recipe.forge.runs.run_start import continue_command, start_run

pytestmark = pytest.mark.timeout(900)
REPO = Path(__file__).resolve().parents[2]


def write_checkpoint(folder: Path, iteration: int) -> None:
    from recipe.forge.runs.checkpoint import save_checkpoint

    save_checkpoint(folder, iteration, rng={"sampler": torch.Generator().manual_seed(0)})


def plan_of(compose_cfg, run_overrides, folder: Path, *extra: str):
    return start_run(validate(compose_cfg(run_overrides(folder, iterations=4) + list(extra))))


def test_the_default_resumes_from_the_newest_checkpoint_and_says_so(tmp_path, compose_cfg, run_overrides, capsys):
    assert validate(compose_cfg(run_overrides(tmp_path))).trainer.resume_mode == "auto"  # verl's default
    plan = plan_of(compose_cfg, run_overrides, tmp_path)
    assert (plan.resume_from, plan.done, plan.complete) == (None, 0, False)
    assert "starting fresh (4 iterations)" in capsys.readouterr().out
    write_checkpoint(tmp_path, 1)
    write_checkpoint(tmp_path, 2)
    plan = plan_of(compose_cfg, run_overrides, tmp_path)
    assert (plan.resume_from, plan.done, plan.complete) == (tmp_path / "global_step_2", 2, False)
    out = capsys.readouterr().out
    assert f"resuming from {tmp_path / 'global_step_2'} (2 of 4 iterations done)" in out and str(tmp_path) in out


def test_a_finished_run_says_it_is_complete_and_changes_nothing(tmp_path, compose_cfg, run_overrides, capsys):
    write_checkpoint(tmp_path, 4)
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 4}\n')
    before = sorted(p.name for p in tmp_path.iterdir())
    assert run(compose_cfg(run_overrides(tmp_path, iterations=4))) == []
    assert "is complete: global_step_4 holds all 4 iterations" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".run.lock") == before
    # a longer run continues it instead
    assert plan_of(compose_cfg, run_overrides, tmp_path, "trainer.total_training_steps=6").done == 4


def test_a_fresh_start_moves_an_earlier_run_aside_and_deletes_nothing(tmp_path, compose_cfg, run_overrides, capsys):
    write_checkpoint(tmp_path, 2)
    earlier = {"metrics.jsonl": '{"iteration": 1}\n{"iteration": 2}\n', "wandb_run_id": "abc\n",
               "library/experience_library.json": "{}", "tensorboard/events.out.tfevents.1": "e",
               "notes.txt": "mine"}  # the library copy of tiny_run_overrides is <folder>/library
    for name, text in earlier.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    plan = plan_of(compose_cfg, run_overrides, tmp_path, "trainer.resume_mode=disable")
    assert plan.resume_from is None and plan.moved_to is not None and plan.moved_to.parent == tmp_path / "earlier_runs"
    for name, text in earlier.items():
        if name == "notes.txt":  # not a run's file: left where it is
            assert (tmp_path / name).read_text() == text
        else:
            assert (plan.moved_to / name).read_text() == text and not (tmp_path / name).exists()
    assert (plan.moved_to / "global_step_2" / "trainer_state.json").is_file()
    assert not (tmp_path / "latest_checkpointed_iteration.txt").exists()
    out = capsys.readouterr().out
    assert f"moved to {plan.moved_to}; nothing was deleted" in out and "starting fresh" in out
    # a second fresh start gets its own folder
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 1}\n')
    again = plan_of(compose_cfg, run_overrides, tmp_path, "trainer.resume_mode=disable")
    assert again.moved_to != plan.moved_to and (again.moved_to / "metrics.jsonl").is_file()


def test_a_run_killed_before_its_first_checkpoint_keeps_its_metrics_aside(tmp_path, compose_cfg, run_overrides):
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 1}\n')  # resume_mode=auto, but nothing to resume from
    plan = plan_of(compose_cfg, run_overrides, tmp_path)
    assert plan.resume_from is None and (plan.moved_to / "metrics.jsonl").read_text() == '{"iteration": 1}\n'


def test_evaluation_only_moves_nothing(tmp_path, compose_cfg, run_overrides, capsys):
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 1}\n')
    plan = plan_of(compose_cfg, run_overrides, tmp_path, "trainer.val_only=true", "trainer.resume_mode=disable")
    assert plan.moved_to is None and (tmp_path / "metrics.jsonl").is_file()
    assert "evaluating the initial policy (trainer.val_only)" in capsys.readouterr().out


def test_the_verl_engine_resumes_from_the_checkpoint_its_marker_names(tmp_path, compose_cfg, run_overrides):
    from recipe.forge.runs.durable import CheckpointError
    from recipe.forge.runs.run_start import resume_point

    trainer = validate(compose_cfg(run_overrides(tmp_path))).trainer
    assert resume_point(trainer, "verl") is None
    (tmp_path / "global_step_3" / "actor").mkdir(parents=True)  # verl's layout: no trainer_state.json
    with pytest.raises(CheckpointError, match="does not name one of them"):  # verl would start over over it
        resume_point(trainer, "verl")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")
    assert resume_point(trainer, "verl") == tmp_path / "global_step_3"


def test_the_continue_command_is_the_command_itself_resuming():
    argv = ["/x/bin/slea-rl", "+experiment=main_job", "trainer.resume_mode=disable", "hydra.searchpath=[file:///v]"]
    assert continue_command(argv) == "slea-rl +experiment=main_job"
    argv = ["/x/recipe/forge/main_forge.py", "trainer.resume_mode=resume_path", "trainer.resume_from_path=r/global_step_2",
            "data.train_batch_size=2"]
    assert continue_command(argv) == "python -m recipe.forge.main_forge data.train_batch_size=2"


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> str:
    from recipe.forge.hf.tiny import save_tiny_model_dir

    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny_answering"))


def read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_ctrl_c_mid_iteration_then_the_same_command_resumes_keeping_every_earlier_metrics_line(tmp_path,
                                                                                                tiny_model_dir):
    """The command line, as a user runs it: Ctrl-C (SIGINT to the process group) during iteration 3 of 4 ends with one
    line naming what was saved and the command that continues; that command resumes from the newest checkpoint (the
    banner says so), keeps every metrics line up to it byte for byte and finishes the run."""
    folder = tmp_path / "run"
    command = [sys.executable, "-m", "recipe.forge.main_forge", "+experiment=main_job",
               f"actor_rollout_ref.model.path={tiny_model_dir}", "trainer.total_training_steps=4", "trainer.save_freq=1",
               "trainer.test_freq=-1", "trainer.logger=[console,jsonl]", "trainer.local.progress=false",
               f"trainer.default_local_dir={folder}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path, env=env,
                            start_new_session=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("[iter 2]"):  # once checkpoint 2 is written, iteration 3 is under way
            marker = folder / "latest_checkpointed_iteration.txt"
            deadline = time.monotonic() + 120
            while not (marker.is_file() and marker.read_text().strip() == "2") and time.monotonic() < deadline:
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGINT)
            break
    lines += proc.stdout.readlines()
    assert proc.wait(timeout=300) == 130, "".join(lines)
    output = "".join(lines)
    assert "Traceback" not in output, output
    (last,) = [line for line in lines if "interrupted:" in line]
    newest = max(int(p.name.split("_")[-1]) for p in folder.glob("global_step_*"))
    assert f"global_step_{newest} is the newest checkpoint" in last and newest >= 1
    continue_with = shlex.split(last.split("continue with the same command (it resumes from the newest checkpoint): ")[1])
    assert continue_with[:3] == ["python", "-m", "recipe.forge.main_forge"] and continue_with[3:] == command[3:]
    kept = [line for line in read_lines(folder / "metrics.jsonl") if json.loads(line)["iteration"] <= newest]

    again = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resuming from {folder / f'global_step_{newest}'} ({newest} of 4 iterations done)" in again.stdout
    assert "done in" in again.stdout.splitlines()[-1]
    metrics = read_lines(folder / "metrics.jsonl")
    assert metrics[:newest] == kept and [json.loads(line)["iteration"] for line in metrics] == [1, 2, 3, 4]
    # the run's own lines are also in Hydra's log of each command
    first_log, second_log = [(record / "main_forge.log").read_text() for record in sorted((folder / "hydra").iterdir())]
    assert "starting fresh" in first_log and "interrupted:" in first_log and "[iter 1]" in first_log
    assert "resuming from" in second_log and "[iter 4]" in second_log and "done in" in second_log
