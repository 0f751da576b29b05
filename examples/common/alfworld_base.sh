# Shared settings of the ALFWorld baselines (examples/<algorithm>_trainer/run_alfworld.sh); sourced by them, not
# run on its own. Same environment settings as SLEA-RL's examples/forge/run_alfworld.sh: max_steps 50,
# gamma 0.95, 16 tasks x G=8, Qwen2.5-1.5B-Instruct, vLLM rollout, validation at temperature 0.4.
#
# Environment variables: MODEL (HF folder or hub id), ALFWORLD_DATA (official games; empty: the offline generated
# games), and N_GPUS, TP from examples/common/verl_defaults.sh (sourced here).
#
# ALFWORLD_BASE: the overrides every baseline shares, verl_defaults.sh's VERL_VLLM_ROLLOUT and VERL_TRAINER
# included. GRPO, GiGPO, RLOO, PPO and SLEA-RL add verl_defaults.sh's VERL_KL_LOSS (DAPO and GSPO set their own
# loss). A baseline adds its estimator and loss settings and its experiment name after these; extra
# command-line overrides go last and win.

source "$(dirname "${BASH_SOURCE[0]}")/verl_defaults.sh"

MODEL=${MODEL:-Qwen/Qwen2.5-1.5B-Instruct}
ALFWORLD_DATA=${ALFWORLD_DATA:-}

ALFWORLD_BASE=(
    "${VERL_VLLM_ROLLOUT[@]}"
    "${VERL_TRAINER[@]}"
    trainer.engine=verl
    algorithm.gamma=0.95
    algorithm.invalid_action_penalty_coef=0.1
    env.env_name=alfworld/AlfredTWEnv
    env.max_steps=50
    env.history_length=2
    env.rollout.n=8
    env.alfworld.data_path="$ALFWORLD_DATA"
    data.train_batch_size=16
    data.val_batch_size=128
    data.max_prompt_length=2048
    data.max_response_length=512
    actor_rollout_ref.rollout.prompt_length=2048
    actor_rollout_ref.rollout.response_length=512
    actor_rollout_ref.model.path="$MODEL"
    actor_rollout_ref.model.use_remove_padding=True
    actor_rollout_ref.model.enable_gradient_checkpointing=True
    actor_rollout_ref.actor.optim.lr=1e-6
    actor_rollout_ref.actor.ppo_mini_batch_size=16
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8
    trainer.test_freq=5
    trainer.total_training_steps=150
)
