"""The prompt-only engine's policy: any OpenAI-compatible chat endpoint as the rollout's ``Generator``.

Passing faults (no connection, timeouts, cut transfers, 429, 5xx) are retried under ``trainer.api``'s retry
keys (retry.py); a malformed reply (not JSON, HTML, no choices, no message) gives that step no action (an
invalid action), counted in ``api/malformed_replies``; an endpoint that stays down or refuses the requests
themselves raises EndpointError naming the endpoint and the last error. Image observations are sent as
``image_url`` content parts holding PNG data URLs (chat_content.py)."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from agent_system.environments.projection import valid_unicode
from agent_system.multi_turn_rollout.protocols import GenerationOutput, Message, SampleStream, SamplingParams
from recipe.forge.engines.api.chat_content import openai_message
from recipe.forge.engines.api.retry import MalformedReply, Retrier, RetryPolicy

if TYPE_CHECKING:
    from recipe.forge.engines.api.settings import ApiSettings


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
                                       timeout=settings.timeout_s, max_retries=0)  # retries: self.retrier
        self.retrier = Retrier(RetryPolicy(settings.max_retries, settings.retry_backoff_s,
                                           settings.retry_max_backoff_s, settings.retry_deadline_s), settings.base_url)
        self.pool = ThreadPoolExecutor(max_workers=settings.max_concurrency)
        self.requests = 0
        self.malformed = 0  # replies that gave their step no action
        self._count_lock = threading.Lock()

    def _request(self, messages: list[dict[str, Any]], sampling: SamplingParams, timeout_s: float,
                 seed: int | None = None) -> Any:
        """One try with ``messages`` as the endpoint takes them (openai_message); a body the client cannot read as
        a chat completion is a MalformedReply. ``seed``: the request's ``seed`` parameter (none sent when None)."""
        import openai

        greedy = not sampling.do_sample or sampling.temperature <= 0
        try:
            reply = self.client.chat.completions.create(
                model=self.settings.model,
                messages=messages,
                temperature=0.0 if greedy else sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_new_tokens,
                stop=list(sampling.stop) or None,
                timeout=min(self.settings.timeout_s, timeout_s),
                **({} if seed is None else {"seed": seed}),
            )
        except (ValueError, openai.APIResponseValidationError) as exc:  # a truncated or otherwise broken body
            raise MalformedReply(f"the reply is not a chat completion ({type(exc).__name__})") from exc
        choices = getattr(reply, "choices", None)  # an HTML page or other non-JSON body comes back as a str
        if not isinstance(choices, list) or not choices:
            raise MalformedReply("the reply has no choices")
        if getattr(choices[0], "message", None) is None:
            raise MalformedReply("the reply's choice has no message")
        return choices[0]

    def _one(self, messages: list[Message], sampling: SamplingParams, seed: int | None = None) -> GenerationOutput:
        chat = [openai_message(m) for m in messages]  # encoded once for all tries; a bad image raises here
        try:
            choice = self.retrier.call(lambda timeout_s: self._request(chat, sampling, timeout_s, seed))
        except MalformedReply:
            with self._count_lock:
                self.malformed += 1
            return GenerationOutput(text="", prompt_ids=[], response_ids=[], logprobs=[])
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

    def generate(self, messages: Sequence[list[Message]], sampling: SamplingParams,
                 streams: Sequence[SampleStream] | None = None) -> list[GenerationOutput]:
        """``streams``: one per conversation; each request then sends the seed :func:`request_seed` of its
        stream's next draw (an endpoint that honours ``seed`` samples each episode alike at any batch size)."""
        self.requests += len(messages)
        if streams is None:
            return list(self.pool.map(lambda m: self._one(m, sampling), messages))
        if len(streams) != len(messages):
            raise ValueError(f"{len(streams)} sample streams for {len(messages)} conversations")
        seeds = []
        for stream in streams:
            seeds.append(request_seed(stream))
            stream.draws += 1
        return list(self.pool.map(lambda pair: self._one(pair[0], sampling, pair[1]), zip(messages, seeds)))

    def as_llm(self, max_tokens: int = 512):
        """``llm(prompt) -> str`` for the LLM experience extractor, on the same endpoint."""
        sampling = SamplingParams(temperature=0.0, do_sample=False, max_new_tokens=max_tokens, stop=())
        return lambda prompt: self._one([{"role": "user", "content": prompt}], sampling).text


def request_seed(stream: SampleStream) -> int:
    """The ``seed`` of ``stream``'s next request: a function of the stream's seed and its draws so far only,
    in [0, 2**31)."""
    return int(np.random.SeedSequence([int(stream.seed), int(stream.draws)]).generate_state(1)[0] >> 1)
