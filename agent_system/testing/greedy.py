"""Greedy continuations of a few chat prompts: two models that should be one (a checkpoint's policy and its
export) are compared by these tokens."""

from __future__ import annotations

PROMPTS = tuple(f"Move the current position to the target position on the number line.\n\nCurrent state:\n"
                f"Target: {target}\nCurrent: {current}" for target, current in ((1, 0), (3, 0), (0, 2), (2, 3)))


def greedy_tokens(model, tokenizer, prompts=PROMPTS, max_new_tokens: int = 10) -> list[list[int]]:
    """The new tokens of greedy generation for each prompt (chat template, left-padded batch)."""
    import torch

    texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                           tokenize=False) for p in prompts]
    tokenizer.padding_side = "left"
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, do_sample=False, max_new_tokens=max_new_tokens,
                             pad_token_id=tokenizer.pad_token_id)
    return out[:, batch.input_ids.shape[1]:].tolist()
