"""scripts/seed_sweep.py: the figures it reads from a run, and one real run of the sweep with a tiny random
model (1 iteration), written in the issue's format."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def sweep(load_script):
    return load_script("seed_sweep.py")


def test_final_figures_are_the_last_validation_and_the_last_training_success(sweep, tmp_path):
    rows = [{"iteration": 1, "success_rate": 0.25, "val/success_rate": 0.5, "val_no_library/success_rate": 0.25},
            {"iteration": 2, "success_rate": 0.75},
            {"iteration": 3, "success_rate": 1.0, "val/success_rate": 0.625}]
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert sweep.final_figures(path) == {"val_success": 0.625, "val_success_no_library": None,
                                         "train_success_last": 1.0, "lesson_precision": None}
    rows[0]["forge/lesson_precision"], rows[1]["forge/lesson_precision"] = 0.5, 0.75  # the last one logged counts
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert sweep.final_figures(path)["lesson_precision"] == 0.75
    path.write_text(json.dumps(rows[1]) + "\n")
    with pytest.raises(ValueError, match="no validation"):
        sweep.final_figures(path)


def test_one_iteration_sweep_with_a_tiny_model_writes_the_issue_format(sweep, tmp_path, tokenizer):
    from recipe.forge.hf.tiny import tiny_llama

    model_dir = tmp_path / "tiny"
    tiny_llama(tokenizer).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    out = tmp_path / "seeds.json"
    args = ["--estimators", "forge", "--seeds", "3", "--iterations", "1", "--val-tasks", "1",
            "--runs-dir", str(tmp_path / "runs"), "--out", str(out), "--",
            f"actor_rollout_ref.model.path={model_dir}", "env.max_steps=2", "env.rollout.n=2",
            "data.train_batch_size=1", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"]
    code = sweep.main(args)
    assert code == 0
    metrics_file = tmp_path / "runs" / "forge_seed3" / "metrics.jsonl"
    first_run = metrics_file.read_text()
    # --reuse keeps a validated run of the same command (the file is not rewritten: a sentinel line survives) ...
    metrics_file.write_text(first_run + "\n")
    assert sweep.main(["--reuse", *args]) == 0 and metrics_file.read_text() == first_run + "\n"
    # ... and reruns one whose command changed
    changed = [*args[:-1], "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"]
    assert sweep.main(["--reuse", *changed]) == 0
    assert metrics_file.read_text() != first_run + "\n"
    result = json.loads(out.read_text())
    assert set(result) == {"forge"} and set(result["forge"]) == {"3"}
    figures = result["forge"]["3"]
    assert set(figures) == {"val_success", "val_success_no_library", "train_success_last", "lesson_precision"}
    assert all(0.0 <= figures[k] <= 1.0 for k in ("val_success", "val_success_no_library", "train_success_last"))
    metrics = (tmp_path / "runs" / "forge_seed3" / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == 1 and json.loads(metrics[0])["iteration"] == 1


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
