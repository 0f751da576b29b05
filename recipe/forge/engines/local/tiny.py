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


def script_policy(model_path: str, tiny: bool = False):
    """A policy without a reference for benchmarks and probes: the model at ``model_path``, or (``tiny``) a tiny
    random Llama with SmolLM2's tokenizer, where only the plumbing's cost or behaviour matters."""
    from recipe.forge.engines.local.model_loading import PolicyConfig, build_policy, load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m-instruct" if tiny else model_path)
    model = tiny_llama(tokenizer) if tiny else None
    return build_policy(PolicyConfig(path=model_path, use_reference=False), model=model, tokenizer=tokenizer)
