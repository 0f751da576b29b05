"""LLM server clients for tests of the forge agent loop inside verl's own agent-loop manager.

:class:`ServerActorClient` forwards every request to one named rollout server actor (the CPU backend's
:class:`~recipe.forge.engines.verl.cpu.hf_rollout.HFRolloutServer`), without verl's load balancer and weight
sync: the cross-engine test drives the agent loop with a real model that way.

:class:`ScriptedLLMClient` is a stand-in, for CPU tests of the agent loop's plumbing.

verl 0.9.1 has no CPU rollout backend (vLLM / SGLang / TensorRT-LLM only), so CPU tests replace the client
that AgentLoopWorkers call with this one. It subclasses verl's ``LLMServerClient`` and keeps its
``generate`` contract (prompt token ids in, ``TokenOutput`` with token ids, log-probs and global-step
bookkeeping out); only the text comes from a seeded script instead of a model. It is picklable, so verl ships
it to its Ray workers exactly like the real client.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

import ray

from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.replica import TokenOutput

DEFAULT_RESPONSES = (
    "<think>Push towards the target.</think><action>up</action>",
    "<think>Go around the box.</think><action>left</action>",
    "<action>down</action>",
    "<action>right</action>",
    "I would rather not move.",  # no action tag: an invalid action
)


class ScriptedLLMClient(LLMServerClient):
    """Answers every request with one of ``responses``, tokenised with the run's tokenizer. The choice is seeded per
    prompt: the n-th request with the same prompt ids gets the n-th draw of a generator seeded by ``seed`` and those
    ids, so the answers do not depend on the order in which concurrent requests arrive.

    ``logprob`` is reported for every sampled token; ``global_steps`` is the weight version the trainer would
    have synced, as verl's real servers report it.
    """

    def __init__(
        self,
        config: Any,
        responses: Sequence[str] = DEFAULT_RESPONSES,
        seed: int = 0,
        logprob: float = -0.25,
        global_steps: int = 1,
    ):
        super().__init__(config, load_balancer_handle=None)
        self.responses = tuple(responses)
        self.seed = seed
        self.logprob = logprob
        self.global_steps = global_steps
        self._draws: dict[tuple[int, ...], random.Random] = {}  # prompt ids -> its generator
        self._tokenizer = None
        self.calls = 0

    def _tokenizer_for(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.config.actor_rollout_ref.model.path)
        return self._tokenizer

    async def generate(self, request_id, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs) -> TokenOutput:
        if not prompt_ids:
            raise ValueError("generate called with an empty prompt")
        key = tuple(prompt_ids)
        if key not in self._draws:
            self._draws[key] = random.Random(f"{self.seed}:{','.join(map(str, key))}")
        self.calls += 1
        text = self._draws[key].choice(self.responses)
        token_ids = self._tokenizer_for().encode(text, add_special_tokens=False)
        return TokenOutput(
            token_ids=token_ids,
            log_probs=[self.logprob] * len(token_ids),
            stop_reason="completed",
            num_preempted=0,
            extra_fields={
                "global_steps": self.global_steps,
                "min_global_steps": self.global_steps,
                "max_global_steps": self.global_steps,
            },
        )


class ServerActorClient(LLMServerClient):
    """Sends each ``generate`` to the named Ray actor ``server_name`` (a rollout server with verl's ``generate``)."""

    def __init__(self, config: Any, server_name: str):
        super().__init__(config, load_balancer_handle=None)
        self.server_name = server_name

    async def generate(self, request_id, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs) -> TokenOutput:
        server = ray.get_actor(self.server_name)
        output = await server.generate.remote(prompt_ids=prompt_ids, sampling_params=sampling_params,
                                              request_id=str(request_id), **kwargs)
        steps = output.extra_fields.get("global_steps")
        output.extra_fields.setdefault("min_global_steps", steps)
        output.extra_fields.setdefault("max_global_steps", steps)
        return output
