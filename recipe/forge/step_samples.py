"""Step samples: from the steps of a rollout to the inputs and advantages of the step-level estimators.

Both engines train on one sample per environment step. Their steps arrive in two forms: StepRecords on the
embedded engine (:meth:`StepSamples.from_records`), and on the verl engine training rows whose ``extra_fields``
the forge agent loop wrote from its StepRecords, read back as StepRecords by the row codec
(recipe/forge/engines/verl/row_codec.py, ``samples_from_rows``). From there everything is shared:

* :func:`token_level_scores`: the episode score (episode return minus that step's invalid-action penalty) on the
  sample's last response token, so ``token_level_rewards.sum(-1)`` is GiGPO's episode score;
* :func:`step_returns`: the discounted step return R_t = sum_k gamma^(k-t) r_k over the sample's trajectory,
  minus the same penalty (after discounting);
* :func:`step_advantage`: the ``forge`` or ``gigpo`` advantage (recipe/forge/core_forge.py), which the engines and
  verl's registry adapters (recipe/forge/estimator_registry.py) all call.

The engines keep only the packing into their tensors.

Step groups. ``gigpo`` groups a task group's steps by anchor observation. ``forge`` groups them by the
observation cluster that drove retrieval (``cluster_id``); while forge's step part is on (``use_step_rewards`` and
``step_advantage_w != 0``) a step without one (a rollout that ran without the experience system) is an error on
both engines and in verl's registry entry, not a silent fallback to anchors: such a run is GiGPO, and
``algorithm.adv_estimator=gigpo`` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from agent_system.multi_turn_rollout.protocols import StepRecord
from recipe.forge.core_forge import (
    apply_invalid_action_penalty,
    compute_forge_advantage,
    compute_gigpo_advantage,
    compute_step_discounted_returns,
)

STEP_ESTIMATORS = ("forge", "gigpo")


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
        cluster_id: object (int or None), the observation cluster that drove retrieval.
        episode_return: float64, the episode's summed reward.
        success: bool, the episode was won.
    """

    uid: np.ndarray
    traj_uid: np.ndarray
    step_index: np.ndarray
    step_reward: np.ndarray
    is_action_valid: np.ndarray
    anchor_obs: np.ndarray
    cluster_id: np.ndarray
    episode_return: np.ndarray
    success: np.ndarray

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
            anchor_obs=np.array([r.anchor_obs for r in records], dtype=object),
            cluster_id=np.array([r.cluster_id for r in records], dtype=object),
            episode_return=np.array([episode_return[t] for t in traj_uid], dtype=np.float64),
            success=np.array([success[t] for t in traj_uid], dtype=bool),
        )


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


def step_advantage(
    estimator: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    returns: np.ndarray | torch.Tensor,
    uid: Sequence[Any] | np.ndarray,
    traj_uid: Sequence[Any] | np.ndarray,
    *,
    settings: Any,
    cluster_id: Sequence[Any] | np.ndarray | None = None,
    anchor_obs: Sequence[Any] | np.ndarray | None = None,
    step_index: Sequence[int] | np.ndarray | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns, each (n, response_len), of a step-level estimator (:data:`STEP_ESTIMATORS`).

    Args:
        token_level_rewards: (n, response_len); row sums are the episode scores (:func:`token_level_scores`).
        response_mask: (n, response_len).
        returns: (n,) penalised discounted step returns (:func:`step_returns`).
        uid: (n,) task-group uid; traj_uid: (n,) episode.
        settings: the estimator's section (``algorithm.forge`` or ``algorithm.gigpo``: a dataclass or mapping).
        cluster_id: (n,) observation clusters, the ``forge`` step groups (needed when its step part is on).
        anchor_obs: (n,) raw observations, the ``gigpo`` step groups.
        step_index: (n,) turn of each step in its episode; with ``forge``'s ``step_groups: cluster_and_turn`` a
            step group is one cluster at one turn.
    """
    def setting(key: str) -> Any:
        return section_value(settings, key)

    if estimator == "forge":
        if bool(setting("use_step_rewards")) and float(setting("step_advantage_w")) != 0.0:
            check_cluster_ids(cluster_id)
        return compute_forge_advantage(
            token_level_rewards, returns, response_mask, uid, traj_uid,
            forge_step_groups(cluster_id, step_index, setting("step_groups")),
            use_step_rewards=bool(setting("use_step_rewards")), step_advantage_w=float(setting("step_advantage_w")),
            mode=setting("mode"), episode_norm_over=setting("episode_norm_over"),
        )
    if estimator == "gigpo":
        if anchor_obs is None:
            raise ValueError("the gigpo estimator needs the anchor observation of every step (anchor_obs)")
        return compute_gigpo_advantage(
            token_level_rewards, returns, response_mask, anchor_obs, uid, traj_uid,
            step_advantage_w=float(setting("step_advantage_w")), mode=setting("mode"),
            enable_similarity=bool(setting("enable_similarity")), similarity_thresh=float(setting("similarity_thresh")),
            episode_norm_over=setting("episode_norm_over"),
        )
    raise ValueError(f"{estimator!r} is not a step-level estimator; choose one of {STEP_ESTIMATORS}")


def samples_advantage(estimator: str, token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                      samples: StepSamples, returns: np.ndarray, algorithm: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`step_advantage` of ``samples`` with the estimator's section of ``algorithm`` (the typed algorithm
    section, or a mapping with ``forge`` / ``gigpo``); shapes as there."""
    if estimator not in STEP_ESTIMATORS:
        raise ValueError(f"{estimator!r} is not a step-level estimator; choose one of {STEP_ESTIMATORS}")
    return step_advantage(estimator, token_level_rewards, response_mask, returns, samples.uid, samples.traj_uid,
                          settings=section_value(algorithm, estimator), cluster_id=samples.cluster_id,
                          anchor_obs=samples.anchor_obs, step_index=samples.step_index)


def forge_step_groups(cluster_id: Sequence[Any] | np.ndarray | None, step_index: Sequence[int] | np.ndarray | None,
                      step_groups: str) -> Sequence[Any] | np.ndarray | None:
    """(n,) the forge step-group key of each step: its cluster (``cluster``), or (cluster, turn)
    (``cluster_and_turn``: a state's value in a time-limited episode depends on the steps left, so a later visit
    is compared only with visits at the same turn)."""
    if step_groups == "cluster" or cluster_id is None:
        return cluster_id
    if step_groups != "cluster_and_turn":
        raise ValueError(f"step_groups={step_groups!r}; choose one of ('cluster', 'cluster_and_turn')")
    if step_index is None:
        raise ValueError("step_groups='cluster_and_turn' needs the turn of every step (step_index)")
    keys = np.empty(len(cluster_id), dtype=object)
    keys[:] = [None if c is None else (c, int(t)) for c, t in zip(cluster_id, step_index)]
    return keys


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
