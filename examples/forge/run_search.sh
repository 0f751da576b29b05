#!/usr/bin/env bash
# SLEA-RL on Search-R1 style QA with the distributed engine (verl 0.9.1).
# Reference settings: max_steps 10, gamma 0.90, step_advantage_w 0.5. Start the retriever first (see
# examples/search/) and point env.search.search_url at it; train/val questions come from the parquet files
# written by examples/data_preprocess/.
# The settings every verl example shares (KL loss, vLLM rollout, trainer; N_GPUS, TP) are in
# examples/common/verl_defaults.sh.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../common/python.sh"

source "$(dirname "${BASH_SOURCE[0]}")/../common/verl_defaults.sh"

MODEL=${MODEL:-Qwen/Qwen2.5-3B-Instruct}
SEARCH_URL=${SEARCH_URL:-http://127.0.0.1:8000/retrieve}
DATA_DIR=${DATA_DIR:-$HOME/data/searchR1}

"$PYTHON" -m recipe.forge.main_forge \
    "${VERL_KL_LOSS[@]}" \
    "${VERL_VLLM_ROLLOUT[@]}" \
    "${VERL_TRAINER[@]}" \
    trainer.engine=verl \
    algorithm.adv_estimator=forge \
    algorithm.gamma=0.90 \
    algorithm.invalid_action_penalty_coef=0.1 \
    algorithm.forge.step_advantage_w=0.5 \
    algorithm.forge.mode=mean_norm \
    algorithm.forge.checkpoint_dir=checkpoints/slea_rl/forge_search/library \
    env.env_name=search \
    env.max_steps=10 \
    env.history_length=4 \
    env.memory=search \
    env.rollout.n=5 \
    env.search.search_url="$SEARCH_URL" \
    env.search.topk=3 \
    env.search.train_data="$DATA_DIR/train.parquet" \
    env.search.val_data="$DATA_DIR/test.parquet" \
    data.train_batch_size=128 \
    data.val_batch_size=512 \
    data.max_prompt_length=4096 \
    data.max_response_length=512 \
    actor_rollout_ref.rollout.prompt_length=4096 \
    actor_rollout_ref.rollout.response_length=512 \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=64 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8 \
    trainer.experiment_name=forge_search_qwen2.5_3b \
    trainer.test_freq=10 \
    trainer.total_training_steps=200 \
    "$@"
