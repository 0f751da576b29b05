#!/usr/bin/env bash
# Prompt-only SLEA-RL (the training-free baseline): no gradient updates. The policy is any OpenAI-compatible
# chat endpoint (GPT-4o, a vLLM or SGLang server, ...); the environments, the step-level retrieval and the
# library evolution are the same as in training. Metrics show how much the evolving library alone helps.
#   API_BASE=http://127.0.0.1:8000/v1 API_MODEL=Qwen/Qwen2.5-7B-Instruct bash examples/prompt_only/run_api_sokoban.sh
#   (the API key is read from the environment variable named by trainer.api.api_key_env, OPENAI_API_KEY)
# Visual Sokoban: append env.sokoban.mode=rgb_array. Each observation is then sent as a PNG image_url part before
# the prompt, so the endpoint's model must take images (GPT-4o, GPT-4o-mini, a vLLM server of Qwen2.5-VL).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../common/python.sh"

API_BASE=${API_BASE:-https://api.openai.com/v1}
API_MODEL=${API_MODEL:-gpt-4o-mini}

"$PYTHON" -m recipe.forge.main_forge \
    trainer.engine=api \
    trainer.api.base_url="$API_BASE" \
    trainer.api.model="$API_MODEL" \
    trainer.api.api_key_env=OPENAI_API_KEY \
    trainer.api.max_concurrency=16 \
    algorithm.adv_estimator=forge \
    algorithm.forge.warmup_iterations=0 \
    algorithm.forge.min_library_size=0 \
    algorithm.forge.extractor=rule \
    algorithm.forge.checkpoint_dir=checkpoints/slea_rl/prompt_only_sokoban/library \
    env.env_name=sokoban \
    env.sokoban.mode=text \
    env.max_steps=15 \
    env.rollout.n=4 \
    data.train_batch_size=16 \
    data.val_batch_size=64 \
    actor_rollout_ref.rollout.temperature=0.7 \
    actor_rollout_ref.rollout.response_length=256 \
    trainer.project_name=slea_rl \
    trainer.experiment_name=prompt_only_sokoban \
    trainer.logger='[console]' \
    trainer.total_training_steps=20 \
    trainer.test_freq=5 \
    "$@"
