"""One iteration of the embedded trainer end to end, every estimator and policy loss, PPO with a critic."""

import copy
import math

import numpy as np
import pytest
import torch

from recipe.forge.engines.local.advantages import compute_advantages
from recipe.forge.engines.local.settings import UNSUPPORTED, supported_estimators
from recipe.forge.engines.local.batch import build_step_batch
from recipe.forge.engines.local.trainer import Components, LocalTrainer
from recipe.forge.hf.tiny import actor_config
from recipe.forge.engines.local.update import PolicyUpdater
from recipe.forge.main_forge import validate

pytestmark = pytest.mark.timeout(600)


def make_trainer(cfg, policy, critic_backbone=None):
    return LocalTrainer(validate(cfg), Components(policy=policy, critic_backbone=critic_backbone))


def params_of(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_one_iteration_changes_weights_and_rollout_logprobs_match(tmp_path, taught_policy, compose_cfg, run_overrides):
    cfg = compose_cfg(run_overrides(tmp_path))
    trainer = make_trainer(cfg, taught_policy)
    model = trainer.policy.model

    rollout = trainer.collector.collect(trainer.train_envs, trainer.generator, trainer.run.rollout.sampling())
    batch = build_step_batch(rollout, trainer.tokenizer.pad_token_id, 0.1)
    recomputed = trainer.updater.log_probs(model, batch.packed)
    assert torch.allclose(recomputed, batch.old_log_probs, atol=1e-4)
    assert 0 < batch.samples.is_action_valid.mean() < 1  # the fixture policy gives a mixed, informative batch

    before = params_of(model)
    metrics = trainer.train_iteration(0)
    changed = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    assert changed, "no weight changed after one iteration"
    for key in ("success_rate", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "valid_action_ratio",
                "forge/library_total_size", "forge/reward_mean", "timing_s/gen", "timing_s/update_actor", "actor/lr"):
        assert key in metrics and math.isfinite(metrics[key]), key
    # The reference copy is frozen: the KL term measures drift from the start.
    ref = trainer.policy.reference_model()
    assert all(torch.equal(p, before[n]) for n, p in ref.named_parameters())


@pytest.fixture
def one_batch(tmp_path, taught_policy, compose_cfg, run_overrides):
    cfg = compose_cfg(run_overrides(tmp_path))
    trainer = make_trainer(cfg, taught_policy)
    rollout = trainer.collector.collect(trainer.train_envs, trainer.generator, trainer.run.rollout.sampling(),
                                        experience_provider=trainer.experience.provider)
    return trainer, build_step_batch(rollout, trainer.tokenizer.pad_token_id, 0.1)


def test_loss_is_finite_for_every_estimator(one_batch):
    trainer, batch = one_batch
    model = trainer.policy.model
    values = torch.zeros_like(batch.old_log_probs)
    _, pi2 = trainer.updater.log_probs(model, batch.packed, with_sum_pi_squared=True)
    names = supported_estimators()
    assert {"forge", "gigpo", "grpo", "rloo", "reinforce_plus_plus", "gae"} <= set(names)
    for name in names:
        algorithm = copy.deepcopy(trainer.algorithm)
        object.__setattr__(algorithm, "adv_estimator", name)
        adv, returns = compute_advantages(batch, algorithm, values=values, sum_pi_squared=pi2)
        assert adv.shape == batch.old_log_probs.shape and torch.isfinite(adv).all(), name
        assert (adv[batch.response_mask == 0] == 0).all(), name
        metrics = trainer.updater.update(batch, adv, batch.old_log_probs,
                                         ref_log_probs=batch.old_log_probs.clone())
        assert math.isfinite(metrics["actor/pg_loss"]) and math.isfinite(metrics["actor/grad_norm"]), name


def test_unsupported_estimators_are_named_in_the_error(one_batch):
    from agent_system.config_checks import ConfigError

    trainer, batch = one_batch
    for name in UNSUPPORTED:
        algorithm = copy.deepcopy(trainer.algorithm)
        object.__setattr__(algorithm, "adv_estimator", name)
        with pytest.raises(ConfigError, match=name):
            compute_advantages(batch, algorithm)


EXTRA = {"dro": {"dro_beta": 0.1}}


def test_loss_is_finite_for_every_policy_loss(one_batch):
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    trainer, batch = one_batch
    adv, _ = compute_advantages(batch, trainer.algorithm)
    assert {"vanilla", "gspo", "clip_cov", "kl_cov"} <= set(POLICY_LOSS_REGISTRY)
    for mode in sorted(POLICY_LOSS_REGISTRY):
        if mode == "bypass_mode":  # needs rollout-correction importance weights, which verl computes upstream
            continue
        updater = PolicyUpdater(trainer.policy.model, trainer.optimizer,
                                actor_config(mode, EXTRA.get(mode), ppo_micro_batch_size_per_gpu=4))
        metrics = updater.update(batch, adv, batch.old_log_probs)
        assert math.isfinite(metrics["actor/pg_loss"]), mode


def test_micro_batching_accumulates_the_mini_batch_gradient(one_batch):
    trainer, batch = one_batch
    adv, _ = compute_advantages(batch, trainer.algorithm)
    grads = []
    for micro in (1, len(batch)):
        model = copy.deepcopy(trainer.policy.model)
        optim = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: keep the weights, inspect the gradient
        PolicyUpdater(model, optim, actor_config(ppo_micro_batch_size_per_gpu=micro, grad_clip=1e9)).update(
            batch, adv, batch.old_log_probs)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6, rtol=1e-4)


