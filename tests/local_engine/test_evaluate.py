"""``trainer.val_only=true`` on the embedded engine: evaluate a checkpoint with and without its library, no update."""

import json

import pytest
import torch

from recipe.forge.hf.model_loading import PolicyConfig, build_policy
from recipe.forge.engines.local.trainer import Components, LocalTrainer
from recipe.forge.main_forge import validate

pytestmark = pytest.mark.timeout(900)


def trainer_for(cfg, tokenizer, make_tiny):
    policy = build_policy(PolicyConfig(path="tiny", use_reference=True), model=make_tiny(seed=0), tokenizer=tokenizer)
    return LocalTrainer(validate(cfg), Components(policy=policy))


def test_val_only_evaluates_a_checkpoint_without_training(tmp_path, tokenizer, make_tiny, compose_cfg, run_overrides):
    train_dir, eval_dir = tmp_path / "train", tmp_path / "eval_run"
    common = ["trainer.save_freq=1", "algorithm.forge.library_save_freq=1", "data.val_batch_size=2"]
    trained = trainer_for(compose_cfg(run_overrides(train_dir, iterations=1) + common), tokenizer, make_tiny)
    trained.fit()
    training_metrics = (train_dir / "metrics.jsonl").read_text()
    # The checkpoint's RNG states are those of the end of training, so validating now is what val_only must give.
    expected = trained.validate()

    cfg = compose_cfg(run_overrides(eval_dir, iterations=1) + common + [
        "trainer.val_only=true", "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={train_dir / 'global_step_1'}"])
    evaluator = trainer_for(cfg, tokenizer, make_tiny)
    history = evaluator.fit()

    assert history == [{"iteration": 1, **expected}]
    assert {"val/success_rate", "val_no_library/success_rate"} <= set(history[0])
    for (name, a), b in zip(trained.policy.model.named_parameters(), evaluator.policy.model.parameters()):
        assert torch.equal(a, b), name  # the checkpoint's weights, and no update after loading them
    assert len(evaluator.experience.library) == len(trained.experience.library) > 0
    lines = [json.loads(x) for x in (eval_dir / "eval" / "global_step_1" / "metrics.jsonl").read_text().splitlines()]
    assert [line["iteration"] for line in lines] == [1]
    assert lines[0]["val/success_rate"] == pytest.approx(expected["val/success_rate"])
    assert not list(eval_dir.glob("global_step_*")), "val_only must not write checkpoints"
    assert (train_dir / "metrics.jsonl").read_text() == training_metrics


def test_val_only_without_a_checkpoint_evaluates_the_initial_policy(tmp_path, tokenizer, make_tiny, compose_cfg,
                                                                    run_overrides):
    cfg = compose_cfg(run_overrides(tmp_path, iterations=3) + ["trainer.val_only=true", "data.val_batch_size=1"])
    trainer = trainer_for(cfg, tokenizer, make_tiny)
    before = [p.detach().clone() for p in trainer.policy.model.parameters()]
    history = trainer.fit()
    assert [h["iteration"] for h in history] == [0]
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.policy.model.parameters()))
    assert (tmp_path / "eval" / "initial" / "metrics.jsonl").exists()
    assert not (tmp_path / "metrics.jsonl").exists()
