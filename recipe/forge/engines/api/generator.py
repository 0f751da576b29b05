"""The prompt-only engine's policy: any OpenAI-compatible chat endpoint as the rollout's ``Generator``."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Sequence

from agent_system.environments.projection import valid_unicode
from agent_system.multi_turn_rollout.protocols import GenerationOutput, Message, SamplingParams

if TYPE_CHECKING:
    from recipe.forge.engines.api.runner import ApiSettings


def _text_only(message: Message) -> dict[str, str]:
    """Chat APIs take text content here; image parts of multimodal prompts are dropped."""
    content = message["content"]
    if isinstance(content, list):
        content = "\n".join(part.get("text", "") for part in content if part.get("type") == "text")
    return {"role": message["role"], "content": content}


class OpenAIGenerator:
    """The rollout's ``Generator`` over an OpenAI-compatible chat endpoint (concurrent requests).

    Chat APIs cut the stop string off the reply; when a reply stopped on it (the server's ``stop_reason``
    where it reports one, as vLLM and SGLang do; else an ``<action>`` left open by a "stop" finish), the
    stop string is put back so that the action parser sees the closed tag, exactly as with local
    generation. Token ids and log-probs are not available (empty lists): nothing is trained on them.
    """

    def __init__(self, settings: ApiSettings, client: Any | None = None):
        from openai import OpenAI

        self.settings = settings
        self.client = client or OpenAI(base_url=settings.base_url, api_key=os.environ.get(settings.api_key_env, "EMPTY"),
                                       timeout=settings.timeout_s, max_retries=2)
        self.pool = ThreadPoolExecutor(max_workers=settings.max_concurrency)
        self.requests = 0

    def _one(self, messages: list[Message], sampling: SamplingParams) -> GenerationOutput:
        greedy = not sampling.do_sample or sampling.temperature <= 0
        reply = self.client.chat.completions.create(
            model=self.settings.model,
            messages=[_text_only(m) for m in messages],
            temperature=0.0 if greedy else sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            stop=list(sampling.stop) or None,
        )
        choice = reply.choices[0]
        text = valid_unicode(choice.message.content)
        extra = getattr(choice, "model_extra", None) or {}
        for stop in sampling.stop:
            if "stop_reason" in extra:  # vLLM / SGLang name the stop string that matched (None for EOS)
                cut = extra["stop_reason"] == stop
            else:  # plain OpenAI: an <action> left open by a "stop" finish was closed by the stop string
                cut = choice.finish_reason == "stop" and text.rfind(stop.replace("</", "<", 1)) > text.rfind(stop)
            if cut:
                text += stop
        return GenerationOutput(text=text, prompt_ids=[], response_ids=[], logprobs=[])

    def generate(self, messages: Sequence[list[Message]], sampling: SamplingParams) -> list[GenerationOutput]:
        self.requests += len(messages)
        return list(self.pool.map(lambda m: self._one(m, sampling), messages))

    def as_llm(self, max_tokens: int = 512):
        """``llm(prompt) -> str`` for the LLM experience extractor, on the same endpoint."""
        sampling = SamplingParams(temperature=0.0, do_sample=False, max_new_tokens=max_tokens, stop=())
        return lambda prompt: self._one([{"role": "user", "content": prompt}], sampling).text
