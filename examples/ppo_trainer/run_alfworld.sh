#!/usr/bin/env bash
# PPO with a learned critic (GAE) on ALFWorld with the distributed engine (verl 0.9.1), a baseline for SLEA-RL
# (examples/forge/run_alfworld.sh). Shared settings (max_steps 50, gamma 0.95, 16 tasks x G=8, model, rollout, trainer):
# examples/common/alfworld_base.sh; the overrides below are this baseline's own.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../common/python.sh"

source "$(dirname "${BASH_SOURCE[0]}")/../common/alfworld_base.sh"

"$PYTHON" -m recipe.forge.main_forge \
    "${ALFWORLD_BASE[@]}" \
    algorithm.adv_estimator=gae \
    algorithm.lam=0.95 \
    critic.model.path="$MODEL" \
    critic.optim.lr=1e-5 \
    critic.ppo_micro_batch_size_per_gpu=8 \
    critic.model.enable_gradient_checkpointing=True \
    trainer.critic_warmup=0 \
    "${VERL_KL_LOSS[@]}" \
    trainer.experiment_name=ppo_alfworld_qwen2.5_1.5b \
    "$@"
