"""Running the tokens that prompts share once, through the model's KV cache.

The step samples of a batch repeat most of their prompt: the chat template, the system prompt and the task's
instructions are the same in every row, and rows in the same state carry the same whole prompt. Each prompt
without its last token is split into

* the common part: the longest prefix of every prompt, run once at batch 1;
* the rest: the distinct remainders after the common part, run once each (batch g, right-padded) on top of
  the common part's cache;

and the cache is then expanded to the m rows. Each row's tail, its last prompt token followed by its response,
runs on top of that cache with the positions it has in the full sequence, so its outputs equal those of a
plain forward over the whole (prompt, response) row; gradients flow back through the cache into the shared
part, summed over the rows that read it, as in the plain pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn


@dataclass
class SharedPrefix:
    """How the prompts of m rows share their tokens (each prompt without its last token).

    Attributes:
        common_ids: (1, a) the tokens every prompt starts with.
        rest_ids: (g, b) the g distinct remainders after the common part, right-padded with token 0 (masked).
        rest_mask: (g, b) int64, 1 on the remainders' tokens.
        rest_of_row: (m,) int64, the remainder of each row.
        last_ids: (m,) int64, each prompt's last token (the first tail token).
        prompt_lengths: (m,) int64, the prompts' lengths.
    """

    common_ids: torch.Tensor
    rest_ids: torch.Tensor
    rest_mask: torch.Tensor
    rest_of_row: torch.Tensor
    last_ids: torch.Tensor
    prompt_lengths: torch.Tensor

    @classmethod
    def of_prompts(cls, prompts: Sequence[Sequence[int]]) -> "SharedPrefix":
        """The split of ``prompts`` (m token lists, none empty)."""
        if not prompts:
            raise ValueError("shared-prefix forward of an empty batch")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("shared-prefix forward of a row with an empty prompt: no token predicts its "
                             "first response token")
        heads = [list(p[:-1]) for p in prompts]
        common = common_prefix_length(heads)
        rests: dict[tuple[int, ...], int] = {}
        rest_of_row = [rests.setdefault(tuple(h[common:]), len(rests)) for h in heads]
        width = max(len(r) for r in rests)
        rest_ids = torch.zeros((len(rests), width), dtype=torch.long)
        rest_mask = torch.zeros((len(rests), width), dtype=torch.long)
        for rest, g in rests.items():
            rest_ids[g, :len(rest)] = torch.as_tensor(rest, dtype=torch.long)
            rest_mask[g, :len(rest)] = 1
        return cls(
            common_ids=torch.as_tensor(heads[0][:common], dtype=torch.long).reshape(1, common),
            rest_ids=rest_ids,
            rest_mask=rest_mask,
            rest_of_row=torch.as_tensor(rest_of_row, dtype=torch.long),
            last_ids=torch.as_tensor([p[-1] for p in prompts], dtype=torch.long),
            prompt_lengths=torch.as_tensor([len(p) for p in prompts], dtype=torch.long),
        )

    @property
    def rows(self) -> int:
        return len(self.rest_of_row)

    def prefix_tokens(self) -> int:
        """Token positions the prefix passes run: a + g * b (padding included)."""
        return self.common_ids.shape[1] + self.rest_ids.numel()


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix all ``sequences`` share."""
    shortest = min(len(s) for s in sequences)
    first = sequences[0]
    for i in range(shortest):
        token = first[i]
        if any(s[i] != token for s in sequences):
            return i
    return shortest


def check_cache_kept(model: nn.Module) -> None:
    """The prefix passes hand their keys and values on through the KV cache, which Hugging Face's gradient
    checkpointing drops in training mode (with or without grad): refuse rather than run the tails without their
    prompts."""
    if model.training and getattr(model, "is_gradient_checkpointing", False):
        raise ValueError("the shared-prompt-prefix forward needs the KV cache, which gradient checkpointing drops "
                         "in training mode: run the plain forward (share_prefix=False, which the trainer picks "
                         "under actor_rollout_ref.model.enable_gradient_checkpointing=true)")


