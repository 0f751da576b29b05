#!/usr/bin/env bash
# SLEA-RL on Gym Cards with a vision-language model (Qwen3-VL): the cards are rendered as an image.
# ENV_NAME: gym_cards/NumberLine-v0 (10 steps), gym_cards/EZPoints-v0 (8), gym_cards/Points24-v0,
# gym_cards/Blackjack-v0 (15). The anchor observation for retrieval and step groups is the text form of the
# same state. For Qwen2.5-VL, set MODEL=Qwen/Qwen2.5-VL-3B-Instruct.
# The settings every verl example shares (KL loss, vLLM rollout, trainer; N_GPUS, TP) are in
# examples/common/verl_defaults.sh.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../common/python.sh"

source "$(dirname "${BASH_SOURCE[0]}")/../common/verl_defaults.sh"

MODEL=${MODEL:-Qwen/Qwen3-VL-4B-Instruct}
ENV_NAME=${ENV_NAME:-gym_cards/EZPoints-v0}
MAX_STEPS=${MAX_STEPS:-8}

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
    algorithm.forge.checkpoint_dir=checkpoints/slea_rl/forge_gym_cards/library \
    env.env_name="$ENV_NAME" \
    env.max_steps="$MAX_STEPS" \
    env.history_length=2 \
    env.rollout.n=8 \
    env.gym_cards.mode=rgb_array \
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
    trainer.experiment_name=forge_gym_cards_qwen3_vl_4b \
    trainer.test_freq=5 \
    trainer.total_training_steps=150 \
    "$@"
