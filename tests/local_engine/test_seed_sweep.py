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
                                         "train_success_last": 1.0}
    path.write_text(json.dumps(rows[1]) + "\n")
    with pytest.raises(ValueError, match="no validation"):
        sweep.final_figures(path)


def test_one_iteration_sweep_with_a_tiny_model_writes_the_issue_format(sweep, tmp_path, tokenizer):
    from recipe.forge.engines.local.tiny import tiny_llama

    model_dir = tmp_path / "tiny"
    tiny_llama(tokenizer).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    out = tmp_path / "seeds.json"
    code = sweep.main(["--estimators", "forge", "--seeds", "3", "--iterations", "1", "--val-tasks", "1",
                       "--runs-dir", str(tmp_path / "runs"), "--out", str(out), "--",
                       f"actor_rollout_ref.model.path={model_dir}", "env.max_steps=2", "env.rollout.n=2",
                       "data.train_batch_size=1", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"])
    assert code == 0
    result = json.loads(out.read_text())
    assert set(result) == {"forge"} and set(result["forge"]) == {"3"}
    figures = result["forge"]["3"]
    assert set(figures) == {"val_success", "val_success_no_library", "train_success_last"}
    assert all(0.0 <= figures[k] <= 1.0 for k in figures)  # forge validates with and without its library
    metrics = (tmp_path / "runs" / "forge_seed3" / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == 1 and json.loads(metrics[0])["iteration"] == 1
