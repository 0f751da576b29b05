#!/usr/bin/env bash
# SLEA-RL on visual Sokoban (6x6, 1 box) with a vision-language model and the distributed engine.
# Reference settings: max_steps 15, gamma 0.95, step_advantage_w 1.0. The observation is an RGB image of the room
# (env.sokoban.mode=rgb_array); the anchor observation used for retrieval and step groups is the room's text
# grid. For a text-only model use env.sokoban.mode=text and an instruct LLM.
# The settings every verl example shares (KL loss, vLLM rollout, trainer; N_GPUS, TP) are in
# examples/common/verl_defaults.sh.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../common/python.sh"

source "$(dirname "${BASH_SOURCE[0]}")/../common/verl_defaults.sh"

MODEL=${MODEL:-Qwen/Qwen2.5-VL-3B-Instruct}

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
    algorithm.forge.checkpoint_dir=checkpoints/slea_rl/forge_sokoban/library \
    env.env_name=sokoban \
    env.max_steps=15 \
    env.history_length=2 \
    env.rollout.n=8 \
    env.sokoban.mode=rgb_array \
    env.sokoban.dim_room='[6,6]' \
    env.sokoban.num_boxes=1 \
    data.train_batch_size=32 \
    data.val_batch_size=128 \
    data.max_prompt_length=1536 \
    data.max_response_length=512 \
    actor_rollout_ref.rollout.prompt_length=1536 \
    actor_rollout_ref.rollout.response_length=512 \
    data.image_key=images \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.rollout.enable_chunked_prefill=False \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16 \
    trainer.experiment_name=forge_sokoban_qwen2.5_vl_3b \
    trainer.test_freq=5 \
    trainer.total_training_steps=150 \
    "$@"
