"""Exact resume, distillation in the loop, and configuration faults caught before any model is loaded."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agent_system.config_checks import ConfigError
from recipe.forge.hf.model_loading import PolicyConfig, build_policy
from recipe.forge.engines.local.trainer import Components, LocalTrainer
from recipe.forge.main_forge import run, validate

pytestmark = pytest.mark.timeout(900)
REPO = Path(__file__).resolve().parents[2]


def fit(cfg, tokenizer, make_tiny):
    policy = build_policy(PolicyConfig(path="tiny", use_reference=True), model=make_tiny(seed=0), tokenizer=tokenizer)
    trainer = LocalTrainer(validate(cfg), Components(policy=policy))
    history = trainer.fit()
    return trainer, history


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_resume_after_n_iterations_equals_an_uninterrupted_run(dtype, tmp_path, tokenizer, make_tiny, compose_cfg,
                                                               run_overrides):
    """Parameter for parameter, in fp32 and under bf16 autocast (weights and optimizer fp32), with the shared prompt
    prefix (the default) and two threads, as the main job runs."""
    common = ["trainer.save_freq=1", "algorithm.forge.library_save_freq=1", f"trainer.local.compute_dtype={dtype}",
              "trainer.local.num_threads=2"]
    straight, straight_history = fit(compose_cfg(run_overrides(tmp_path / "a", iterations=3) + common),
                                     tokenizer, make_tiny)
    fit(compose_cfg(run_overrides(tmp_path / "b", iterations=2) + common), tokenizer, make_tiny)
    resumed, resumed_history = fit(compose_cfg(run_overrides(tmp_path / "b", iterations=3) + common +
                                               ["trainer.resume_mode=auto"]), tokenizer, make_tiny)

    assert [h["iteration"] for h in resumed_history] == [3]
    for (name, a), b in zip(straight.policy.model.named_parameters(), resumed.policy.model.parameters()):
        assert torch.equal(a, b), name
    keys = ("success_rate", "actor/pg_loss", "forge/library_total_size", "episode_reward/mean")
    assert {k: straight_history[-1][k] for k in keys} == {k: resumed_history[-1][k] for k in keys}
    lines = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [x["iteration"] for x in lines] == [1, 2, 3]


def test_distillation_runs_in_the_loop(tmp_path, tokenizer, make_tiny, compose_cfg, run_overrides):
    cfg = compose_cfg(run_overrides(tmp_path, iterations=2) + [
        "algorithm.forge.use_distillation=true", "algorithm.forge.max_distill_weight=0.5",
        "algorithm.forge.golden_capacity_per_level=2", "algorithm.forge.warning_capacity_per_level=2",
        "algorithm.forge.top_k_golden=1", "algorithm.forge.top_k_warning=1"])
    trainer, history = fit(cfg, tokenizer, make_tiny)
    first, last = history
    assert "distill/rows" not in first  # iteration 1 starts from an empty library: nothing to distil
    # Iteration 2's prompts carry the experiences iteration 1 added; the weight ramps with the library's size
    # over its capacity, 3 levels x (2 golden + 2 warning).
    assert 0 < last["distill/rows"] <= last["batch/num_samples"]
    assert last["distill/weight"] == pytest.approx(0.5 * min(1.0, first["forge/library_total_size"] / 12))
    assert last["distill/weight"] > 0
    assert 0 < last["distill/loss"] < float("inf")  # the student's prompt lacks the teacher's experiences


BAD = [
    (["trainer.engine=torchrun"], "trainer.engine"),
    (["algorithm.adv_estimator=nope"], "algorithm.adv_estimator"),
    (["algorithm.adv_estimator=remax"], "remax"),
    (["actor_rollout_ref.actor.optim.lr=-1"], "optim.lr"),
    (["actor_rollout_ref.actor.policy_loss.loss_mode=nope"], "loss_mode"),
    (["trainer.local.compute_dtype=fp8"], "compute_dtype"),
    (["+trainer.local.bogus=1"], "trainer.local.bogus"),
    (["actor_rollout_ref.rollout.response_length=0"], "response_length"),
    (["trainer.engine=api", "trainer.api.base_url=ftp://x"], "base_url"),
    (["env.env_name=nowhere"], "env.env_name"),
]


@pytest.mark.parametrize("overrides,key", BAD)
def test_bad_config_fails_before_any_model_is_loaded(overrides, key, compose_cfg, monkeypatch):
    import recipe.forge.hf.model_loading as loading

    def forbidden(*args, **kwargs):
        raise AssertionError("a model was loaded before the config was validated")

    monkeypatch.setattr(loading, "build_policy", forbidden)
    monkeypatch.setattr(loading, "load_tokenizer", forbidden)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        run(compose_cfg(overrides))


def test_command_line_reports_a_config_error_with_exit_code_2():
    proc = subprocess.run([sys.executable, "-m", "recipe.forge.main_forge", "trainer.local.compute_dtype=fp8"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "trainer.local.compute_dtype='fp8'" in proc.stderr
    # verl's notes on optional engines and on the missing accelerator are silenced at our entry point
    assert "engine is not available" not in proc.stderr
    assert "No supported accelerator" not in proc.stderr and "registered but not available" not in proc.stderr


def test_kl_loss_with_a_policy_without_reference_fails_at_construction(tmp_path, tokenizer, make_tiny, compose_cfg,
                                                                       run_overrides):
    cfg = compose_cfg(run_overrides(tmp_path, iterations=1) + ["actor_rollout_ref.actor.use_kl_loss=true"])
    policy = build_policy(PolicyConfig(path="tiny", use_reference=False), model=make_tiny(seed=0), tokenizer=tokenizer)
    with pytest.raises(ConfigError, match=r"use_kl_loss=true needs a reference policy"):
        LocalTrainer(validate(cfg), Components(policy=policy))
