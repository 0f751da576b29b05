"""Step samples: from the steps of a rollout to the inputs and advantages of the step-level estimators.

Both engines train on one sample per environment step. Their steps arrive in two forms: StepRecords on the
embedded engine (:meth:`StepSamples.from_records`), and on the verl engine training rows whose ``extra_fields``
the forge agent loop wrote from its StepRecords, read back as StepRecords by the row codec
(recipe/forge/engines/verl/row_codec.py, ``samples_from_rows``). From there everything is shared:

* :func:`token_level_scores`: the episode score (episode return minus that step's invalid-action penalty) on the
  sample's last response token, so ``token_level_rewards.sum(-1)`` is GiGPO's episode score;
* :func:`step_inputs`: what the step part of the advantage normalises and over which groups (:class:`StepInputs`),
  by the estimator's section of the config:

  - the **state** of a step (:func:`state_keys`): ``forge``'s observation cluster (the cluster that drove
    retrieval), ``gigpo``'s anchor observation (or its similarity cluster); with ``step_state=environment`` told
    apart further by what the environment says the observation leaves out (its ``hidden_state``: ALFWorld's
    observation does not say what the agent holds);
  - its **step group** (:func:`step_group_keys`, ``step_groups``): the steps of one task group at one state (the
    paper's and GiGPO's), at one state and one turn, or at one state but a trajectory's first visit only;
  - its **value** (:func:`step_values`, ``step_value``): the discounted return from the step on (the paper's and
    GiGPO's), or the step's reward plus the discounted value of the observation it led to (``next_state``: its mean
    value over the task group's step graph; ``best_next_state``: its best), minus the invalid-action penalty;

* :func:`step_advantage`: the ``forge`` or ``gigpo`` advantage (recipe/forge/core_forge.py), which the engines and
  verl's registry adapters (recipe/forge/estimator_registry.py) all call. The step-credited lessons
  (experience/extract_credit.py) and the probes rank actions with the same values and groups.

The engines keep only the packing into their tensors.

Why the choice of value matters. An invalid answer often leaves the state as it was (NumberLine keeps its
position, ALFWorld answers "Nothing happens."), so one episode meets one state at several turns. Under a step
limit, a later visit has fewer steps left to lose, so its discounted return is higher whatever was answered: the
return credits the clock. A next-state value does not depend on the turn: one action at one state leads to one
next state, whose value is the task group's estimate. Values are taken over observations, not step groups: a
cluster may hold many states, and what an action led to is the observation it reached.

``forge``'s step part (``use_step_rewards`` and ``step_advantage_w != 0``) needs a cluster on every step: a step
without one (a rollout that ran without the experience system) is an error on both engines and in verl's registry
entry, not a silent fallback to anchors: such a run is GiGPO, and ``algorithm.adv_estimator=gigpo`` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from agent_system.multi_turn_rollout.protocols import StepRecord
from recipe.forge.config_rules import STEP_STATES
from recipe.forge.core_forge import (
    TERMINAL,
    UNSEEN,
    apply_invalid_action_penalty,
    combine_codes,
    compute_forge_advantage,
    compute_next_state_values,
    compute_step_discounted_returns,
    factorize,
    similarity_step_groups,
)

STEP_ESTIMATORS = ("forge", "gigpo")
# step_value: the paper's discounted return, or the reward plus the next state's mean / best value
STEP_VALUES = {"return": None, "next_state": "mean", "best_next_state": "best"}
# step_groups per estimator: one state (its cluster / anchor), one state at one turn, first visits only
STEP_GROUPS = {"forge": ("cluster", "cluster_and_turn", "first_visit"),
               "gigpo": ("anchor", "anchor_and_turn", "first_visit")}


@dataclass
class StepSamples:
    """The step samples of a batch, each field of shape (n,), aligned with the batch's rows.

    Attributes:
        uid: object, task-group uid (the G copies of a task share it).
        traj_uid: object, one episode.
        step_index: int64, position of the step in its episode.
        step_reward: float64, environment reward of the step.
        is_action_valid: bool.
        anchor_obs: object (str), the raw observation the action was taken in.
        next_anchor_obs: object (str or None), the raw observation the action led to; None where the environment
            ended the episode (a terminal state: nothing follows it).
        cluster_id: object (int or None), the observation cluster that drove retrieval.
        episode_return: float64, the episode's summed reward.
        success: bool, the episode was won.
        hidden_state: object (str), what the environment says the anchor observation leaves out of the state ("":
            nothing, or it reports no hidden state); default all "".
        next_hidden_state: object (str), the same of the state the action led to; default all "".
    """

    uid: np.ndarray
    traj_uid: np.ndarray
    step_index: np.ndarray
    step_reward: np.ndarray
    is_action_valid: np.ndarray
    anchor_obs: np.ndarray
    next_anchor_obs: np.ndarray
    cluster_id: np.ndarray
    episode_return: np.ndarray
    success: np.ndarray
    hidden_state: np.ndarray | None = None
    next_hidden_state: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in ("hidden_state", "next_hidden_state"):
            if getattr(self, name) is None:
                setattr(self, name, object_array([""] * len(self.traj_uid)))

    def __len__(self) -> int:
        return len(self.traj_uid)

    def take(self, rows: np.ndarray) -> "StepSamples":
        """The samples of ``rows`` (indices or a bool mask) only."""
        return StepSamples(**{name: value[rows] for name, value in vars(self).items()})

    @classmethod
    def from_records(cls, records: Sequence[StepRecord], episode_return: Mapping[str, float],
                     success: Mapping[str, bool]) -> "StepSamples":
        """Samples of StepRecords; ``episode_return`` and ``success`` map each traj_uid to its episode's
        (TrajectoryRecord.episode_reward and .success)."""
        traj_uid = np.array([r.traj_uid for r in records], dtype=object)
        return cls(
            uid=np.array([r.uid for r in records], dtype=object),
            traj_uid=traj_uid,
            step_index=np.array([r.step for r in records], dtype=np.int64),
            step_reward=np.array([r.reward for r in records], dtype=np.float64),
            is_action_valid=np.array([r.is_action_valid for r in records], dtype=bool),
            anchor_obs=object_array([r.anchor_obs for r in records]),
            next_anchor_obs=object_array([r.next_anchor_obs for r in records]),
            cluster_id=object_array([r.cluster_id for r in records]),
            episode_return=np.array([episode_return[t] for t in traj_uid], dtype=np.float64),
            success=np.array([success[t] for t in traj_uid], dtype=bool),
            hidden_state=object_array([r.hidden_state for r in records]),
            next_hidden_state=object_array([r.next_hidden_state for r in records]),
        )


@dataclass
class StepInputs:
    """What the step part of the advantage takes, each (n,) aligned with the samples.

    Attributes:
        values: float64, the penalised step values the step part normalises (:func:`step_values`).
        group_keys: int64 codes of each step's step group within its task group (:func:`step_group_keys`); -1
            on every step when the estimator's step part is off.
    """

    values: np.ndarray
    group_keys: np.ndarray

    def take(self, rows: np.ndarray) -> "StepInputs":
        return StepInputs(self.values[rows], self.group_keys[rows])


def token_level_scores(samples: StepSamples, response_mask: torch.Tensor, penalty_coef: float) -> torch.Tensor:
    """Episode score (return minus the step's invalid-action penalty) on each row's last response token.

    Args:
        response_mask: (n, response_len), 1 on response tokens (right padded); a row without response tokens
            gets no score.

    Returns:
        (n, response_len) float32.
    """
    _, penalised = apply_invalid_action_penalty(np.zeros(len(samples)), samples.episode_return,
                                                samples.is_action_valid, penalty_coef)
    lengths = response_mask.sum(dim=-1).long()
    scores = torch.zeros(response_mask.shape, dtype=torch.float32)
    rows = torch.nonzero(lengths > 0).squeeze(-1)
    scores[rows, lengths[rows] - 1] = torch.as_tensor(penalised, dtype=torch.float32)[rows]
    return scores


def step_returns(samples: StepSamples, gamma: float, penalty_coef: float) -> np.ndarray:
    """(n,) discounted step returns over each sample's trajectory (the samples given), with the invalid-action
    penalty applied after discounting."""
    returns = compute_step_discounted_returns(samples.step_reward, samples.traj_uid, samples.step_index, gamma)
    penalised, _ = apply_invalid_action_penalty(returns, np.zeros_like(returns), samples.is_action_valid, penalty_coef)
    return penalised


def state_keys(samples: StepSamples, estimator: str, settings: Any) -> np.ndarray:
    """(n,) the state each step was taken in, as ``estimator`` sees states: ``forge``'s observation cluster (every
    step must have one: :func:`check_cluster_ids`), ``gigpo``'s anchor observation, or its similarity cluster within
    the task group with ``enable_similarity``; with ``step_state=environment``, that and the step's hidden state
    (int64 codes of the pairs: two steps at one observation in different hidden states are in different states)."""
    if estimator == "forge":
        check_cluster_ids(samples.cluster_id)
        states = samples.cluster_id
    elif estimator == "gigpo":
        states = samples.anchor_obs
        if bool(section_value(settings, "enable_similarity")):
            states = similarity_step_groups(samples.anchor_obs, samples.uid,
                                            float(section_value(settings, "similarity_thresh")))
    else:
        raise ValueError(f"{estimator!r} is not a step-level estimator; choose one of {STEP_ESTIMATORS}")
    return with_hidden_state(states, samples.hidden_state, str(section_value(settings, "step_state")))


def with_hidden_state(states: np.ndarray, hidden: np.ndarray, step_state: str) -> np.ndarray:
    """(n,) ``states`` as they are (``step_state=observation``), or int64 codes of the pairs (state, hidden state)
    (``environment``)."""
    if step_state not in STEP_STATES:
        raise ValueError(f"step_state={step_state!r}; choose one of {list(STEP_STATES)}")
    if step_state == "observation":
        return states
    return combine_codes(factorize(states)[0], factorize(hidden)[0])[0]


def step_group_keys(samples: StepSamples, states: np.ndarray, step_groups: str) -> np.ndarray:
    """(n,) int64: each step's step group within its task group, as dense codes (equal codes: one group).

    ``cluster`` / ``anchor`` (the paper's, GiGPO's): its state. ``cluster_and_turn`` / ``anchor_and_turn``: its state
    and turn (a later visit is compared only with visits at the same turn). ``first_visit``: its state for a
    trajectory's first step there, and a group of its own (step part 0) for the trajectory's later steps there.
    """
    known = {choice for choices in STEP_GROUPS.values() for choice in choices}
    if step_groups not in known:
        raise ValueError(f"step_groups={step_groups!r}; choose one of {sorted(known)}")
    state_codes, n_states = factorize(states)
    if step_groups.endswith("_and_turn"):
        return combine_codes(state_codes, samples.step_index)[0]
    if step_groups == "first_visit" and len(states):
        pair, _ = combine_codes(factorize(samples.traj_uid)[0], state_codes)
        order = np.lexsort((samples.step_index, pair))
        later = np.ones(len(states), dtype=bool)
        later[order[np.r_[0, np.flatnonzero(np.diff(pair[order])) + 1]]] = False
        codes = state_codes.copy()
        codes[later] = n_states + np.arange(int(later.sum()))  # a code of its own: a group of one
        return codes
    return state_codes


def transitions(samples: StepSamples, step_state: str = "observation") -> tuple[np.ndarray, np.ndarray]:
    """The step graph of each task group: (state_ids, next_state_ids), each (n,) int64.

    A state id numbers one anchor observation inside one task group (with ``step_state=environment``, one pair of
    an anchor observation and a hidden state): the graph's states are the observations themselves, however coarse
    the step groups are (an observation cluster may hold many states that lead to different places). A step's next
    state is the state of its ``next_anchor_obs`` (and ``next_hidden_state``) in the task group; ``TERMINAL`` where
    the environment ended the episode (None); ``UNSEEN`` where no step of the task group was taken there (a step
    limit cut the episode in a state the group never acted in).
    """
    n = len(samples)
    next_ids = np.full(n, TERMINAL, dtype=np.int64)
    if n == 0:
        return np.zeros(0, dtype=np.int64), next_ids
    uid_codes, _ = factorize(samples.uid)
    open_end = np.flatnonzero(np.array([o is not None for o in samples.next_anchor_obs], dtype=bool))
    observations = with_hidden_state(
        factorize(np.concatenate([samples.anchor_obs, samples.next_anchor_obs[open_end]]))[0],
        np.concatenate([samples.hidden_state, samples.next_hidden_state[open_end]]), step_state)
    pairs, _ = combine_codes(np.concatenate([uid_codes, uid_codes[open_end]]), observations)
    state_ids, _ = factorize(pairs[:n])
    if open_end.size:
        seen, first_row = np.unique(pairs[:n], return_index=True)
        pos = np.minimum(np.searchsorted(seen, pairs[n:]), len(seen) - 1)
        next_ids[open_end] = np.where(seen[pos] == pairs[n:], state_ids[first_row[pos]], UNSEEN)
    return state_ids, next_ids


def step_values(samples: StepSamples, step_value: str, gamma: float, penalty_coef: float,
                step_state: str = "observation") -> np.ndarray:
    """(n,) the value the step part normalises, minus the invalid-action penalty (after discounting, never carried
    to other steps): ``return``, the discounted return from the step on (:func:`step_returns`); ``next_state`` /
    ``best_next_state``, the step's reward plus gamma times the mean / best value of the state it led to over its
    task group's step graph (:func:`transitions` with ``step_state``, recipe/forge/core_forge.py
    ``compute_next_state_values``; valued over as many sweeps as the longest episode has steps)."""
    if step_value not in STEP_VALUES:
        raise ValueError(f"step_value={step_value!r}; choose one of {list(STEP_VALUES)}")
    if STEP_VALUES[step_value] is None:
        return step_returns(samples, gamma, penalty_coef)
    state_ids, next_ids = transitions(samples, step_state)
    horizon = int(samples.step_index.max()) + 1 if len(samples) else 0
    values = compute_next_state_values(samples.step_reward, state_ids, next_ids, gamma, horizon,
                                       value=STEP_VALUES[step_value])
    penalised, _ = apply_invalid_action_penalty(values, np.zeros_like(values), samples.is_action_valid, penalty_coef)
    return penalised


def step_part_on(estimator: str, settings: Any) -> bool:
    """Whether ``estimator``'s advantage has a step part (gigpo always; forge with ``use_step_rewards`` and a
    non-zero ``step_advantage_w``)."""
    if estimator == "gigpo":
        return True
    return bool(section_value(settings, "use_step_rewards")) and float(section_value(settings, "step_advantage_w")) != 0.0


def step_inputs(samples: StepSamples, estimator: str, algorithm: Any) -> StepInputs:
    """The :class:`StepInputs` of ``samples`` under the typed algorithm section (or a mapping with ``gamma``,
    ``invalid_action_penalty_coef`` and the estimator's section): every step of every episode in the batch takes
    part (a step with an empty generation is still a step of its episode and a transition of its group's graph);
    the caller keeps the rows it trains on with :meth:`StepInputs.take`."""
    if estimator not in STEP_ESTIMATORS:
        raise ValueError(f"{estimator!r} is not a step-level estimator; choose one of {STEP_ESTIMATORS}")
    settings = section_value(algorithm, estimator)
    gamma = float(section_value(algorithm, "gamma"))
    coef = float(section_value(algorithm, "invalid_action_penalty_coef"))
    if not step_part_on(estimator, settings):
        return StepInputs(np.zeros(len(samples)), np.full(len(samples), -1, dtype=np.int64))
    states = state_keys(samples, estimator, settings)
    return StepInputs(step_values(samples, str(section_value(settings, "step_value")), gamma, coef,
                                  str(section_value(settings, "step_state"))),
                      step_group_keys(samples, states, str(section_value(settings, "step_groups"))))


def step_advantage(
    estimator: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    inputs: StepInputs,
    uid: Sequence[Any] | np.ndarray,
    traj_uid: Sequence[Any] | np.ndarray,
    *,
    settings: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns, each (n, response_len), of a step-level estimator (:data:`STEP_ESTIMATORS`).

    Args:
        token_level_rewards: (n, response_len); row sums are the episode scores (:func:`token_level_scores`).
        response_mask: (n, response_len).
        inputs: the rows' step values and step-group keys (:func:`step_inputs`).
        uid: (n,) task-group uid; traj_uid: (n,) episode.
        settings: the estimator's section (``algorithm.forge`` or ``algorithm.gigpo``: a dataclass or mapping).
    """
    if estimator not in STEP_ESTIMATORS:
        raise ValueError(f"{estimator!r} is not a step-level estimator; choose one of {STEP_ESTIMATORS}")
    on = step_part_on(estimator, settings)
    return compute_forge_advantage(
        token_level_rewards, inputs.values, response_mask, uid, traj_uid, inputs.group_keys,
        use_step_rewards=on, step_advantage_w=float(section_value(settings, "step_advantage_w")),
        mode=section_value(settings, "mode"), episode_norm_over=section_value(settings, "episode_norm_over"),
    )


def samples_advantage(estimator: str, token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                      samples: StepSamples, inputs: StepInputs, algorithm: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`step_advantage` of ``samples`` (the trained rows) with their ``inputs`` and the estimator's section of
    ``algorithm``; shapes as there."""
    if estimator not in STEP_ESTIMATORS:
        raise ValueError(f"{estimator!r} is not a step-level estimator; choose one of {STEP_ESTIMATORS}")
    return step_advantage(estimator, token_level_rewards, response_mask, inputs, samples.uid, samples.traj_uid,
                          settings=section_value(algorithm, estimator))


def check_cluster_ids(cluster_id: Sequence[Any] | np.ndarray | None) -> None:
    """A ValueError unless every step has an observation cluster (the ``forge`` step groups)."""
    missing = None if cluster_id is None else sum(c is None for c in cluster_id)
    if cluster_id is None or missing:
        which = "the steps" if cluster_id is None else f"{missing} of {len(cluster_id)} steps"
        raise ValueError(
            f"the forge estimator groups steps by the observation cluster that drove retrieval, but {which} came "
            "without a cluster id (the rollout ran without the experience system): group by anchor observation "
            "with algorithm.adv_estimator=gigpo, or turn the step part off (algorithm.forge.use_step_rewards=false)"
        )


def section_value(section: Any, key: str) -> Any:
    """``section[key]`` of a mapping, else ``section.key`` (typed config sections)."""
    return section[key] if isinstance(section, Mapping) else getattr(section, key)


def object_array(values: Sequence[Any]) -> np.ndarray:
    """A 1-D object array of ``values`` (tuples and arrays stay elements, never become rows)."""
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out
