#!/usr/bin/env bash
# SLEA-RL on ALFWorld with LoRA adapters (rank 64) on a 7B model: the actor trains only the adapters, vLLM
# serves the base model plus the adapter synced each iteration (verl 0.9.1). Everything else is
# examples/forge/run_alfworld.sh's, through the shared examples/common/alfworld_base.sh.
# Usage: bash examples/forge/run_alfworld_lora.sh [extra Hydra overrides]
#   MODEL=/path/or/hub-id N_GPUS=8 bash examples/forge/run_alfworld_lora.sh
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../common/python.sh"

MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}
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
    algorithm.forge.checkpoint_dir=checkpoints/slea_rl/forge_alfworld_lora/library \
    actor_rollout_ref.model.lora_rank=64 \
    actor_rollout_ref.model.lora_alpha=32 \
    actor_rollout_ref.model.target_modules=all-linear \
    actor_rollout_ref.rollout.load_format=safetensors \
    actor_rollout_ref.rollout.layered_summon=True \
    actor_rollout_ref.actor.optim.lr=3e-6 \
    actor_rollout_ref.actor.fsdp_config.param_offload=False \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=False \
    trainer.experiment_name=forge_alfworld_qwen2.5_7b_lora \
    "$@"
