"""Fixtures of the verl-engine tests: a tiny local Llama model folder (config + byte-level BPE tokenizer with a
ChatML template, no weights, no downloads) and the composed run config."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}"
    "{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_model_dir(path: Path) -> Path:
    """A Llama config (2 layers, width 32) and a byte-level BPE tokenizer trained on Sokoban-like text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [
        "You are the player in a Sokoban puzzle. # wall _ floor O target X box P player",
        "<think>Push the box towards the target.</think><action>up</action> <action>down</action>",
        "<action>left</action> <action>right</action> system user assistant",
    ] * 20
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>", pad_token="<pad>", unk_token=None
    )
    fast.chat_template = CHATML
    path.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(path)
    LlamaConfig(
        vocab_size=len(fast),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        architectures=["LlamaForCausalLM"],
    ).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return build_tiny_model_dir(tmp_path_factory.mktemp("tiny_llama"))


def compose_run_config(overrides: list[str]):
    """recipe/forge/config/forge_trainer.yaml composed with ``overrides`` (Hydra compose API)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(REPO / "recipe" / "forge" / "config"), version_base=None):
        return compose(config_name="forge_trainer", overrides=overrides)


@pytest.fixture(scope="session")
def run_config_factory():
    return compose_run_config


os.environ.setdefault("VERL_LOGGING_LEVEL", "WARN")
