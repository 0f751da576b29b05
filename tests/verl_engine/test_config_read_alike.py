"""One composed config, read by both engines: the same mini-batch rows, run length, lr schedule, sampling and
dynamic-sampling settings (issue 12). The verl side is what verl itself derives from the prepared config:
``ppo_mini_batch_size x rollout.n`` rows per mini-batch (verl/trainer/ppo/v1/trainer_base.py, _update_actor),
``len(train dataset) // train_batch_size x total_epochs`` iterations, the typed actor config's optimizer."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

pytestmark = pytest.mark.timeout(300)

OVERRIDES = [
    "env.env_name=gym_cards/NumberLine-v0", "env.rollout.n=8", "data.train_batch_size=16",
    "actor_rollout_ref.actor.ppo_mini_batch_size=16", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
    "trainer.total_training_steps=null", "trainer.total_epochs=2",
    "actor_rollout_ref.actor.optim.lr_warmup_steps=3", "actor_rollout_ref.actor.optim.lr=2e-6",
    "actor_rollout_ref.rollout.temperature=0.7", "actor_rollout_ref.rollout.top_p=0.9",
    "algorithm.filter_groups.enable=true", "algorithm.filter_groups.max_num_gen_batches=0",
    "trainer.device=cpu",
]


def test_both_engines_read_one_config_alike(run_config_factory, tmp_path):
    from verl.utils.config import omega_conf_to_dataclass

    from recipe.forge.engines.local.lr_schedule import warmup_iterations
    from recipe.forge.engines.local.update import PolicyUpdater
    from recipe.forge.engines.verl.main import prepare_verl_config
    from recipe.forge.run_config import load_run_config

    cfg = run_config_factory(OVERRIDES + [f"trainer.default_local_dir={tmp_path}"])
    local = load_run_config(cfg)  # trainer.engine=local, the default
    prepared = prepare_verl_config(load_run_config(run_config_factory(
        OVERRIDES + [f"trainer.default_local_dir={tmp_path}", "trainer.engine=verl"])))
    actor = omega_conf_to_dataclass(prepared.actor_rollout_ref.actor)

    verl_rows = actor.ppo_mini_batch_size * prepared.actor_rollout_ref.rollout.n
    model = torch.nn.Linear(1, 1)
    updater = PolicyUpdater(model, torch.optim.SGD(model.parameters(), lr=0.0), local.policy.actor)
    assert updater.mini_batch_rows == verl_rows == 16 * 8
    assert updater.micro_batch_rows == actor.ppo_micro_batch_size_per_gpu

    train_tasks = len(pd.read_parquet(prepared.data.train_files))
    verl_iterations = train_tasks // prepared.data.train_batch_size * prepared.trainer.total_epochs
    assert local.trainer.total_iterations == verl_iterations == 2 * (10_000 // 16)

    assert local.policy.actor.optim.lr == actor.optim.lr == 2e-6
    assert warmup_iterations(local.policy.actor.optim, local.trainer.total_iterations) == actor.optim.lr_warmup_steps == 3
    assert (local.rollout.temperature, local.rollout.top_p) == (prepared.actor_rollout_ref.rollout.temperature,
                                                                prepared.actor_rollout_ref.rollout.top_p)
    groups = prepared.algorithm.filter_groups
    filter_groups = local.policy.filter_groups
    assert (filter_groups.enable, filter_groups.max_num_gen_batches) == (groups.enable, groups.max_num_gen_batches)