def test_ppo_with_critic_trains_the_value_head(tmp_path, taught_policy, tokenizer, compose_cfg, run_overrides):
    from transformers import LlamaConfig, LlamaModel

    overrides = run_overrides(tmp_path, estimator="gae") + ["critic.enable=true"]
    cfg = compose_cfg(overrides)
    backbone = LlamaModel(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2))
    trainer = make_trainer(cfg, taught_policy, critic_backbone=backbone)
    head_before = trainer.critic.value_head.weight.detach().clone()
    metrics = trainer.train_iteration(0)
    assert math.isfinite(metrics["critic/vf_loss"])
    assert not torch.equal(trainer.critic.value_head.weight, head_before)


def test_dynamic_sampling_reports_its_rounds(tmp_path, taught_policy, compose_cfg, run_overrides):
    cfg = compose_cfg(run_overrides(tmp_path, estimator="grpo") + [
        "algorithm.filter_groups.enable=true", "algorithm.filter_groups.max_num_gen_batches=2",
        "actor_rollout_ref.actor.clip_ratio_high=0.28"])
    trainer = make_trainer(cfg, taught_policy)
    assert trainer.updater.actor.clip_ratio_high == pytest.approx(0.28)  # DAPO clip-higher
    metrics = trainer.train_iteration(0)
    assert 1 <= metrics["dynamic_sampling/num_gen_batches"] <= 2
    assert np.isfinite(metrics["actor/pg_loss"])


def test_lora_trains_adapters_only_and_the_reference_is_the_base_model(tmp_path, tokenizer, make_tiny, compose_cfg,
                                                                       run_overrides):
    from recipe.forge.runs.checkpoint import load_checkpoint
    from recipe.forge.hf.model_loading import PolicyConfig, build_policy

    def lora_policy():
        # o_proj and down_proj: the fixture model routes everything through them (its own weights there are 0).
        return build_policy(PolicyConfig(path="tiny", lora_rank=4, lora_alpha=8, target_modules=["o_proj", "down_proj"]),
                            model=make_tiny(seed=0), tokenizer=tokenizer)

    policy = lora_policy()
    cfg = compose_cfg(run_overrides(tmp_path) + ["trainer.save_freq=1"])
    trainer = make_trainer(cfg, policy)
    base_before = {n: p.detach().clone() for n, p in policy.model.named_parameters() if "lora_" not in n}
    trainer.fit()
    names = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    assert all(torch.equal(p, base_before[n]) for n, p in policy.model.named_parameters() if "lora_" not in n)

    rollout = trainer.collector.collect(trainer.train_envs, trainer.generator, trainer.run.rollout.sampling())
    batch = build_step_batch(rollout, tokenizer.pad_token_id, 0.1)
    with policy.reference_context():
        ref = trainer.updater.log_probs(policy.reference_model(), batch.packed)
    fresh = make_tiny(seed=0)  # the base model the adapters were added to
    assert torch.allclose(ref, trainer.updater.log_probs(fresh, batch.packed), atol=1e-5)
    tuned = trainer.updater.log_probs(policy.model, batch.packed)
    assert not torch.allclose(ref, tuned, atol=1e-6)  # the adapters changed the policy

    restored = lora_policy()
    load_checkpoint(tmp_path / "global_step_1", policy=restored, optimizer=torch.optim.AdamW(
        restored.trainable_parameters()), rng={})
    assert torch.allclose(trainer.updater.log_probs(restored.model, batch.packed), tuned, atol=1e-6)


def test_rollout_data_dir_holds_every_step_of_every_iteration(tmp_path, taught_policy, compose_cfg, run_overrides):
    import json

    from recipe.forge.experience.system import PROVISIONAL_BASE

    dump = tmp_path / "rollouts"
    cfg = compose_cfg(run_overrides(tmp_path / "run", iterations=2) + [f"trainer.rollout_data_dir={dump}"])
    trainer = make_trainer(cfg, taught_policy)
    history = trainer.fit()
    assert sorted(p.name for p in dump.iterdir()) == ["1.jsonl", "2.jsonl"]
    for row in history:
        lines = [json.loads(line) for line in (dump / f"{row['iteration']}.jsonl").read_text().splitlines()]
        assert len(lines) == row["num_steps"]  # one line per environment step
        assert {line["step"] for line in lines} == {row["iteration"]}
        episodes = {}
        for line in lines:
            episodes.setdefault(line["traj_uid"], []).append(line)
            assert "<|im_start|>assistant" in line["input"] and line["observation"] in line["input"]
            assert not line["valid"] or line["action"] in line["output"]
            assert line["cluster_id"] is not None and line["cluster_id"] < PROVISIONAL_BASE  # the driver's ids
        assert len(episodes) == row["num_trajectories"]
        for steps in episodes.values():
            assert [s["turn"] for s in steps] == list(range(len(steps)))
            assert steps[-1]["done"] or len(steps) == 3  # max_steps=3 in the tiny run
            assert sum(s["score"] for s in steps) == pytest.approx(steps[0]["episode_reward"])
        assert np.mean([all(s["success"] for s in steps) for steps in episodes.values()]) == pytest.approx(
            row["success_rate"])
