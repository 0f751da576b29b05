#!/usr/bin/env bash
# GSPO (sequence-level importance ratio) on ALFWorld with the distributed engine (verl 0.9.1), a baseline for SLEA-RL
# (examples/forge/run_alfworld.sh). Shared settings (max_steps 50, gamma 0.95, 16 tasks x G=8, model, rollout, trainer):
# examples/common/alfworld_base.sh; the overrides below are this baseline's own.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../common/python.sh"

source "$(dirname "${BASH_SOURCE[0]}")/../common/alfworld_base.sh"

"$PYTHON" -m recipe.forge.main_forge \
    "${ALFWORLD_BASE[@]}" \
    algorithm.adv_estimator=grpo \
    actor_rollout_ref.actor.policy_loss.loss_mode=gspo \
    actor_rollout_ref.actor.clip_ratio_low=0.0003 \
    actor_rollout_ref.actor.clip_ratio_high=0.0004 \
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean \
    actor_rollout_ref.actor.use_kl_loss=False \
    trainer.experiment_name=gspo_alfworld_qwen2.5_1.5b \
    "$@"
