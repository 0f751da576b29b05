"""One environment step of SLEA-RL, shared by both engines, as a pair of pure functions around the generation.

* :func:`prepare_steps`: the step's queries (raw anchor observations) -> the experience provider's experiences ->
  the messages given to the policy (:func:`build_messages`);
* the engine fits each prepared step into ``rollout.prompt_length`` tokens by the one rule of both engines
  (prompt_fit.py: experience entries give way, the observation never does), then tells the provider what each
  step is shown (:func:`report_shown`);
* the engine generates: the embedded engine for a batch of environments in one call (HFGenerator), the verl
  engine for one episode per coroutine (verl's server manager); either way one GenerationOutput per step;
* the engine applies :func:`response_text` to the environment; :func:`finish_step` turns the prepared step, its
  generation, the environment's answer and the environment's expert action at the state the step acted on (the
  manager's ``recorded_expert_actions``, read before the environment steps) into the step's :class:`StepRecord`.

The environment step sits between generation and ``finish_step`` in both engines (a batched manager call on the
embedded engine, a thread-pool call per episode on verl's), so it is an argument here, not a call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from agent_system.environments.projection import valid_unicode
from agent_system.multi_turn_rollout.injection import experience_messages
from agent_system.multi_turn_rollout.protocols import (
    ExperienceProvider,
    GenerationOutput,
    Message,
    StepExperience,
    StepQuery,
    StepRecord,
)

INFO_DROP = ("image",)  # large per-step info entries not kept in the records


@dataclass
class PreparedStep:
    """A step ready for generation: its query, the experience retrieved for it, and the two views of its prompt."""

    query: StepQuery
    experience: StepExperience
    messages: list[Message]  # what the policy is given (experiences placed as ``experience.placement`` says)
    plain_messages: list[Message]  # the same prompt without experiences (the distillation student's view)
    experiences_dropped: int = 0  # shown entries left out to fit rollout.prompt_length (prompt_fit.py)


def build_messages(prompt: str, image: Any | None, experience: StepExperience) -> tuple[list[Message], list[Message]]:
    """(messages given to the policy, the same without experiences) of one step.

    The experience text goes where its ``placement`` says (:func:`agent_system.multi_turn_rollout.injection.
    experience_messages`); ``image`` is passed through as the engine's model input wants it (an HxWx3 array on
    the embedded engine, a PIL image on verl's), None in text mode.
    """
    return (experience_messages(experience.text, prompt, experience.placement, image),
            experience_messages("", prompt, image=image))


def prepare_steps(queries: Sequence[StepQuery], prompts: Sequence[str], images: Sequence[Any | None],
                  provider: ExperienceProvider | None) -> list[PreparedStep]:
    """Retrieve one experience per query (one provider call for all; none without a provider) and build the
    messages of each step; ``prompts`` and ``images`` are the observation prompts and images, aligned with
    ``queries``."""
    if not len(queries) == len(prompts) == len(images):
        raise ValueError(f"prepare_steps needs aligned inputs, got {len(queries)} queries, {len(prompts)} prompts "
                         f"and {len(images)} images")
    experiences = list(provider.provide(queries)) if provider is not None else [StepExperience() for _ in queries]
    if len(experiences) != len(queries):
        raise ValueError(f"experience provider returned {len(experiences)} results for {len(queries)} queries")
    prepared = []
    for query, prompt, image, experience in zip(queries, prompts, images, experiences):
        messages, plain = build_messages(prompt, image, experience)
        prepared.append(PreparedStep(query, experience, messages, plain))
    return prepared


def report_shown(provider: ExperienceProvider | None, prepared: Sequence[PreparedStep]) -> None:
    """Tell ``provider`` what each of ``prepared`` is shown, after the prompt-length rule (both engines call this
    between fitting and generating): the provider links only the entries a step really shows."""
    if provider is not None and prepared:
        provider.shown([p.query for p in prepared], [p.experience for p in prepared])


def response_text(output: GenerationOutput) -> str:
    """The text the environment is given for a generation: nothing downstream sees unencodable text."""
    return valid_unicode(output.text)


def finish_step(prepared: PreparedStep, output: GenerationOutput, reward: float, done: bool,
                info: dict[str, Any], expert_action: str | None = None,
                next_anchor_obs: str | None = None, *, hidden_state: str = "",
                next_hidden_state: str = "") -> StepRecord:
    """The StepRecord of a generated and applied step; ``reward``, ``done`` and ``info`` are the environment's
    answer to :func:`response_text` of ``output`` (``info`` gives the projected ``action`` and
    ``is_action_valid``; its ``image`` is not kept); ``expert_action`` is the environment's expert action at the
    state the step acted on (None: it has none); ``next_anchor_obs`` the raw observation the step led to (the
    manager's ``next_anchors``: None where the environment ended the episode); ``hidden_state`` and
    ``next_hidden_state`` what the environment's observations leave out of those two states (the manager's
    ``hidden_state_of`` before and after the step; "" where it reports none). The expert never reaches the step's
    query: retrieval and the policy do not see it, only the record does (lesson quality, the oracle extractor)."""
    query, experience = prepared.query, prepared.experience
    kept = {k: v for k, v in info.items() if k not in INFO_DROP}
    return StepRecord(
        uid=query.uid,
        traj_uid=query.traj_uid,
        step=query.step,
        anchor_obs=query.anchor_obs,
        messages=prepared.messages,
        plain_messages=prepared.plain_messages,
        response_text=response_text(output),
        action=str(kept.get("action", "")),
        prompt_ids=list(output.prompt_ids),
        response_ids=list(output.response_ids),
        logprobs=list(output.logprobs),
        reward=float(reward),
        is_action_valid=bool(kept.get("is_action_valid", False)),
        done=bool(done),
        cluster_id=experience.cluster_id,
        experience_ids=tuple(experience.entry_ids),
        experience_fallback=bool(experience.fallback and experience.entry_ids),
        info=kept,
        admissible_actions=tuple(query.admissible_actions),
        expert_action=expert_action,
        experiences_dropped=prepared.experiences_dropped,
        policy_version=None if output.policy_versions is None else int(output.policy_versions[0]),
        policy_version_last=None if output.policy_versions is None else int(output.policy_versions[1]),
        library_version=experience.library_version,
        next_anchor_obs=next_anchor_obs,
        hidden_state=hidden_state,
        next_hidden_state=next_hidden_state,
    )
