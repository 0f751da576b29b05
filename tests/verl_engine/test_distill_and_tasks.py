"""Self-distillation term and config checks of the verl engine; the task files run_verl writes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from agent_system.config_checks import ConfigError
from agent_system.environments.config import EnvConfig
from recipe.forge.config_schema import ForgeAlgoConfig, ForgeConfig
from recipe.forge.engines.verl.distill import check_distillation_config, distillation_advantage


def test_distillation_term_is_minus_weighted_logprob_gap_on_response_tokens():
    student = torch.tensor([[-1.0, -2.0, -0.5], [-0.1, -0.2, -9.0]])
    teacher = torch.tensor([[-0.5, -2.5, -0.5], [-0.1, -1.2, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    term = distillation_advantage(student, teacher, mask, weight=0.5)
    # a token the teacher finds likelier than the student is pushed up, and vice versa
    torch.testing.assert_close(term, torch.tensor([[0.25, -0.25, 0.0], [0.0, -0.5, 0.0]]))


def algo(**forge):
    return ForgeAlgoConfig(forge=ForgeConfig(use_distillation=True, **forge))


@pytest.mark.parametrize(
    "forge, env, key",
    [
        ({"divergence_type": "jsd"}, EnvConfig(), "algorithm.forge.divergence_type"),
        ({"divergence_type": "kl"}, EnvConfig(), "algorithm.forge.divergence_type"),
        ({"divergence_type": "reverse_kl", "distill_temperature": 2.0}, EnvConfig(), "algorithm.forge.distill_temperature"),
    ],
)
def test_unsupported_distillation_settings_name_the_key(forge, env, key):
    with pytest.raises(ConfigError, match=key):
        check_distillation_config(algo(**forge), env)


def test_visual_distillation_is_rejected_and_text_reverse_kl_accepted():
    visual = EnvConfig()
    visual = dataclasses.replace(visual, sokoban=dataclasses.replace(visual.sokoban, mode="rgb_array"))
    with pytest.raises(ConfigError, match="text observations"):
        check_distillation_config(algo(divergence_type="reverse_kl"), visual)
    check_distillation_config(algo(divergence_type="reverse_kl"), EnvConfig())


def test_task_files_hold_train_and_held_out_validation_seeds(run_config_factory, tmp_path):
    from recipe.forge.engines.verl.main import prepare_verl_config
    from recipe.forge.run_config import load_run_config

    cfg = run_config_factory(
        [
            "trainer.engine=verl", f"trainer.default_local_dir={tmp_path}", "trainer.total_training_steps=5",
            "data.train_batch_size=4", "data.val_batch_size=6", "env.rollout.n=3", "env.val_seed_offset=1000",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",  # divides a rank's 32 x 3 / 8 rows
            "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct",  # a hub id stays as it is
            "env.env_name=sokoban",
        ]
    )
    prepared = prepare_verl_config(load_run_config(cfg))
    assert prepared.actor_rollout_ref.rollout.n == 3
    assert prepared.actor_rollout_ref.rollout.agent.default_agent_loop == "forge_agent"
    assert prepared.trainer.v1.trainer_mode == "forge"
    assert prepared.actor_rollout_ref.model.path == "Qwen/Qwen2.5-0.5B-Instruct"
    train, val = pd.read_parquet(prepared.data.train_files), pd.read_parquet(prepared.data.val_files)
    train_seeds = np.array([e["seed"] for e in train["extra_info"]])
    val_seeds = np.array([e["seed"] for e in val["extra_info"]])
    assert len(train) == 4 * 5 and len(val) == 6
    assert (train_seeds < 1000).all() and (train_seeds >= 0).all()
    np.testing.assert_array_equal(val_seeds, 1000 + np.arange(6))
    # the embedded engine's rule: each iteration draws its 4 tasks from one generator seeded with env.seed
    rng = np.random.default_rng(int(cfg.env.seed))
    np.testing.assert_array_equal(train_seeds, np.concatenate([rng.integers(0, 1000, size=4) for _ in range(5)]))
    assert set(train["agent_name"]) == {"forge_agent"} and set(val["data_source"]) == {"sokoban"}
    assert [e["index"] for e in val["extra_info"]] == list(range(6))
    # the same env.seed gives the same tasks
    again = prepare_verl_config(load_run_config(cfg))
    assert pd.read_parquet(again.data.train_files)["extra_info"].tolist() == train["extra_info"].tolist()
