"""Scripted generators (the Generator protocol, no model): an expert that follows each environment's
``expert_action`` hook (BFS for Sokoban, walkthroughs for text games), a random policy over admissible
actions, and a garbage-text policy whose answers are never valid. They read the manager to know which
environments are active, in the order the TrajectoryCollector sends conversations (ascending index).

Token ids are the UTF-8 bytes of the prompt / response and log-probs are 0, so downstream code that needs
ids has well-formed (if meaningless) ones.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from agent_system.environments.base import EnvironmentManagerBase
from agent_system.multi_turn_rollout.protocols import GenerationOutput, Message, SamplingParams


def _content_text(message: Message) -> str:
    content = message.get("content", "")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def byte_output(messages: list[Message], text: str) -> GenerationOutput:
    prompt = "\n".join(_content_text(m) for m in messages).encode("utf-8")
    response = text.encode("utf-8")
    return GenerationOutput(text=text, prompt_ids=list(prompt), response_ids=list(response), logprobs=[0.0] * len(response))


def tagged(action: str, think: str | None = "Following the plan.") -> str:
    """A well-formed response: optional <think> block, then the action."""
    head = f"<think>{think}</think>" if think is not None else ""
    return f"{head}<action>{action}</action>"


class CountingGenerator:
    """Base: counts generate calls and conversations (to check that finished environments get none)."""

    def __init__(self):
        self.calls = 0
        self.conversations = 0
        self.batch_sizes: list[int] = []

    def generate(self, messages: Sequence[list[Message]], sampling: SamplingParams) -> list[GenerationOutput]:
        self.calls += 1
        self.conversations += len(messages)
        self.batch_sizes.append(len(messages))
        texts = self.respond(messages)
        return [byte_output(m, t) for m, t in zip(messages, texts)]

    def respond(self, messages: Sequence[list[Message]]) -> list[str]:
        raise NotImplementedError


class ExpertGenerator(CountingGenerator):
    """Answers with each active environment's ``expert_action()``; where an environment has none, with a
    random admissible action (or an empty, invalid answer when it lists none)."""

    def __init__(self, envs: EnvironmentManagerBase, seed: int = 0, think: str | None = "Following the plan."):
        super().__init__()
        self.envs = envs
        self.think = think
        self.fallback = RandomGenerator(envs, seed)

    def respond(self, messages):
        idx = np.flatnonzero(self.envs.active).tolist()
        if len(idx) != len(messages):
            raise ValueError(f"ExpertGenerator got {len(messages)} conversations for {len(idx)} active environments")
        actions = self.envs.expert_actions(idx)
        fallback = self.fallback.respond(messages)
        return [tagged(a, self.think) if a is not None else f for a, f in zip(actions, fallback)]


class RandomGenerator(CountingGenerator):
    """A uniformly random admissible action, well formed; ``<action></action>`` where none are listed."""

    def __init__(self, envs: EnvironmentManagerBase, seed: int = 0):
        super().__init__()
        self.envs = envs
        self.rng = np.random.default_rng(seed)

    def respond(self, messages):
        idx = np.flatnonzero(self.envs.active).tolist()
        out = []
        for i in idx[: len(messages)]:
            admissible = self.envs.last_info[i].get("admissible_actions") or []
            out.append(tagged(str(admissible[self.rng.integers(len(admissible))])) if admissible else "<action></action>")
        return out


_GARBAGE = (
    "",
    "I think I should move up.",
    "<action>",
    "<action>up",
    "<think>hmm</think>",
    "<action><action>up</action></action>",
    "<action></action>",
    "</action>up<action>",
    "<action>up</action><action>down</action>",
    "🙂 ünïcödé <акция>вверх</акция>",
)


class GarbageGenerator(CountingGenerator):
    """Malformed answers only (missing, empty, unclosed, nested or repeated tags, free text, unicode, very
    long strings): every step must be recorded as an invalid action and nothing may crash."""

    def __init__(self, seed: int = 0):
        super().__init__()
        self.rng = np.random.default_rng(seed)

    def respond(self, messages):
        out = []
        for _ in messages:
            k = int(self.rng.integers(len(_GARBAGE) + 1))
            out.append("x" * 100_000 + "<action>" if k == len(_GARBAGE) else _GARBAGE[k])
        return out


class NoisyExpert(CountingGenerator):
    """A scripted learner: an answer that does not parse with probability ``invalid`` (drawn first), else the
    environment's expert action with probability ``p``, else another action of the state.

    The other action is drawn uniformly from the state's admissible actions without the expert's
    (``exclude_expert``; with it False, from all of them, the expert's included); where the environment lists none,
    ``other_action(expert)`` gives one (None: an empty, invalid answer). Every expert action consulted is kept in
    ``experts[(traj_uid, step)]``, also for environments whose step records do not carry it."""

    def __init__(self, envs: EnvironmentManagerBase, p: float, invalid: float, seed: int = 0,
                 exclude_expert: bool = True, other_action=None):
        super().__init__()
        if not (0.0 <= p <= 1.0 and 0.0 <= invalid <= 1.0):
            raise ValueError(f"p={p} and invalid={invalid} must be probabilities")
        self.envs, self.p, self.invalid, self.exclude_expert = envs, p, invalid, exclude_expert
        self.other_action = other_action or (lambda expert: None)
        self.rng = np.random.default_rng(seed)
        self.experts: dict[tuple[str, int], str | None] = {}

    def respond(self, messages):
        idx = np.flatnonzero(self.envs.active).tolist()
        if len(idx) != len(messages):
            raise ValueError(f"NoisyExpert got {len(messages)} conversations for {len(idx)} active environments")
        out = []
        for i, expert in zip(idx, self.envs.expert_actions(idx)):
            self.experts[(self.envs.traj_uids[i], int(self.envs.step_count[i]))] = expert
            if self.rng.random() < self.invalid:
                out.append("<action>")
            elif expert is not None and self.rng.random() < self.p:
                out.append(tagged(expert))
            else:
                out.append(self._other(i, expert))
        return out

    def _other(self, i: int, expert: str | None) -> str:
        admissible = [str(a) for a in self.envs.last_info[i].get("admissible_actions") or []]
        if self.exclude_expert and expert is not None:
            admissible = [a for a in admissible if a.strip().lower() != expert.strip().lower()]
        if admissible:
            return tagged(admissible[self.rng.integers(len(admissible))])
        other = self.other_action(expert)
        return tagged(other) if other is not None else "<action></action>"
