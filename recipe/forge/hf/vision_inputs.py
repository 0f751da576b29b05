"""Image inputs of a vision-language policy (Qwen2.5-VL, Qwen3-VL) on the embedded engine.

A step's user turn holds ``[{"type": "image", "image": HxWx3 array}, {"type": "text", ...}]`` parts in image mode
(agent_system/multi_turn_rollout/injection.py). The model's processor turns such a chat into

* prompt ids in which each image is ``<|vision_start|>`` + one ``<|image_pad|>`` per image token + ``<|vision_end|>``;
* the images' patches, ``pixel_values`` (p, D), and their patch grids, ``image_grid_thw`` (k, 3), which the model's
  vision tower turns into the features that replace the pad tokens' embeddings.

Rows are kept apart (:class:`PromptImages`, one per prompt) so that a batch can be cut into micro-batches; a
forward pass concatenates the rows' patches in row order (:func:`batch_image_inputs`), which is the order of the
pad tokens in the batch's ``input_ids``. The step records keep the images themselves (in their messages, as
uint8 arrays), not the patches: the training batch re-runs the image processor on them
(:meth:`ImagePrompts.images`), which gives the same patches, and checks them against the recorded prompt ids.

Qwen-VL's rotary positions are 3-D (time, height, width: "mrope"): an image's tokens take positions from their
place in the patch grid, and the text after it continues from the largest position so far. They depend on the
whole prompt, not on a token's column, so the engine asks the model for them (:func:`mrope_position_ids`, the
model's own ``get_rope_index``) for the whole padded batch and never lets the model keep them as state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import nn

from agent_system.multi_turn_rollout.protocols import Message


@dataclass
class PromptImages:
    """The processed images of one prompt, in the order of its image tokens.

    Attributes:
        pixel_values: (p, D) float32, the patches of all its images (D = channels x 2 frames x patch x patch).
        image_grid_thw: (k, 3) int64, the (time, height, width) patch grid of each of its k images.
    """

    pixel_values: torch.Tensor
    image_grid_thw: torch.Tensor

    def to(self, device: torch.device) -> "PromptImages":
        return PromptImages(self.pixel_values.to(device), self.image_grid_thw.to(device))


def image_token_count(image_grid_thw: torch.Tensor, merge_size: int) -> int:
    """The image tokens of images whose patch grids are ``image_grid_thw`` ((k, 3) int): each grid's patches over
    the processor's spatial merge of ``merge_size`` x ``merge_size`` patches into one token."""
    return int(image_grid_thw.prod(dim=-1).sum()) // merge_size ** 2


def message_images(messages: Sequence[Message]) -> list[Any]:
    """The images of the chat's image parts (``{"type": "image", "image": ...}``), in order."""
    images = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            continue
        for part in content:
            if part.get("type") == "image":
                if part.get("image") is None:
                    raise ValueError("an image part of a message has no 'image' (an HxWx3 array or a PIL image)")
                images.append(part["image"])
    return images


class ImagePrompts:
    """Encodes chats with images by a vision-language model's processor (vision_processor.load_processor).

    Args:
        processor: a Qwen-VL processor (``apply_chat_template``, ``image_processor``, ``tokenizer``,
            ``image_token``).
    """

    def __init__(self, processor):
        self.processor = processor
        self.image_token_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
        self.merge_size = int(processor.image_processor.merge_size)

    def encode(self, messages: list[Message], suffix: str = "") -> tuple[list[int], PromptImages | None]:
        """(prompt ids with one pad token per image token, the prompt's images or None without any) of the chat
        rendered with the generation prompt, then ``suffix``."""
        text = self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + suffix
        images = message_images(messages)
        if not images:
            return self.processor.tokenizer(text, add_special_tokens=False).input_ids, None
        out = self.processor(text=[text], images=images, return_tensors="pt")
        return out["input_ids"][0].tolist(), PromptImages(out["pixel_values"], out["image_grid_thw"])

    def images(self, messages: list[Message], prompt_ids: Sequence[int]) -> PromptImages | None:
        """The images of ``messages`` processed again (the image processor alone) for the prompt ``prompt_ids``
        that :meth:`encode` gave (:meth:`process`)."""
        return self.process(message_images(messages), prompt_ids)

    def process(self, images: Sequence[Any], prompt_ids: Sequence[int]) -> PromptImages | None:
        """``images`` (HxWx3 arrays or PIL images, in the order of their tokens) processed by the image processor
        alone for the prompt ``prompt_ids`` (None without images); a ValueError when their image tokens and the
        ids' pad tokens differ in number."""
        pads = sum(1 for token in prompt_ids if token == self.image_token_id)
        processed = None
        tokens = 0
        if images:
            out = self.processor.image_processor(images=list(images), return_tensors="pt")
            processed = PromptImages(out["pixel_values"], out["image_grid_thw"])
            tokens = image_token_count(processed.image_grid_thw, self.merge_size)
        if pads != tokens:
            raise ValueError(f"the prompt ids hold {pads} image tokens but its {len(images)} image(s) make {tokens}: "
                             "the ids were not encoded with these images by this processor")
        return processed


def batch_image_inputs(rows: Sequence[PromptImages | None]) -> dict[str, torch.Tensor] | None:
    """``pixel_values`` (sum of p, D) and ``image_grid_thw`` (sum of k, 3) of the rows' images in row order; None
    when no row has an image."""
    present = [row for row in rows if row is not None]
    if not present:
        return None
    return {"pixel_values": torch.cat([row.pixel_values for row in present]),
            "image_grid_thw": torch.cat([row.image_grid_thw for row in present])}


def _rope_index_owner(model: nn.Module) -> nn.Module:
    """The submodule of ``model`` (plain or peft-wrapped) that computes its multimodal positions."""
    for module in model.modules():
        if hasattr(type(module), "get_rope_index"):
            return module
    raise ValueError(f"{type(model).__name__} has no get_rope_index: the engine feeds images to Qwen-VL-style "
                     "models (Qwen2.5-VL, Qwen3-VL) only")


def mrope_position_ids(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       image_grid_thw: torch.Tensor) -> torch.Tensor:
    """The model's 3-D rotary positions of a padded batch: (3, bs, L) int64, 0 on padding.

    Args:
        model: a Qwen-VL model (plain or peft-wrapped).
        input_ids: (bs, L) int64, images as their pad tokens.
        attention_mask: (bs, L) int64, 1 on real tokens.
        image_grid_thw: (k, 3) int64, the grids of the batch's k images in the order of their tokens.
    """
    owner = _rope_index_owner(model)
    image_token_id = model.config.image_token_id
    token_types = (input_ids == image_token_id).int()  # 0 text, 1 image (Qwen-VL's mm_token_type_ids)
    positions, _ = owner.get_rope_index(input_ids, mm_token_type_ids=token_types, image_grid_thw=image_grid_thw,
                                        attention_mask=attention_mask)
    return positions
