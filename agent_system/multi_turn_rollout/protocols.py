"""Interfaces between the rollout loop and what plugs into it (generators, experience providers, observers),
and the records the rollout produces. Both engines and the experience library use these types; nothing here
imports an engine or ``recipe``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

Message = dict[str, Any]  # {"role": "system" | "user" | "assistant", "content": str | list}
ACTION_STOP = ("</action>",)  # every engine stops a step's generation there; the stop string stays in the response


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ACTION_STOP
    do_sample: bool = True


@dataclass
class GenerationOutput:
    """One generated response. Token ids exclude padding; ``logprobs[i]`` is log p(response_ids[i]).

    ``policy_versions``: (first, last) version of the weights that generated it, where the engine counts them
    (the verl engine: the trainer's global step of the weights; a response resumed across a weight update has
    first < last); ``interrupted``: the generator stopped it before its end (a partial rollout, to be resumed)."""

    text: str
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    policy_versions: tuple[int, int] | None = None
    interrupted: bool = False


@runtime_checkable
class Generator(Protocol):
    """A batch of chat conversations in, one sampled response each out (same order).

    A generator that can draw each conversation's sample from that conversation's own stream also takes
    ``streams`` (one :class:`SampleStream` per conversation; the local HF generator and the chat-endpoint
    generator do); the collector passes it only when it was given streams."""

    def generate(self, messages: Sequence[list[Message]], sampling: SamplingParams) -> list[GenerationOutput]: ...


@dataclass(eq=False)
class SampleStream:
    """One episode's own source of sampling randomness, so that what the episode samples does not depend on the
    episodes that share its generation calls (an evaluation gives the same episodes at any batch size).

    ``seed`` names the stream; ``draws`` counts the responses drawn from it so far; ``state`` is the generator's
    own random state for the stream (a ``torch.Generator`` for the HF generator), made from ``seed`` on first use."""

    seed: int
    draws: int = 0
    state: Any = None


@dataclass
class StepQuery:
    """What an experience provider sees for one active environment at one step."""

    anchor_obs: str  # raw observation: no history, prompt or action list
    task: str  # task description of the episode
    task_type: str | None
    uid: str
    traj_uid: str
    step: int
    admissible_actions: tuple[str, ...] = ()  # the actions the environment lists for this state (none: empty)


@dataclass
class StepExperience:
    """What a provider returns for one step: the experience text (may be empty), the observation cluster that
    drove retrieval (the same cluster id is the step's advantage group key), the entries shown, and where the
    text goes in the messages (``placement``: one of ``agent_system.multi_turn_rollout.injection.INJECTIONS``)."""

    text: str = ""
    cluster_id: int | None = None
    entry_ids: tuple[str, ...] = ()
    fallback: bool = False  # served by the whole-library similarity fallback (the cluster had no experiences)
    placement: str = "system"
    library_version: int | None = None  # the version of the library that served it (None: no library)


@runtime_checkable
class ExperienceProvider(Protocol):
    """Experiences for steps: ``provide`` retrieves for the steps' queries; ``shown`` is then told what each step
    is shown once the engine has fitted its prompt (prompt_fit.py drops entries that do not fit), before it
    generates. What a provider learns from a step (the retrieval fallback's finds linked to the step's cluster)
    it learns in ``shown``, from the entries the step is really shown, on every engine."""

    def provide(self, queries: Sequence[StepQuery]) -> list[StepExperience]: ...

    def shown(self, queries: Sequence[StepQuery], experiences: Sequence[StepExperience]) -> None: ...


@dataclass
class StepRecord:
    """One environment step = one training sample."""

    uid: str
    traj_uid: str
    step: int
    anchor_obs: str
    messages: list[Message]  # what the policy was given (system experiences + user prompt)
    plain_messages: list[Message]  # the same prompt without experiences (the distillation student's view)
    response_text: str
    action: str  # projected action sent to the environment
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    reward: float
    is_action_valid: bool
    done: bool
    cluster_id: int | None = None
    experience_ids: tuple[str, ...] = ()
    experience_fallback: bool = False  # the retrieval fallback served the shown entries (StepExperience.fallback)
    info: dict[str, Any] = field(default_factory=dict)
    admissible_actions: tuple[str, ...] = ()  # the actions the environment listed at ``anchor_obs``
    expert_action: str | None = None  # the environment's expert action at this state (None: it has no expert)
    experiences_dropped: int = 0  # retrieved entries left out so that the prompt fits rollout.prompt_length
    # the versions the step was generated with (None: not counted): the policy's weights that began and finished its
    # response (they differ when an asynchronous engine resumed it across a weight update), and the experience
    # library it was shown (the provider's; None without a library)
    policy_version: int | None = None
    policy_version_last: int | None = None
    library_version: int | None = None
    # the observation of the state the action led to (the manager's next_anchors: the raw observation, or the one
    # before where the environment says its answer left the state as it was, e.g. ALFWorld's "Nothing happens.");
    # None where the environment ended the episode. A step limit does not: the state it cut the episode at is kept
    next_anchor_obs: str | None = None
    # what the environment says its observation leaves out of the state (info "hidden_state", "" where it reports
    # none): of the state the step acted on, and of the state it led to (EnvironmentManagerBase.hidden_state_of)
    hidden_state: str = ""
    next_hidden_state: str = ""


@runtime_checkable
class StepObserver(Protocol):
    def observe(self, records: Sequence[StepRecord]) -> None: ...


@dataclass
class TrajectoryRecord:
    """One finished episode with its steps in order."""

    uid: str
    traj_uid: str
    task: str
    task_type: str | None
    steps: list[StepRecord]
    episode_reward: float
    success: bool
    length: int
    failure_reason: str | None = None  # e.g. "worker crashed", "step timeout"


@dataclass
class RolloutBatch:
    """Everything one rollout produced: flat step samples (training rows) and their trajectories."""

    steps: list[StepRecord]
    trajectories: list[TrajectoryRecord]
    metrics: dict[str, float] = field(default_factory=dict)


def active_mask(batch: RolloutBatch):
    """(max_length, num_trajectories) bool numpy array: True where trajectory k was still active (was
    given a generation) at step t, in the order of ``batch.trajectories``."""
    import numpy as np

    lengths = np.array([t.length for t in batch.trajectories], dtype=np.int64)
    horizon = int(lengths.max()) if len(lengths) else 0
    return np.arange(horizon)[:, None] < lengths[None, :]
