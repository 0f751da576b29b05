"""Batched Hugging Face generation implementing the rollout's ``Generator`` protocol.

A hand-written decoding loop over a KV cache rather than ``model.generate``: it returns exactly the
log-probs the update recomputes (log softmax of logits / temperature, before any top-k/top-p filtering,
which only narrows what is sampled), stops each row at EOS or at a stop string such as ``</action>``, and
drops finished rows from the cache so the rest of the batch decodes faster.

With a vision-language model's processor, chats with image parts are encoded by it (vision_inputs.py): the
prefill runs the images' patches with the model's 3-D rotary positions over the whole padded prompt batch, and
each decoded token takes the row's largest position so far plus one, which is what the model gives text after
its prompt. The step records keep the images (in their messages), from which the training batch processes them
again for the update (vision_inputs.py).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from agent_system.multi_turn_rollout.protocols import GenerationOutput, Message, SampleStream, SamplingParams
from recipe.forge.hf.sequences import forward_inputs, pack
from recipe.forge.hf.vision_inputs import ImagePrompts, PromptImages


class HFGenerator:
    """Generates one response per conversation with a causal LM, in micro-batches of ``batch_size``.

    Args:
        model: a causal LM (plain or peft-wrapped).
        tokenizer: its tokenizer; must have a chat template and a pad token.
        batch_size: conversations decoded together (bounds memory; larger is faster on a GPU).
        generator: torch RNG used for sampling (checkpointed by the trainer for exact resume).
        autocast: context-manager factory for the forward passes (bf16 autocast, or none).
        response_prefix: text appended after the generation prompt (e.g. ``"<action>"``); it is part of the
            prompt ids and is prepended to the returned text, so a small model starts in the answer format.
        share_prompt_prefix: prefill the tokens the batch's prompts share once (sequences.forward_inputs; a batch
            with images runs plain).
        processor: a vision-language model's processor (vision_processor.load_processor): chats are encoded by
            it, images included; None for a text model (chats are encoded by ``tokenizer``).
    """

    def __init__(self, model: nn.Module, tokenizer, batch_size: int = 64, generator: torch.Generator | None = None,
                 autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                 response_prefix: str = "", share_prompt_prefix: bool = True, processor=None):
        self.model = model
        self.image_prompts = None if processor is None else ImagePrompts(processor)
        self.share_prompt_prefix = share_prompt_prefix
        self.autocast = autocast
        self.response_prefix = response_prefix
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.rng = generator if generator is not None else torch.Generator().manual_seed(0)
        self.pad_id = tokenizer.pad_token_id
        eos = {tokenizer.eos_token_id}
        config_eos = getattr(_text_config(model), "eos_token_id", None)
        eos |= set(config_eos) if isinstance(config_eos, (list, tuple)) else {config_eos}
        self.eos_ids = torch.tensor(sorted(i for i in eos if i is not None), dtype=torch.long)
        self._stop_cache: dict[tuple[str, ...], torch.Tensor] = {}
        self.tokens_generated = 0
        self.policy_version: int | None = None  # the weights' version, set by the trainer; on every output

    # ------------------------------------------------------------------ prompts
    def encode(self, messages: list[Message]) -> tuple[list[int], PromptImages | None]:
        """(prompt ids, the prompt's processed images or None) of ``messages`` as :meth:`generate` feeds them."""
        if self.image_prompts is not None:
            return self.image_prompts.encode(messages, self.response_prefix)
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        text += self.response_prefix
        return self.tokenizer(text, add_special_tokens=False).input_ids, None

    def encode_prompt(self, messages: list[Message]) -> list[int]:
        """The prompt ids of ``messages`` (:meth:`encode` without the images)."""
        return self.encode(messages)[0]

    def prompt_length(self, messages: list[Message]) -> int:
        """Tokens of the prompt :meth:`generate` feeds the model for ``messages`` (response prefix included)."""
        return len(self.encode_prompt(messages))

    # ------------------------------------------------------------------ protocol
    def generate(self, messages: Sequence[list[Message]], sampling: SamplingParams,
                 streams: Sequence[SampleStream] | None = None) -> list[GenerationOutput]:
        """``streams``: one per conversation; each conversation's tokens are then sampled from its own stream's
        ``torch.Generator`` (seeded with the stream's seed on first use) instead of the generator's ``rng``."""
        encoded = [self.encode(m) for m in messages]
        prompts, images = [ids for ids, _ in encoded], [image for _, image in encoded]
        if streams is not None and len(streams) != len(prompts):
            raise ValueError(f"{len(streams)} sample streams for {len(prompts)} conversations")
        outputs: list[GenerationOutput] = []
        for start in range(0, len(prompts), self.batch_size):
            part = None if streams is None else streams[start:start + self.batch_size]
            outputs.extend(self.generate_ids(prompts[start:start + self.batch_size], sampling, part,
                                             images[start:start + self.batch_size]))
        return outputs

    def generate_ids(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams,
                     streams: Sequence[SampleStream] | None = None,
                     images: Sequence[PromptImages | None] | None = None,
                     interrupted: Callable[[], bool] | None = None) -> list[GenerationOutput]:
        """Decode a batch of tokenised prompts (``images``: their images, one entry a prompt, as :meth:`encode`
        gives them); returns outputs in input order.

        ``interrupted`` is asked before every decoding step; once it answers True the rows still decoding stop
        where they are and come back with ``interrupted=True`` (a partial rollout: the caller may resume them
        later from prompt + tokens so far)."""
        rngs = None
        if streams is not None:
            for stream in streams:
                if stream.state is None:
                    stream.state = torch.Generator().manual_seed(int(stream.seed))
                stream.draws += 1
            rngs = [stream.state for stream in streams]
        with torch.no_grad(), self.autocast():
            return self._decode(prompts, sampling, rngs, images, interrupted)

    def _decode(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams,
                rngs: Sequence[torch.Generator] | None = None,
                images: Sequence[PromptImages | None] | None = None,
                interrupted: Callable[[], bool] | None = None) -> list[GenerationOutput]:
        bs = len(prompts)
        if bs == 0:
            return []
        was_training = self.model.training
        self.model.eval()
        device = next(self.model.parameters()).device
        batch = pack(prompts, [[] for _ in prompts], self.pad_id, min_response_length=0, images=images).to(device)
        prefill = {**forward_inputs(self.model, batch, self.share_prompt_prefix), "use_cache": True}
        out = self.model(**prefill, logits_to_keep=1)  # the LM head on the last column only
        cache, attention = out.past_key_values, prefill["attention_mask"]
        logits = out.logits[:, -1, :]
        next_position = next_positions(prefill["position_ids"])
        alive = torch.arange(bs)  # original row of each row still in the cache
        tokens: list[list[int]] = [[] for _ in range(bs)]
        logps: list[list[float]] = [[] for _ in range(bs)]
        stop_strings = tuple(sampling.stop or ())
        stop_token_mask = self._stop_candidates(stop_strings)
        eos_ids = self.eos_ids.to(device)
        greedy = (not sampling.do_sample) or sampling.temperature <= 0
        temperature = 1.0 if greedy else float(sampling.temperature)
        cut_short: set[int] = set()  # rows stopped by ``interrupted`` before their end

        for _ in range(sampling.max_new_tokens):
            if interrupted is not None and interrupted():
                cut_short = set(alive.tolist())
                break
            logp = F.log_softmax(logits.float() / temperature, dim=-1)
            row_rngs = None if rngs is None else [rngs[row] for row in alive.tolist()]
            chosen = logp.argmax(dim=-1) if greedy else self._sample(logp, sampling, row_rngs)
            chosen_logp = logp.gather(-1, chosen.unsqueeze(-1)).squeeze(-1)
            chosen_cpu, chosen_logp_cpu = chosen.cpu().tolist(), chosen_logp.cpu().tolist()
            for i, row in enumerate(alive.tolist()):
                tokens[row].append(chosen_cpu[i])
                logps[row].append(chosen_logp_cpu[i])
            finished = torch.isin(chosen, eos_ids).cpu()
            if stop_strings:
                maybe = stop_token_mask[chosen.cpu()] & ~finished
                for i in torch.nonzero(maybe).flatten().tolist():
                    tail = self.tokenizer.decode(tokens[alive[i]][-8:], skip_special_tokens=True)
                    finished[i] = any(s in tail for s in stop_strings)
            self.tokens_generated += len(chosen_cpu)
            keep = torch.nonzero(~finished).flatten()
            if keep.numel() == 0:
                break
            if keep.numel() < alive.numel():
                cache.batch_select_indices(keep.to(device))
                alive, chosen = alive[keep], chosen[keep]
                attention, next_position = attention[keep.to(device)], next_position[keep.to(device)]
            attention = torch.cat([attention, attention.new_ones((attention.shape[0], 1))], dim=1)
            out = self.model(input_ids=chosen.unsqueeze(-1).to(device), attention_mask=attention,
                             position_ids=next_position.unsqueeze(-1), past_key_values=cache, use_cache=True)
            logits = out.logits[:, -1, :]
            next_position = next_position + 1

        if was_training:
            self.model.train()
        return [
            GenerationOutput(text=self.response_prefix + self.tokenizer.decode(tokens[row], skip_special_tokens=True),
                             prompt_ids=list(prompts[row]), response_ids=tokens[row], logprobs=logps[row],
                             interrupted=row in cut_short,
                             policy_versions=None if self.policy_version is None else (self.policy_version,) * 2)
            for row in range(bs)
        ]

    # ------------------------------------------------------------------ helpers
    def _sample(self, logp: torch.Tensor, sampling: SamplingParams,
                rngs: Sequence[torch.Generator] | None = None) -> torch.Tensor:
        """Sample from softmax(logp) restricted by top-k / top-p. logp: (b, vocab) -> (b,); row i is drawn from
        ``rngs[i]`` when given (b generators), else the batch from ``self.rng``."""
        filtered = logp
        if sampling.top_k and sampling.top_k > 0:
            kth = torch.topk(filtered, min(sampling.top_k, filtered.shape[-1]), dim=-1).values[:, -1:]
            filtered = filtered.masked_fill(filtered < kth, float("-inf"))
        if sampling.top_p < 1.0:
            sorted_logp, order = torch.sort(filtered, descending=True, dim=-1)
            cumulative = sorted_logp.softmax(dim=-1).cumsum(dim=-1)
            # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
            drop_sorted = (cumulative - sorted_logp.softmax(dim=-1)) >= sampling.top_p
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
            filtered = filtered.masked_fill(drop, float("-inf"))
        probs = filtered.softmax(dim=-1).cpu()
        if rngs is None:
            return torch.multinomial(probs, 1, generator=self.rng).squeeze(-1).to(logp.device)
        rows = [torch.multinomial(row, 1, generator=rng) for row, rng in zip(probs, rngs)]
        return torch.cat(rows).to(logp.device)

    def _stop_candidates(self, stop_strings: tuple[str, ...]) -> torch.Tensor:
        """(vocab,) bool: tokens whose text contains the last character of some stop string; only rows that
        just produced such a token can have completed a stop string, so only those are decoded."""
        if stop_strings not in self._stop_cache:
            vocab = len(self.tokenizer)
            last_chars = {s[-1] for s in stop_strings if s}
            texts = self.tokenizer.batch_decode([[i] for i in range(vocab)])
            mask = torch.tensor([any(c in t for c in last_chars) for t in texts], dtype=torch.bool)
            size = max(vocab, int(getattr(_text_config(self.model), "vocab_size", vocab)))
            self._stop_cache[stop_strings] = F.pad(mask, (0, size - vocab))
        return self._stop_cache[stop_strings]


def _text_config(model: nn.Module):
    """The language model's config (the model's own for a text model, ``text_config`` for a vision-language one)."""
    config = getattr(model, "config", None)
    return config.get_text_config() if config is not None else None


def next_positions(position_ids: torch.Tensor) -> torch.Tensor:
    """(b,) the position of the token after each row of a prefill: one past the row's largest position.

    ``position_ids``: (b, L) text positions or (3, b, L) multimodal ones, 0 on left padding. Text after a prompt
    continues from its largest position in every component, so decoded tokens take plain (b, 1) positions.
    """
    largest = position_ids.amax(dim=-1)
    return (largest.amax(dim=0) if position_ids.dim() == 3 else largest) + 1
