"""A tiny random vision-language model for tests and CPU trials, built from a config (no download).

``save_tiny_vlm_dir(path, family)`` writes a Qwen2.5-VL (``qwen2_5_vl``) or Qwen3-VL (``qwen3_vl``) model as a
plain Hugging Face folder: a language model of 2 layers and width 64, a vision tower of 2 blocks and width 32,
random weights (about 3.3M parameters, 16 MB), SmolLM2's tokenizer with Qwen's vision tokens added, and an image
processor that resizes every image to about 56x56 pixels (64x64 for Qwen3-VL's 16-pixel patches), so that an
image is 4 image tokens. The chat template is Qwen's: an image part of a user turn becomes
``<|vision_start|><|image_pad|><|vision_end|>``, which the processor expands to one pad per image token.

The folder loads with ``load_processor`` (vision_processor.py; plain ``AutoProcessor.from_pretrained`` where
torchvision is installed) and ``AutoModelForImageTextToText.from_pretrained``. Its video processor is
transformers' base one: the tiny model takes images, not videos.
"""

from __future__ import annotations

from pathlib import Path

import torch

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>")
FAMILIES = ("qwen2_5_vl", "qwen3_vl")
TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 4096}
VISION = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
          "out_hidden_size": TEXT["hidden_size"]}
# The three multimodal rotary sections (time, height, width) add up to half a head (64 / 4 heads = 16 dims).
FAMILY_SETTINGS = {
    "qwen2_5_vl": {"patch_size": 14, "mrope_section": [2, 3, 3], "default_system": "You are a helpful assistant.",
                   "vision": {"fullatt_block_indexes": [1], "window_size": 112},
                   "image_mean": [0.48145466, 0.4578275, 0.40821073],
                   "image_std": [0.26862954, 0.26130258, 0.27577711]},
    "qwen3_vl": {"patch_size": 16, "mrope_section": [4, 2, 2], "default_system": None,
                 "vision": {"deepstack_visual_indexes": [1], "num_position_embeddings": 256},
                 "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]},
}
MERGE_SIZE = 2  # 2x2 patches make one image token


def chat_template(default_system: str | None) -> str:
    """Qwen-VL's ChatML template (images only); ``default_system``: the system turn put first when the messages
    have none (Qwen2.5-VL's), or None (Qwen3-VL)."""
    default = ("{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
               f"{default_system}<|im_end|>\n{{% endif %}}") if default_system else ""
    return (
        "{% for message in messages %}" + default
        + "<|im_start|>{{ message['role'] }}\n"
        "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
        "{% else %}{% for content in message['content'] %}"
        "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
        "<|vision_start|><|image_pad|><|vision_end|>"
        "{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
        "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )


def _vision_tokenizer():
    """SmolLM2's tokenizer with the vision tokens added (ids 49152..49156 after its 49152)."""
    from recipe.forge.hf.model_loading import load_tokenizer
    from recipe.forge.hf.model_paths import SMOLLM2_ALIAS

    tokenizer = load_tokenizer(SMOLLM2_ALIAS)
    tokenizer.add_special_tokens({"additional_special_tokens": list(VISION_TOKENS)})
    return tokenizer


def _model(family: str, tokenizer, seed: int):
    from transformers import (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen3VLConfig,
                              Qwen3VLForConditionalGeneration)

    settings = FAMILY_SETTINGS[family]
    config_class, model_class = {"qwen2_5_vl": (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration),
                                 "qwen3_vl": (Qwen3VLConfig, Qwen3VLForConditionalGeneration)}[family]
    ids = dict(zip(VISION_TOKENS, tokenizer.convert_tokens_to_ids(list(VISION_TOKENS))))
    text = {**TEXT, "vocab_size": len(tokenizer), "head_dim": TEXT["hidden_size"] // TEXT["num_attention_heads"],
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": settings["mrope_section"]},
            "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id}
    vision = {**VISION, **settings["vision"], "patch_size": settings["patch_size"], "spatial_merge_size": MERGE_SIZE}
    config = config_class(text_config=text, vision_config=vision, tie_word_embeddings=True,
                          image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                          vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    torch.manual_seed(seed)
    return model_class(config)


def _processor(family: str, tokenizer):
    from transformers import Qwen2_5_VLProcessor, Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.video_processing_utils import BaseVideoProcessor

    from recipe.forge.hf.vision_processor import allow_processors_without_torchvision

    allow_processors_without_torchvision()
    settings = FAMILY_SETTINGS[family]
    side = settings["patch_size"] * MERGE_SIZE * 2  # 2x2 image tokens
    images = Qwen2VLImageProcessorPil(patch_size=settings["patch_size"], merge_size=MERGE_SIZE, min_pixels=side * side,
                                      max_pixels=side * side, image_mean=settings["image_mean"],
                                      image_std=settings["image_std"])
    template = chat_template(settings["default_system"])
    tokenizer.chat_template = template  # the tokenizer alone renders a chat as the processor does
    processor_class = {"qwen2_5_vl": Qwen2_5_VLProcessor, "qwen3_vl": Qwen3VLProcessor}[family]
    return processor_class(image_processor=images, tokenizer=tokenizer, video_processor=BaseVideoProcessor(),
                           chat_template=template)


def save_tiny_vlm_dir(path: str | Path, family: str = "qwen2_5_vl", seed: int = 0) -> str:
    """Write the tiny ``family`` model (one of :data:`FAMILIES`) with its processor as an HF folder at ``path``
    (created if missing); returns the path."""
    if family not in FAMILIES:
        raise ValueError(f"family={family!r} is not one of {list(FAMILIES)}")
    folder = Path(path).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} exists and is not a folder")
    tokenizer = _vision_tokenizer()
    model = _model(family, tokenizer, seed)
    processor = _processor(family, tokenizer)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return str(folder)
