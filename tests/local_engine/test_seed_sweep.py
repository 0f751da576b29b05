"""scripts/seed_sweep.py: the figures it reads from a run, and one real run of the sweep with a tiny random
model (1 iteration), written in the issue's format."""

from __future__ import annotations

import json
import shutil

import pytest

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def sweep(load_script):
    return load_script("seed_sweep.py")


def test_final_figures_are_the_last_validation_and_the_last_training_success(sweep, tmp_path):
    rows = [{"iteration": 1, "success_rate": 0.25, "val/success_rate": 0.5, "val_no_library/success_rate": 0.25},
            {"iteration": 2, "success_rate": 0.75},
            {"iteration": 3, "success_rate": 1.0, "val/success_rate": 0.625, "val/valid_action_ratio": 0.9}]
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert sweep.final_figures(path) == {"val_success": 0.625, "val_success_no_library": None,
                                         "train_success_last": 1.0, "lesson_precision": None,
                                         "val_lesson_precision": None, "val_valid_action_ratio": 0.9}
    assert sweep.final_figures(path, iterations=3)["val_success"] == 0.625
    rows[0]["forge/lesson_precision"], rows[1]["forge/lesson_precision"] = 0.5, 0.75  # the last one logged counts
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert sweep.final_figures(path)["lesson_precision"] == 0.75
    path.write_text(json.dumps(rows[1]) + "\n")
    with pytest.raises(ValueError, match="no validation"):
        sweep.final_figures(path)


def test_a_run_short_of_its_budget_or_torn_has_no_final_figures(sweep, tmp_path):
    """A 1-iteration result is not the 2-iteration one; a torn last line leaves iteration 1 as the last."""
    path = tmp_path / "metrics.jsonl"
    first = {"iteration": 1, "success_rate": 0.25, "val/success_rate": 0.5}
    path.write_text(json.dumps(first) + "\n")
    with pytest.raises(ValueError, match="up to 1, not 1..2"):
        sweep.final_figures(path, iterations=2)
    path.write_text(json.dumps(first) + "\n" + json.dumps({"iteration": 2, "success_rate": 1.0})[:25])
    with pytest.raises(ValueError, match="up to 1, not 1..2"):
        sweep.final_figures(path, iterations=2)
    path.write_text(json.dumps(first) + "\n" + json.dumps({"iteration": 2, "success_rate": 1.0}) + "\n")
    with pytest.raises(ValueError, match="iteration 2 has no validation"):
        sweep.final_figures(path, iterations=2)


def test_a_sweep_reuses_finished_runs_only_and_resumes_an_unfinished_one(sweep, tmp_path, tokenizer):
    from recipe.forge.hf.tiny import tiny_llama

    model_dir = tmp_path / "tiny"
    tiny_llama(tokenizer).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    out = tmp_path / "seeds.json"
    args = ["--estimators", "forge", "--seeds", "3", "--iterations", "2", "--val-tasks", "1", "--save-freq", "1",
            "--keep-checkpoints", "--runs-dir", str(tmp_path / "runs"), "--out", str(out), "--",
            f"actor_rollout_ref.model.path={model_dir}", "env.max_steps=2", "env.rollout.n=2",
            "data.train_batch_size=1", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "trainer.max_actor_ckpt_to_keep=null"]  # both checkpoints kept: iteration 1's is resumed below
    run_dir = tmp_path / "runs" / "forge_seed3"
    assert sweep.main(args) == 0
    metrics_file = run_dir / "metrics.jsonl"
    finished = metrics_file.read_text()
    lines = finished.splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2]
    # a finished run of the same command is reused as it is (the file is not rewritten)
    assert sweep.main(["--reuse", *args]) == 0 and metrics_file.read_text() == finished
    # stopped mid-way (after iteration 1's checkpoint): rerun, it continues from that checkpoint, line 1 kept
    record = json.loads((run_dir / "sweep_command.json").read_text())
    del record["metrics_sha256"]
    (run_dir / "sweep_command.json").write_text(json.dumps(record))
    shutil.rmtree(run_dir / "global_step_2")
    (run_dir / "latest_checkpointed_iteration.txt").write_text("1")
    metrics_file.write_text(lines[0] + "\n")
    assert sweep.main(["--reuse", *args]) == 0
    resumed = metrics_file.read_text().splitlines()
    assert resumed[0] == lines[0] and [json.loads(line)["iteration"] for line in resumed] == [1, 2]
    assert "resum" in (run_dir / "sweep.log").read_text().lower()
    # metrics changed since the run finished: not taken; the folder is moved aside and the run starts afresh
    forged = [json.loads(line) for line in resumed]
    forged[-1]["val/success_rate"] = 1.0
    metrics_file.write_text("".join(json.dumps(r) + "\n" for r in forged))
    assert sweep.main(["--reuse", *args]) == 0
    assert (tmp_path / "runs" / "forge_seed3.replaced-1" / "metrics.jsonl").exists()
    assert [json.loads(line)["iteration"] for line in metrics_file.read_text().splitlines()] == [1, 2]
    # another command: moved aside too, never deleted
    changed = [*args[:-1], "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"]
    assert sweep.main(["--reuse", *changed]) == 0
    assert (tmp_path / "runs" / "forge_seed3.replaced-2").is_dir()
    result = json.loads(out.read_text())
    assert set(result) == {"forge"} and set(result["forge"]) == {"3"}
    figures = result["forge"]["3"]
    assert set(figures) == set(sweep.FIGURES)
    assert all(0.0 <= figures[k] <= 1.0 for k in ("val_success", "val_success_no_library", "train_success_last"))


