#!/usr/bin/env bash
# SLEA-RL on WebShop with the distributed engine (verl 0.9.1).
# Reference settings: max_steps 15, gamma 0.95, step_advantage_w 1.0. env.webshop.use_builtin_shop=True uses the
# generated offline shop; set it to False (with the WebShop package, its data, Java 21 and pyserini) for the
# real benchmark.
# The settings every verl example shares (KL loss, vLLM rollout, trainer; N_GPUS, TP) are in
# examples/common/verl_defaults.sh.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../common/python.sh"

source "$(dirname "${BASH_SOURCE[0]}")/../common/verl_defaults.sh"

MODEL=${MODEL:-Qwen/Qwen2.5-1.5B-Instruct}
BUILTIN_SHOP=${BUILTIN_SHOP:-True}

"$PYTHON" -m recipe.forge.main_forge \
    "${VERL_KL_LOSS[@]}" \
    "${VERL_VLLM_ROLLOUT[@]}" \
    "${VERL_TRAINER[@]}" \
    trainer.engine=verl \
    algorithm.adv_estimator=forge \
    algorithm.gamma=0.95 \
    algorithm.invalid_action_penalty_coef=0.1 \
    algorithm.forge.step_advantage_w=1.0 \
    algorithm.forge.mode=mean_norm \
    algorithm.forge.checkpoint_dir=checkpoints/slea_rl/forge_webshop/library \
    env.env_name=webshop \
    env.max_steps=15 \
    env.history_length=2 \
    env.rollout.n=8 \
    env.webshop.use_builtin_shop="$BUILTIN_SHOP" \
    data.train_batch_size=16 \
    data.val_batch_size=128 \
    data.max_prompt_length=4096 \
    data.max_response_length=512 \
    actor_rollout_ref.rollout.prompt_length=4096 \
    actor_rollout_ref.rollout.response_length=512 \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16 \
    trainer.experiment_name=forge_webshop_qwen2.5_1.5b \
    trainer.test_freq=5 \
    trainer.total_training_steps=200 \
    "$@"
