#!/usr/bin/env bash
# RLOO (leave-one-out episode baseline) on ALFWorld with the distributed engine (verl 0.9.1), a baseline for SLEA-RL
# (examples/forge/run_alfworld.sh). Shared settings (max_steps 50, gamma 0.95, 16 tasks x G=8, model, rollout, trainer):
# examples/common/alfworld_base.sh; the overrides below are this baseline's own.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../common/python.sh"

source "$(dirname "${BASH_SOURCE[0]}")/../common/alfworld_base.sh"

"$PYTHON" -m recipe.forge.main_forge \
    "${ALFWORLD_BASE[@]}" \
    algorithm.adv_estimator=rloo \
    "${VERL_KL_LOSS[@]}" \
    trainer.experiment_name=rloo_alfworld_qwen2.5_1.5b \
    "$@"
