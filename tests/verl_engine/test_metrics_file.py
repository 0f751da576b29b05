"""metrics.jsonl on the verl engine (recipe/forge/engines/verl/metrics_file.py): verl's Tracking still gets every
step, and the file follows the embedded engine's rules. verl's own file logger emptied the file on a resume
(tests/verl_engine/test_cpu_end_to_end.py resumes a real run and checks steps 1..3)."""

from __future__ import annotations

import json

from verl.utils.tracking import Tracking

from recipe.forge.engines.verl.metrics_file import MetricsFileTee, metrics_file_tracker


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_steps(out, steps, resumed_at=0, val_only=False):
    tee = MetricsFileTee(Tracking("p", "e", default_backend=["console"]), metrics_file_tracker(str(out), resumed_at, val_only))
    for step in steps:
        tee.log(data={"actor/grad_norm": step / 10, "note": "not a number"}, step=step)


def test_a_fresh_run_writes_one_record_per_step_and_verl_still_logs(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 7}\n')  # a previous run's, started afresh
    run_steps(tmp_path, [1, 2])
    assert lines(tmp_path / "metrics.jsonl") == [{"iteration": 1, "actor/grad_norm": 0.1},
                                                  {"iteration": 2, "actor/grad_norm": 0.2}]
    assert "actor/grad_norm" in capsys.readouterr().out  # verl's console backend got the steps


def test_a_resume_keeps_the_steps_before_it_and_drops_the_rerun_ones(tmp_path):
    run_steps(tmp_path, [1, 2, 3])  # killed after step 3, the checkpoint is step 2
    run_steps(tmp_path, [3, 4], resumed_at=2)
    assert [r["iteration"] for r in lines(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]


def test_an_evaluation_of_a_checkpoint_leaves_the_training_history_alone(tmp_path):
    run_steps(tmp_path, [1, 2])
    before = (tmp_path / "metrics.jsonl").read_text()
    run_steps(tmp_path, [2], resumed_at=2, val_only=True)
    assert (tmp_path / "metrics.jsonl").read_text() == before
    assert [r["iteration"] for r in lines(tmp_path / "eval" / "global_step_2" / "metrics.jsonl")] == [2]


def test_tensorboard_goes_to_the_run_folder_when_the_run_asks_for_it(tmp_path):
    from omegaconf import OmegaConf

    trainer = OmegaConf.create({"slea_rl_loggers": ["console", "jsonl", "tensorboard"]})
    tee = MetricsFileTee(Tracking("p", "e", default_backend=[]), metrics_file_tracker(str(tmp_path), 0, False, trainer))
    tee.log(data={"actor/grad_norm": 0.5}, step=1)
    tee.tracker.close()
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    untold = tmp_path / "plain"
    metrics_file_tracker(str(untold), 0, False, OmegaConf.create({"slea_rl_loggers": ["jsonl"]})).log(1, {"a": 1.0})
    assert not (untold / "tensorboard").exists()


def test_the_drivers_console_prints_each_new_iteration_once_and_waits_for_a_whole_line(tmp_path, capsys):
    from recipe.forge.engines.verl.driver_console import MetricsConsole

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 1, "success_rate": 0.5}\n')
    console = MetricsConsole(str(tmp_path), after=1)  # resumed at 1: iteration 1 was shown by the first run
    with path.open("a") as handle:
        handle.write('{"iteration": 2, "success_rate": 0.25}\n{"iter')
    console.show_new()
    assert capsys.readouterr().out.splitlines() == ["[iter 2] success_rate=0.25"]
    with path.open("a") as handle:  # the torn line completed, a validation-only record without numbers added
        handle.write('ation": 3, "success_rate": 1, "episode_reward/mean": -1.5, "note": "x"}\n')
    console.show_new()
    console.show_new()
    assert capsys.readouterr().out.splitlines() == ["[iter 3] success_rate=1  episode_reward/mean=-1.5"]


def test_the_drivers_console_never_shows_an_interrupted_runs_lines_past_the_checkpoint(tmp_path, capsys):
    from recipe.forge.engines.verl.driver_console import MetricsConsole

    path = tmp_path / "metrics.jsonl"
    kept = '{"iteration": 1, "success_rate": 0.5}\n{"iteration": 2, "success_rate": 0.25}\n'
    path.write_text(kept + '{"iteration": 3, "success_rate": 0.0}\n')  # killed after 3, checkpoint 2
    console = MetricsConsole(str(tmp_path), after=2)
    console.show_new()  # before the trainer dropped the rerun line
    path.write_text(kept)  # the trainer starts: iteration 3 is dropped, then run again
    console.show_new()
    with path.open("a") as handle:
        handle.write('{"iteration": 3, "success_rate": 0.75}\n')
    console.show_new()
    assert capsys.readouterr().out.splitlines() == ["[iter 3] success_rate=0.75"]

