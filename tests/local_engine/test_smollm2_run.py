"""One short real run with SmolLM2-135M-Instruct (the converted package weights; no download)."""

import math

import pytest
import torch

from recipe.forge.main_forge import run


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_one_real_iteration_with_smollm2(tmp_path, compose_cfg):
    cfg = compose_cfg([
        "data.train_batch_size=1", "env.rollout.n=2", "env.max_steps=2", "trainer.total_training_steps=1",
        "trainer.test_freq=-1", "trainer.save_freq=1", "trainer.logger=[jsonl]", "trainer.local.progress=false",
        "actor_rollout_ref.rollout.response_length=4", f"trainer.default_local_dir={tmp_path}",
        f"algorithm.forge.checkpoint_dir={tmp_path}/library",
    ])
    history = run(cfg)
    metrics = history[-1]
    assert metrics["iteration"] == 1
    for key in ("success_rate", "actor/pg_loss", "actor/grad_norm", "tokens/generated", "forge/library_total_size"):
        assert math.isfinite(metrics[key]), key
    assert metrics["tokens/generated"] > 0
    saved = tmp_path / "global_step_1"
    assert (saved / "policy" / "model.safetensors").exists() and (saved / "optimizer.pt").exists()
    # The saved policy reloads as a plain Hugging Face model.
    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(saved / "policy")
    assert all(torch.isfinite(p).all() for p in reloaded.parameters())
