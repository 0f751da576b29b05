"""One prompt-length rule for both engines: a step's prompt fits in ``actor_rollout_ref.rollout.prompt_length``
tokens, its experiences giving way first.

A prepared step (step.py) whose prompt is too long is tried again with its experience entries dropped one at a
time, the last shown (the least relevant) first, down to the bare prompt: the chat header, the observation and
its history are never cut. The first version that fits is generated, and its record counts the entries dropped
(``StepRecord.experiences_dropped``; the rollout metrics ``prompt/*``). When even the bare prompt does not fit,
the run stops with a ConfigError naming the key: a silently cut observation would train the policy on a state
it was not shown.

Without this rule verl left-truncates a long prompt (cutting the chat header and, with the system placement, the
experiences' start) while the embedded engine generates it whole, so the two engines would see different
prompts. Each engine counts tokens with its own chat template (:func:`fit_prompt`'s ``lengths``).

The rendered experience text has one line per shown entry after its header (the renderer's contract,
recipe/forge/experience/render.py); a text of any other shape (an external provider) can only be dropped whole.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from agent_system.config_checks import ConfigError
from agent_system.multi_turn_rollout.protocols import Message, StepExperience, StepRecord
from agent_system.multi_turn_rollout.step import PreparedStep, build_messages

PROMPT_LENGTH_KEY = "actor_rollout_ref.rollout.prompt_length"


def without_last_entries(experience: StepExperience, dropped: int) -> StepExperience:
    """``experience`` with its last ``dropped`` shown entries (lines and ids) left out; no text once every entry
    is dropped (the header goes with the last one)."""
    lines = experience.text.split("\n")
    keep = len(experience.entry_ids) - dropped
    if keep <= 0 or len(lines) != len(experience.entry_ids) + 1:
        return dataclasses.replace(experience, text="", entry_ids=())
    return dataclasses.replace(experience, text="\n".join(lines[:1 + keep]), entry_ids=experience.entry_ids[:keep])


def shorter_versions(prepared: PreparedStep, prompt: str, image: object | None) -> list[PreparedStep]:
    """The versions of a step the rule tries, in order: as prepared, then with 1, 2, ... of its shown entries
    dropped, the last being the bare prompt (without experiences). ``prompt`` and ``image`` are the step's
    observation prompt and image, as given to ``prepare_steps``."""
    experience = prepared.experience
    if not experience.text:
        return [prepared]
    entries = len(experience.entry_ids) if len(experience.text.split("\n")) == len(experience.entry_ids) + 1 else 1
    versions = [prepared]
    for dropped in range(1, max(entries, 1) + 1):
        shorter = without_last_entries(experience, dropped)
        messages, plain = build_messages(prompt, image, shorter)
        versions.append(PreparedStep(prepared.query, shorter, messages, plain,
                                     experiences_dropped=len(experience.entry_ids) - len(shorter.entry_ids)))
    return versions


def fit_prompt(versions: Sequence[PreparedStep], lengths: Iterable[int], limit: int) -> PreparedStep:
    """The first of ``versions`` (:func:`shorter_versions`) whose prompt fits in ``limit`` tokens; ``lengths``
    gives each version's prompt length in order and is read only as far as needed (a generator counts lazily). A
    ConfigError naming the key when not even the bare prompt (the last version) fits."""
    length = 0
    for version, length in zip(versions, lengths, strict=True):
        if length <= limit:
            return version
    query = versions[0].query
    raise ConfigError(
        f"{PROMPT_LENGTH_KEY}={limit} is shorter than the prompt of step {query.step} of {query.traj_uid!r} "
        f"without any experience ({length} tokens): raise {PROMPT_LENGTH_KEY} (with data.max_prompt_length), "
        "or shorten the prompt (env.history_length)")


@dataclass(frozen=True)
class PromptBudget:
    """The rule on an engine whose tokenizer counts synchronously (the embedded engine): ``count(messages)`` is the
    number of prompt tokens the engine's generator would feed the model for ``messages``."""

    limit: int
    count: Callable[[list[Message]], int]

    def fit(self, prepared: PreparedStep, prompt: str, image: object | None) -> PreparedStep:
        versions = shorter_versions(prepared, prompt, image)
        return fit_prompt(versions, (self.count(v.messages) for v in versions), self.limit)


def prompt_metrics(steps: Sequence[StepRecord]) -> dict[str, float]:
    """``prompt/trimmed_steps`` (steps whose experiences were cut to fit the prompt length) and
    ``prompt/experiences_dropped`` (the entries left out over all steps)."""
    dropped = [step.experiences_dropped for step in steps]
    return {"prompt/trimmed_steps": float(sum(d > 0 for d in dropped)), "prompt/experiences_dropped": float(sum(dropped))}
