#!/usr/bin/env bash
# GiGPO with dynamic sampling on ALFWorld with the distributed engine (verl 0.9.1), a baseline for SLEA-RL
# (examples/forge/run_alfworld.sh). Shared settings (max_steps 50, gamma 0.95, 16 tasks x G=8, model, rollout, trainer):
# examples/common/alfworld_base.sh; the overrides below are this baseline's own.
# Dynamic sampling: task groups whose episode returns are all equal carry no signal and are dropped and
# resampled (verl's replay-buffer group filter on reward_extra_info.episode_return).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../common/python.sh"

source "$(dirname "${BASH_SOURCE[0]}")/../common/alfworld_base.sh"

"$PYTHON" -m recipe.forge.main_forge \
    "${ALFWORLD_BASE[@]}" \
    algorithm.adv_estimator=gigpo \
    algorithm.gigpo.step_advantage_w=1.0 \
    algorithm.gigpo.mode=mean_norm \
    algorithm.filter_groups.enable=True \
    algorithm.filter_groups.metric=episode_return \
    algorithm.filter_groups.max_inflight_gen_batches=2 \
    "${VERL_KL_LOSS[@]}" \
    trainer.experiment_name=gigpo_dynamic_alfworld_qwen2.5_1.5b \
    "$@"
