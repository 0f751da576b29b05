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
