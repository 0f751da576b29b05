#!/usr/bin/env bash
# SLEA-RL on ALFWorld with the distributed engine (verl 0.9.1: Ray, FSDP actor, vLLM rollout servers).
# Reference settings: max_steps 50, gamma 0.95, step_advantage_w 1.0; 16 tasks x G=8 per iteration. The settings it
# shares with the baselines (environment, model, rollout, trainer) are in examples/common/alfworld_base.sh.
# Usage: bash examples/forge/run_alfworld.sh [extra Hydra overrides]
#   MODEL=/path/or/hub-id N_GPUS=8 bash examples/forge/run_alfworld.sh trainer.total_training_steps=100
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../common/python.sh"

source "$(dirname "${BASH_SOURCE[0]}")/../common/alfworld_base.sh"

"$PYTHON" -m recipe.forge.main_forge \
    "${ALFWORLD_BASE[@]}" \
    "${VERL_KL_LOSS[@]}" \
    algorithm.adv_estimator=forge \
    algorithm.forge.step_advantage_w=1.0 \
    algorithm.forge.mode=mean_norm \
    algorithm.forge.retrieval_mode=observation \
    algorithm.forge.top_k_golden=2 \
    algorithm.forge.top_k_warning=1 \
    algorithm.forge.checkpoint_dir=checkpoints/slea_rl/forge_alfworld/library \
    actor_rollout_ref.actor.fsdp_config.param_offload=False \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=False \
    trainer.experiment_name=forge_alfworld_qwen2.5_1.5b \
    "$@"