def test_summary_pairs_seeds_and_places_slea_rl_between_floor_and_ceiling(sweep):
    def figs(val, no_library=None):
        return {"val_success": val, "val_success_no_library": no_library, "train_success_last": 0.5,
                "lesson_precision": None}

    results = {
        "forge": {"0": figs(0.50, 0.25), "1": figs(0.75, 0.50), "2": figs(0.25, 0.25)},
        "gigpo": {"0": figs(0.25), "1": figs(0.50), "2": figs(0.25)},
        "oracle": {"0": figs(1.00), "1": figs(1.00), "2": figs(0.50)},
    }
    stats = sweep.summarise(results)
    # forge - gigpo per seed: 0.25, 0.25, 0.00 -> mean 1/6, sd 0.1443, se 0.0833; 1/6 is exactly 2 se: not above
    diff = stats["paired"]["forge-gigpo"]
    assert diff["diffs"] == pytest.approx([0.25, 0.25, 0.0]) and diff["mean"] == pytest.approx(1 / 6)
    assert diff["se"] == pytest.approx((0.0208333 ** 0.5) / 3 ** 0.5, rel=1e-4)
    assert not diff["above_two_se"] and not diff["below_two_se"]
    # forge - oracle: -0.5, -0.25, -0.25: mean -1/3, se 0.0833 -> below
    assert stats["paired"]["forge-oracle"]["below_two_se"]
    # with vs without the library: 0.25, 0.25, 0.0
    assert stats["paired"]["forge-forge_no_library"]["mean"] == pytest.approx(1 / 6)
    # means 0.5 (forge), 1/3 (gigpo), 5/6 (oracle): (1/2 - 1/3) / (5/6 - 1/3) = 1/3
    assert stats["between_floor_and_ceiling"] == pytest.approx(1 / 3)
    assert stats["methods"]["gigpo"]["val_success_no_library"] is None
    assert "paired forge-gigpo: +0.167" in sweep.summary(results)


def test_paired_uses_only_seeds_both_ran(sweep):
    assert sweep.paired({"0": 0.5, "1": 0.25}, {"1": 0.0, "2": 1.0}) == {
        "mean": 0.25, "se": 0.0, "n": 1, "seeds": ["1"], "diffs": [0.25], "above_two_se": False,
        "below_two_se": False}
    assert sweep.paired({"0": None}, {"0": 0.5}) is None


def test_methods_map_to_their_overrides(sweep, tmp_path):
    oracle = sweep.run_overrides("oracle", 4, 12, 16, tmp_path, preset="main_job")
    assert "algorithm.forge.extractor=oracle" in oracle and "algorithm.adv_estimator=forge" in oracle
    frozen = sweep.run_overrides("forge_frozen", 4, 12, 16, tmp_path)
    assert "trainer.local.freeze_policy=true" in frozen and "+experiment=main_job" in frozen
