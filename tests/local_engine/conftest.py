"""Fixtures for the embedded engine's tests: the SmolLM2 tokenizer (local conversion, no download), tiny
random Llama models built from configs, a tiny random Qwen2.5-VL folder, and composed run configs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from recipe.forge.hf.tiny import answering_llama, tiny_llama

CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "recipe" / "forge" / "config")


@pytest.fixture(scope="session")
def tokenizer():
    from recipe.forge.hf.model_loading import load_tokenizer

    return load_tokenizer("smollm2-135m-instruct")


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return hydra_compose(config_name="forge_trainer", overrides=overrides)


def tiny_run_overrides(output_dir: str | os.PathLike, estimator: str = "forge", iterations: int = 1) -> list[str]:
    """A NumberLine run small enough for a unit test (2 tasks x 2 copies, at most 3 steps; on the verl engine one
    training process, as a CPU runs it)."""
    return [
        "env.env_name=gym_cards/NumberLine-v0", "env.gym_cards.target_max=3", "env.max_steps=3",
        "env.rollout.n=2", "env.history_length=0", "data.train_batch_size=2", "data.val_batch_size=1",
        f"algorithm.adv_estimator={estimator}", f"trainer.total_training_steps={iterations}",
        "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.val_before_train=false",
        "actor_rollout_ref.rollout.response_length=8", "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "actor_rollout_ref.actor.use_kl_loss=true",
        "trainer.local.progress=false", "trainer.logger=[jsonl]", f"trainer.default_local_dir={output_dir}",
        f"algorithm.forge.checkpoint_dir={output_dir}/library", "algorithm.forge.warmup_iterations=0",
        "algorithm.forge.min_library_size=0", "trainer.n_gpus_per_node=1",
    ]


NUMBERLINE_PROMPTS = [
    f"Move the current position to the target position on the number line.\n\nCurrent state:\nTarget: {t}\nCurrent: {c}"
    for t in range(4) for c in range(4) if t != c
]


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory) -> Path:
    """A tiny random Qwen2.5-VL folder (recipe/forge/hf/tiny_vlm.py)."""
    from recipe.forge.hf.tiny_vlm import save_tiny_vlm_dir

    return Path(save_tiny_vlm_dir(tmp_path_factory.mktemp("tiny_qwen2_5_vl")))


@pytest.fixture
def taught_policy(tokenizer):
    """A tiny policy (with a frozen reference copy) that emits valid actions part of the time."""
    from recipe.forge.hf.model_loading import PolicyConfig, build_policy

    model = answering_llama(tokenizer)
    return build_policy(PolicyConfig(path="tiny", use_reference=True), model=model, tokenizer=tokenizer)


@pytest.fixture
def make_tiny(tokenizer):
    """``make_tiny(seed=0, taught=True) -> model``: a tiny random Llama, or (taught) one that answers in the
    action format part of the time."""

    def factory(seed: int = 0, taught: bool = True):
        return answering_llama(tokenizer, seed) if taught else tiny_llama(tokenizer, seed)

    return factory


@pytest.fixture
def compose_cfg():
    return compose


@pytest.fixture
def run_overrides():
    return tiny_run_overrides
