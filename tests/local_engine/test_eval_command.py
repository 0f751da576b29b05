"""``slea-rl eval``: a checkpoint's per-episode outcomes do not depend on the evaluation batch size (greedy and
sampled), the figures are those of the episodes, and bad inputs end with one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from recipe.forge.hf.tiny import save_tiny_model_dir
from recipe.forge.commands.eval.evaluate import main as eval_main
from recipe.forge.main_forge import run

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A forge run of one iteration of a tiny Llama that answers in the action format part of the time, its
    checkpoint and library, and the overrides it was trained with."""
    from tests.local_engine.conftest import compose, tiny_run_overrides

    root = tmp_path_factory.mktemp("eval")
    model = save_tiny_model_dir(root / "model")
    overrides = tiny_run_overrides(root / "run") + [f"actor_rollout_ref.model.path={model}", "trainer.save_freq=1",
                                                    "actor_rollout_ref.actor.use_kl_loss=false"]
    run(compose(overrides))
    return root / "run" / "global_step_1", overrides, model


def evaluated(tmp_path, checkpoint, batch_size: int, temperature: float, *extra: str,
              source: str | None = None, tasks: int = 3) -> tuple[dict, list[dict]]:
    folder, overrides, _ = checkpoint
    out = tmp_path / f"b{batch_size}_t{temperature}"
    argv = [source or str(folder), "--tasks", str(tasks), "--samples", "3", "--batch-size", str(batch_size), "--temperature",
            str(temperature), "--out", str(out), "--no-progress", *extra, *overrides]
    assert eval_main(argv) == 0
    report = json.loads((out / "evaluation.json").read_text())
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    return report, episodes


@pytest.fixture(scope="module")
def random_model(tmp_path_factory):
    """A random tiny Llama (attention and MLP live: each token depends on the whole prompt and on the batch's
    padding only through rounding)."""
    return save_tiny_model_dir(tmp_path_factory.mktemp("random") / "model", seed=3, taught=False)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("policy", ["checkpoint", "random model with the checkpoint's library"])
def test_the_same_episodes_at_batch_sizes_1_3_and_8(tmp_path, checkpoint, random_model, temperature, policy):
    extra, source = (), None
    if policy != "checkpoint":
        extra, source = ("--library-from", str(checkpoint[0])), random_model
    # each pass plays 2 tasks x 3 samples: one at a time, in two batches of 3, and all in one batch (size 8)
    runs = {b: evaluated(tmp_path, checkpoint, b, temperature, *extra, source=source, tasks=2) for b in (1, 3, 8)}
    reference = runs[1][1]
    assert len(reference) == 2 * 2 * 3  # with a library and without, 2 tasks x 3 samples
    for batch_size, (report, episodes) in runs.items():
        assert episodes == reference, f"batch size {batch_size} changed some episode"
        assert report["batch_size"] == batch_size
    if temperature > 0:  # the samples of a task are drawn from their own streams: they differ somewhere
        responses: dict[tuple, set] = {}
        for e in reference:
            responses.setdefault((e["pass"], e["task"]), set()).add(json.dumps(e["responses"]))
        assert any(len(seen) > 1 for seen in responses.values())


def test_the_figures_are_those_of_the_episodes(tmp_path, checkpoint):
    report, episodes = evaluated(tmp_path, checkpoint, 4, 1.0)
    assert set(report["passes"]) == {"with_library", "without_library"}
    for name, figures in report["passes"].items():
        mine = [e for e in episodes if e["pass"] == name]
        success = np.zeros((3, 3))
        for e in mine:
            success[e["task"], e["sample"]] = e["success"]
        assert figures["avg@k"] == pytest.approx(success.mean())
        assert figures["pass@k"] == pytest.approx(np.mean(success.max(axis=1)))
        low, high = figures["avg@k_interval"]
        assert low <= figures["avg@k"] <= high
        steps = sum(e["length"] for e in mine)
        assert figures["steps_per_episode"] == pytest.approx(steps / 9)
        assert figures["valid_action_ratio"] == pytest.approx(sum(e["valid_actions"] for e in mine) / steps)
    by_task = lambda name: np.array([np.mean([e["success"] for e in episodes if e["pass"] == name and e["task"] == t])
                                     for t in range(3)])  # noqa: E731
    comparison = report["comparisons"]["with_library - without_library"]
    assert comparison["difference"] == pytest.approx((by_task("with_library") - by_task("without_library")).mean())
    out = tmp_path / "b4_t1.0"
    assert "| with\\_library |" in (out / "evaluation.md").read_text()
    dumps = {name: [json.loads(line) for line in (out / "trajectories" / name / "1.jsonl").read_text().splitlines()]
             for name in ("val", "val_no_library")}
    assert all(line["experience_ids"] for line in dumps["val"]) and not any(line["experience_ids"] for line in dumps["val_no_library"])
    from recipe.forge.commands.trajectory_viewer import main as trajectories_main

    assert trajectories_main([str(out / "trajectories"), "--out", str(out / "page")]) == 0
    assert (out / "page" / "trajectories.html").stat().st_size > 0


def test_another_checkpoints_library_and_a_plain_model_folder(tmp_path, checkpoint):
    folder, overrides, model = checkpoint
    report, _ = evaluated(tmp_path, checkpoint, 2, 0.0, "--library-from", str(folder))
    assert set(report["passes"]) == {"with_library", "without_library", "other_library"}
    # the same library twice: the same greedy episodes
    assert report["passes"]["other_library"]["avg@k"] == report["passes"]["with_library"]["avg@k"]
    out = tmp_path / "plain"
    assert eval_main([model, "--tasks", "2", "--samples", "1", "--out", str(out), "--no-progress", *overrides]) == 0
    assert set(json.loads((out / "evaluation.json").read_text())["passes"]) == {"without_library"}


def test_bad_inputs_end_with_one_line(tmp_path, checkpoint, capsys):
    folder, overrides, model = checkpoint
    (tmp_path / "empty").mkdir()
    damaged = tmp_path / "global_step_3"
    damaged.mkdir()
    (damaged / "trainer_state.json").write_text("{not json")
    cases = {
        str(tmp_path / "missing"): "no such folder",
        str(tmp_path / "empty"): "not a checkpoint",
        str(damaged): "trainer_state.json",
        model: "give --out",
    }
    for path, message in cases.items():
        assert eval_main([path, "--no-progress", *overrides]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("slea-rl eval:") and message in err[0], err
    assert eval_main([str(folder), "--tasks", "0", "--out", str(tmp_path / "o"), "--no-progress", *overrides]) == 2
    assert "tasks must be >= 1" in capsys.readouterr().err