def select_cache_rows(cache, rows: torch.Tensor) -> None:
    """Keep ``rows`` (m,) of ``cache``'s batch, in place: ``cache.batch_select_indices(rows)`` with ``index_select``.

    The same rows; the difference is the backward. Rows that read one cache row add their gradients into it:
    ``index_select``'s backward (``index_add_``) adds them in a fixed order, advanced indexing's (``index_put_`` with
    accumulate, what ``batch_select_indices`` runs) in a thread-dependent one on a CPU. With more than one thread,
    two runs of the same fp32 update then differed in the last bits (weights 3e-7 apart after one iteration of the
    main job), so no resumed run could equal the uninterrupted one. A cache layer that is not a plain key/value
    layer selects its rows its own way."""
    from transformers.cache_utils import DynamicLayer

    for layer in cache.layers:
        if isinstance(layer, DynamicLayer) and layer.get_seq_length() > 0:
            layer.keys = layer.keys.index_select(0, rows)
            layer.values = layer.values.index_select(0, rows)
        else:
            layer.batch_select_indices(rows)


def tail_inputs(model: nn.Module, prefix: SharedPrefix, tail_ids: torch.Tensor, tail_mask: torch.Tensor) -> dict:
    """Run the shared prefix through ``model``'s decoder and return the keyword arguments of the tail's forward.

    The prefix passes use ``model.get_decoder()`` (no LM head); the caller runs ``model(**inputs, ...)``, whose
    t output columns belong to the tail tokens.

    Args:
        model: a causal LM (plain or peft-wrapped) or a decoder backbone.
        prefix: the rows' split (``SharedPrefix.of_prompts``).
        tail_ids: (m, t) int64, each row's last prompt token then its right-padded response.
        tail_mask: (m, t) int64, 1 on real tail tokens.

    Returns:
        ``input_ids`` (m, t), ``attention_mask`` (m, K + t) over the cache's K columns and the tail,
        ``position_ids`` (m, t) (prompt length - 1 onwards), ``past_key_values`` (the cache expanded to the m
        rows, or None when the prompts are single tokens: the model then starts one) and ``use_cache``.
    """
    decoder = model.get_decoder()
    check_cache_kept(decoder)
    device = tail_ids.device
    m = prefix.rows
    cache, row_source = None, torch.zeros(m, dtype=torch.long, device=device)  # the cache row each row reads
    common = prefix.common_ids.to(device)
    if common.shape[1]:
        out = decoder(input_ids=common, attention_mask=torch.ones_like(common),
                      position_ids=torch.arange(common.shape[1], device=device).unsqueeze(0), use_cache=True)
        cache = out.past_key_values
    rest_ids, rest_mask = prefix.rest_ids.to(device), prefix.rest_mask.to(device)
    a, (g, b) = common.shape[1], rest_ids.shape
    if b:
        if cache is not None:
            select_cache_rows(cache, torch.zeros(g, dtype=torch.long, device=device))
        positions = a + torch.arange(b, device=device).unsqueeze(0).expand(g, b)
        out = decoder(input_ids=rest_ids, attention_mask=torch.cat([rest_mask.new_ones((g, a)), rest_mask], dim=1),
                      position_ids=positions, past_key_values=cache, use_cache=True)
        cache, row_source = out.past_key_values, prefix.rest_of_row.to(device)
    if cache is not None:
        select_cache_rows(cache, row_source)
    cache_mask = torch.cat([rest_mask.new_ones((m, a)), rest_mask[prefix.rest_of_row.to(device)]], dim=1)
    t = tail_ids.shape[1]
    positions = (prefix.prompt_lengths.to(device) - 1).unsqueeze(1) + torch.arange(t, device=device).unsqueeze(0)
    return {"input_ids": tail_ids, "attention_mask": torch.cat([cache_mask, tail_mask], dim=1),
            "position_ids": positions, "past_key_values": cache, "use_cache": True}
