# Settings every distributed-engine (verl) example shares, whatever its environment; sourced by the scripts in
# examples/forge/ and by examples/common/alfworld_base.sh, not run on its own. Nothing here depends on the
# environment: batch and micro-batch sizes, lengths, lr, test_freq, training steps and experiment names stay in
# each script.
#
# Environment variables: N_GPUS (GPUs per node, default 8), TP (vLLM tensor parallel size, default 2).
#
# Arrays, each used as "${NAME[@]}" before a script's own overrides (later overrides win, "$@" last):
#   VERL_KL_LOSS       KL loss against the reference policy (0.01, low_var_kl) with the token-mean loss
#                      (GRPO, GiGPO, RLOO, PPO and SLEA-RL; DAPO and GSPO set their own loss instead)
#   VERL_VLLM_ROLLOUT  vLLM rollout servers (TP-way, 60% of GPU memory) and validation sampling at temperature 0.4
#   VERL_TRAINER       tracking (console + wandb, project slea_rl), one node of N_GPUS GPUs, a checkpoint every
#                      50 steps, one epoch (run_verl writes train_batch_size x total_training_steps tasks, so
#                      the epoch is the script's trainer.total_training_steps iterations)

N_GPUS=${N_GPUS:-8}
TP=${TP:-2}

VERL_KL_LOSS=(
    actor_rollout_ref.actor.use_kl_loss=True
    actor_rollout_ref.actor.kl_loss_coef=0.01
    actor_rollout_ref.actor.kl_loss_type=low_var_kl
    actor_rollout_ref.actor.loss_agg_mode=token-mean
)

VERL_VLLM_ROLLOUT=(
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.tensor_model_parallel_size="$TP"
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6
    actor_rollout_ref.rollout.val_kwargs.temperature=0.4
    actor_rollout_ref.rollout.val_kwargs.do_sample=True
)

VERL_TRAINER=(
    trainer.logger='[console,wandb]'
    trainer.project_name=slea_rl
    trainer.n_gpus_per_node="$N_GPUS"
    trainer.nnodes=1
    trainer.save_freq=50
    trainer.total_epochs=1
)
