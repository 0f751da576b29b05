"""Tiny random causal LMs for benchmarks and smoke runs: built from a config, no download, any tokenizer."""

from __future__ import annotations

import torch


def tiny_llama(tokenizer, seed: int = 0, hidden_size: int = 32, layers: int = 2):
    """A random Llama with the tokenizer's vocabulary (SmolLM2's: about 1.6M embedding parameters)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, tie_word_embeddings=True,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.bos_token_id)
    return LlamaForCausalLM(config)


def answering_llama(tokenizer, seed: int = 0, strength: float = 20.0):
    """A tiny Llama whose weights are set so that it answers "<action>+</action>" or "<action>-</action>"
    about two times in three and ends early (invalid) otherwise, at temperature 1.

    The attention and MLP output projections are zero, so every layer passes the token embedding through and
    the next-token logits depend on the current token only; the untied LM head then encodes the bigram
    chain below. Rollouts with it hold valid and invalid actions and unequal rewards (a learning signal),
    and training changes every weight from there.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=False, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)
    model = LlamaForCausalLM(config)
    ids = lambda text: tokenizer(text, add_special_tokens=False).input_ids  # noqa: E731
    lt, action, gt, plus, minus, close = (ids(t)[0] for t in ("<", "action", ">", "+", "-", "</"))
    newline = ids("assistant\n")[-1]
    chain = {newline: [lt], lt: [action], action: [gt], gt: [plus, minus, tokenizer.eos_token_id],
             plus: [close], minus: [close], close: [action]}
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb = model.model.embed_tokens.weight
        unit = emb / emb.norm(dim=-1, keepdim=True)
        model.lm_head.weight.zero_()
        for current, nexts in chain.items():
            for nxt in nexts:
                model.lm_head.weight[nxt] += strength * unit[current] / config.hidden_size**0.5
    return model


def save_tiny_model_dir(path, seed: int = 0, taught: bool = True) -> str:
    """Write a tiny Llama (``answering_llama`` when ``taught``, else random) with SmolLM2's tokenizer as an HF
    folder at ``path`` (what the verl engine's workers and rollout servers load); returns the path."""
    from pathlib import Path

    from recipe.forge.hf.model_loading import load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m-instruct")
    model = answering_llama(tokenizer, seed) if taught else tiny_llama(tokenizer, seed)
    Path(path).mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def script_policy(model_path: str, tiny: bool = False):
    """A policy without a reference for benchmarks and probes: the model at ``model_path``, or (``tiny``) a tiny
    random Llama with SmolLM2's tokenizer, where only the plumbing's cost or behaviour matters."""
    from recipe.forge.hf.model_loading import PolicyConfig, build_policy, load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m-instruct" if tiny else model_path)
    model = tiny_llama(tokenizer) if tiny else None
    return build_policy(PolicyConfig(path=model_path, use_reference=False), model=model, tokenizer=tokenizer)


def actor_config(loss_mode: str = "vanilla", policy_loss: dict | None = None, **fields):
    """verl's actor config (FSDPActorConfig) with verl's defaults, for tests and benchmarks of the update: one
    copy per task (``rollout_n=1``) and 8 step samples per micro-batch unless ``fields`` say otherwise;
    ``policy_loss`` holds PolicyLossConfig fields besides ``loss_mode`` (clip_cov_ratio, ...)."""
    from verl.workers.config import FSDPActorConfig, PolicyLossConfig

    fields = {"rollout_n": 1, "ppo_micro_batch_size_per_gpu": 8, "use_torch_compile": False, **fields}
    return FSDPActorConfig(policy_loss=PolicyLossConfig(loss_mode=loss_mode, **(policy_loss or {})), **fields)
