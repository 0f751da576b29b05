"""The verl engine's advantage step, as pure functions over one training batch of per-step rows.

verl stores every element of an agent loop's ``list[AgentLoopOutput]`` as its own row and copies the LAST
element's ``reward_score`` onto every row of the episode. The agent loop therefore carries
the step data in ``extra_fields`` (see :data:`STEP_FIELDS`) and this module rebuilds, per row:

* the token-level score: episode return minus that step's invalid-action penalty, on the last response token
  (so ``token_level_rewards.sum(-1)`` is GiGPO's episode score);
* the discounted step return R_t = sum_k gamma^(k-t) r_k over the row's trajectory, minus the same penalty;
* the step-group key: the observation cluster (``forge``) or the anchor observation (``gigpo``).

and computes the advantages with recipe/forge/core_forge.py, the same functions the local engine uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from recipe.forge.core_forge import (
    apply_invalid_action_penalty,
    compute_forge_advantage,
    compute_gigpo_advantage,
    compute_step_discounted_returns,
)

# Keys the forge agent loop writes into every row's extra_fields.
STEP_FIELDS = (
    "step_reward",  # float: environment reward of this step
    "is_action_valid",  # bool: the response held a well-formed action
    "anchor_obs",  # str: raw observation the action was taken in
    "cluster_id",  # int | None: observation cluster that drove retrieval (None without a library)
    "traj_uid",  # str: one episode
    "step_index",  # int: position of the step in its episode
    "episode_return",  # float: summed environment reward of the episode
    "success",  # bool: the episode was won
    "library_version",  # int: experience-library snapshot the step was generated with (-1: none)
)
STEP_ESTIMATORS = ("forge", "gigpo")


@dataclass
class StepArrays:
    """Per-row step data of a batch, each of shape (bs,)."""

    step_reward: np.ndarray
    is_action_valid: np.ndarray
    anchor_obs: np.ndarray
    cluster_id: np.ndarray
    traj_uid: np.ndarray
    step_index: np.ndarray
    episode_return: np.ndarray
    success: np.ndarray
    library_version: np.ndarray


def take(steps: StepArrays, rows: np.ndarray) -> StepArrays:
    """The step data of ``rows`` (indices or a bool mask) only."""
    return StepArrays(**{name: value[rows] for name, value in vars(steps).items()})


def step_arrays(extra_fields: Sequence[Mapping[str, Any]]) -> StepArrays:
    """Collect the step fields of every row; a row without them was not produced by the forge agent loop."""
    rows = [getattr(row, "data", row) for row in extra_fields]
    missing = [i for i, row in enumerate(rows) if not isinstance(row, Mapping) or "traj_uid" not in row]
    if missing:
        raise ValueError(
            f"{len(missing)} batch rows (first: {missing[0]}) carry no forge step fields in extra_fields; "
            "step-level estimators need actor_rollout_ref.rollout.agent.default_agent_loop=forge_agent"
        )

    def column(name: str, dtype) -> np.ndarray:
        return np.array([row[name] for row in rows], dtype=dtype)

    return StepArrays(
        step_reward=column("step_reward", np.float64),
        is_action_valid=column("is_action_valid", bool),
        anchor_obs=column("anchor_obs", object),
        cluster_id=column("cluster_id", object),
        traj_uid=column("traj_uid", object),
        step_index=column("step_index", np.int64),
        episode_return=column("episode_return", np.float64),
        success=column("success", bool),
        library_version=column("library_version", np.int64),
    )


def token_level_scores(steps: StepArrays, response_mask: torch.Tensor, penalty_coef: float) -> torch.Tensor:
    """Episode score (return minus the step's invalid-action penalty) on each row's last response token.

    Args:
        response_mask: (bs, response_len), 1 on response tokens (right padded).

    Returns:
        (bs, response_len) float32.
    """
    penalised = steps.episode_return - penalty_coef * (~steps.is_action_valid)
    lengths = response_mask.sum(dim=-1).long()
    scores = torch.zeros(response_mask.shape, dtype=torch.float32)
    rows = torch.nonzero(lengths > 0).squeeze(-1)
    scores[rows, lengths[rows] - 1] = torch.as_tensor(penalised, dtype=torch.float32)[rows]
    return scores


def step_returns(steps: StepArrays, gamma: float, penalty_coef: float) -> np.ndarray:
    """(bs,) discounted step returns with the invalid-action penalty applied after discounting."""
    returns = compute_step_discounted_returns(steps.step_reward, steps.traj_uid, steps.step_index, gamma)
    penalised, _ = apply_invalid_action_penalty(returns, np.zeros_like(returns), steps.is_action_valid, penalty_coef)
    return penalised


def compute_step_advantage(
    estimator: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    uid: Sequence[Any] | np.ndarray,
    steps: StepArrays,
    algorithm: Any,
    returns: np.ndarray | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns, each (bs, response_len), of the ``forge`` or ``gigpo`` estimator.

    Args:
        token_level_rewards: (bs, response_len); row sums are the episode scores.
        response_mask: (bs, response_len).
        uid: (bs,) task-group uid (the G sessions of one prompt share it).
        steps: the rows' step data.
        algorithm: the typed ``algorithm`` section (ForgeAlgoConfig) or an equivalent mapping.
        returns: (bs,) penalised discounted step returns when computed over more steps than these rows (steps
            without a training row still discount into the steps before them); default: from ``steps``.
    """
    if returns is None:
        returns = step_returns(steps, float(_get(algorithm, "gamma")), float(_get(algorithm, "invalid_action_penalty_coef")))
    if estimator == "forge":
        settings = _get(algorithm, "forge")
        if bool(_get(settings, "use_step_rewards")) and any(c is None for c in steps.cluster_id):
            raise ValueError("the forge estimator needs a cluster id on every step; rows came without a library")
        return compute_forge_advantage(
            token_level_rewards,
            returns,
            response_mask,
            uid,
            steps.traj_uid,
            steps.cluster_id,
            use_step_rewards=bool(_get(settings, "use_step_rewards")),
            step_advantage_w=float(_get(settings, "step_advantage_w")),
            mode=_get(settings, "mode"),
            episode_norm_over=_get(settings, "episode_norm_over"),
        )
    if estimator == "gigpo":
        settings = _get(algorithm, "gigpo")
        return compute_gigpo_advantage(
            token_level_rewards,
            returns,
            response_mask,
            steps.anchor_obs,
            uid,
            steps.traj_uid,
            step_advantage_w=float(_get(settings, "step_advantage_w")),
            mode=_get(settings, "mode"),
            enable_similarity=bool(_get(settings, "enable_similarity")),
            similarity_thresh=float(_get(settings, "similarity_thresh")),
            episode_norm_over=_get(settings, "episode_norm_over"),
        )
    raise ValueError(f"{estimator!r} is not a step-level estimator; choose one of {STEP_ESTIMATORS}")


def episode_metrics(steps: StepArrays) -> dict[str, float]:
    """Success rate, return, length and valid-action ratio of the episodes in a batch (one value per episode),
    under the embedded engine's names (recipe/forge/metric_names.py)."""
    _, first = np.unique(steps.traj_uid.astype(str), return_index=True)
    n_steps = np.bincount(np.unique(steps.traj_uid.astype(str), return_inverse=True)[1])
    return {
        "success_rate": float(steps.success[first].mean()),
        "episode_reward/mean": float(steps.episode_return[first].mean()),
        "episode_reward/std": float(steps.episode_return[first].std()),
        "episode_length/mean": float(n_steps.mean()),
        "valid_action_ratio": float(steps.is_action_valid.mean()),
        "num_trajectories": float(len(first)),
        "num_steps": float(len(steps.traj_uid)),
    }


def _get(section: Any, key: str) -> Any:
    return section[key] if isinstance(section, Mapping) else getattr(section, key)
