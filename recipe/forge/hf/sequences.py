"""Packing prompt/response token lists into model inputs, and the forward passes the update needs.

Layout (verl's): prompts left-padded to P, responses right-padded to R, concatenated to (bs, P + R).
Position ids count only real tokens, so a left-padded row sees the same positions as an unpadded one.
The logits that predict response token j sit at column P - 1 + j.

With ``share_prefix`` the forward runs the prompts' shared tokens once (shared_prefix.py) and the model only
sees each row's tail (last prompt token + response); the outputs equal the plain pass's last R + 1 columns.

A vision-language policy's rows may carry images (``PackedSequences.images``, vision_inputs.py): a batch with an
image runs the plain pass with the images' patches and the model's 3-D rotary positions, whatever
``share_prefix`` says (the prefix passes would need the image features in the shared tokens); a batch without
one runs as text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from recipe.forge.hf.shared_prefix import SharedPrefix, tail_inputs
from recipe.forge.hf.vision_inputs import PromptImages, batch_image_inputs, mrope_position_ids


@dataclass
class PackedSequences:
    """Model inputs for a batch of (prompt, response) pairs.

    Attributes:
        input_ids: (bs, P + R) int64.
        attention_mask: (bs, P + R) int64, 1 on real tokens.
        position_ids: (bs, P + R) int64.
        responses: (bs, R) int64 response tokens (pad after the end).
        response_mask: (bs, R) float32, 1 on response tokens.
        prompt_length: P.
        images: each row's images (None: a row without any), or None for a text-only batch.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    responses: torch.Tensor
    response_mask: torch.Tensor
    prompt_length: int
    images: tuple[PromptImages | None, ...] | None = None

    def to(self, device: torch.device) -> "PackedSequences":
        images = None if self.images is None else tuple(None if i is None else i.to(device) for i in self.images)
        return PackedSequences(self.input_ids.to(device), self.attention_mask.to(device), self.position_ids.to(device),
                               self.responses.to(device), self.response_mask.to(device), self.prompt_length, images)

    def select(self, rows: torch.Tensor) -> "PackedSequences":
        images = None if self.images is None else tuple(self.images[i] for i in rows.tolist())
        return PackedSequences(self.input_ids[rows], self.attention_mask[rows], self.position_ids[rows],
                               self.responses[rows], self.response_mask[rows], self.prompt_length, images)

    def prompts(self) -> list[list[int]]:
        """Each row's prompt tokens, without padding."""
        lengths = self.attention_mask[:, :self.prompt_length].sum(dim=1).tolist()
        ids = self.input_ids[:, :self.prompt_length].tolist()
        return [row[self.prompt_length - n:] for row, n in zip(ids, lengths)]


def pack(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int,
         min_response_length: int = 1, images: Sequence[PromptImages | None] | None = None) -> PackedSequences:
    """Left-pad prompts and right-pad responses (to at least ``min_response_length``) into one (bs, P + R)
    batch. With ``min_response_length=0`` and empty responses this is a left-padded prompt batch (R = 0).
    ``images``: the prompts' images (vision_inputs.py), one entry a prompt."""
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    if images is not None and len(images) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(images)} image entries")
    bs = len(prompts)
    p_len = max((len(p) for p in prompts), default=0)
    r_len = max(max((len(r) for r in responses), default=0), min_response_length)
    input_ids = torch.full((bs, p_len + r_len), pad_id, dtype=torch.long)
    attention = torch.zeros((bs, p_len + r_len), dtype=torch.long)
    for row, (prompt, response) in enumerate(zip(prompts, responses)):
        input_ids[row, p_len - len(prompt):p_len] = torch.as_tensor(prompt, dtype=torch.long)
        input_ids[row, p_len:p_len + len(response)] = torch.as_tensor(response, dtype=torch.long)
        attention[row, p_len - len(prompt):p_len + len(response)] = 1
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    responses_t = input_ids[:, p_len:]
    response_mask = attention[:, p_len:].to(torch.float32)
    return PackedSequences(input_ids, attention, positions, responses_t, response_mask, p_len,
                           None if images is None else tuple(images))


def forward_inputs(model: nn.Module, packed: PackedSequences, share_prefix: bool) -> dict:
    """Keyword arguments of ``model``'s forward over ``packed`` whose last R + 1 output columns are the last
    prompt token's and the R response tokens'.

    Plain: the whole (bs, P + R) batch. ``share_prefix``: the prompts' shared tokens run first (through the
    KV cache, shared_prefix.py) and the arguments cover only the (bs, R + 1) tails on top of that cache.
    A batch with images: the plain pass, plus ``pixel_values``, ``image_grid_thw`` and (3, bs, P + R) positions."""
    image_inputs = None if packed.images is None else batch_image_inputs(packed.images)
    if image_inputs is not None:
        positions = mrope_position_ids(model, packed.input_ids, packed.attention_mask, image_inputs["image_grid_thw"])
        return {"input_ids": packed.input_ids, "attention_mask": packed.attention_mask, "position_ids": positions,
                **image_inputs, "use_cache": False}
    if not share_prefix:
        return {"input_ids": packed.input_ids, "attention_mask": packed.attention_mask,
                "position_ids": packed.position_ids, "use_cache": False}
    prefix = SharedPrefix.of_prompts(packed.prompts())
    device = packed.responses.device
    tail_ids = torch.cat([prefix.last_ids.to(device).unsqueeze(1), packed.responses], dim=1)
    tail_mask = torch.cat([torch.ones_like(tail_ids[:, :1]), packed.attention_mask[:, packed.prompt_length:]], dim=1)
    return tail_inputs(model, prefix, tail_ids, tail_mask)


def response_logits(model: nn.Module, packed: PackedSequences, share_prefix: bool = False) -> torch.Tensor:
    """Logits predicting each response token: (bs, R, vocab), in the model's dtype; the same with and
    without ``share_prefix`` (forward_inputs)."""
    r = packed.responses.shape[1]
    # Only the last R + 1 positions feed the LM head: its vocab-sized matmul is skipped for the prompt.
    out = model(**forward_inputs(model, packed, share_prefix), logits_to_keep=r + 1)
    return out.logits[:, :r, :]


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T) gathered at ``tokens``.

    Args:
        logits: (bs, R, vocab).
        tokens: (bs, R) int64.

    Returns:
        (bs, R) float32 log-probs.
    """
    scaled = logits.float() / temperature
    return torch.gather(F.log_softmax(scaled, dim=-1), -1, tokens.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of softmax(logits / T): (bs, R, vocab) -> (bs, R)."""
    logp = F.log_softmax(logits.float() / temperature, dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)
