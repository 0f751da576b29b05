"""Advantage estimators of SLEA-RL: ``forge`` and its baseline ``gigpo`` (pure, vectorised).

Every environment step is one training sample. Samples carry a task-group uid (``index``: the G copies of
one task), a trajectory uid (``traj_index``) and a step-group key. The advantage of a sample is

    A = A_episode + w * A_step

* ``A_episode``: the sample's episode score (summed token-level reward, i.e. the trajectory return minus that
  step's invalid-action penalty) normalised over its task group. Statistics are taken over all step samples
  of the group (``episode_norm_over="steps"``, longer trajectories weigh more) or over one score per
  trajectory (``"trajectories"``). A singleton group uses mean 0 and std 1.
* ``A_step``: the sample's step value normalised over its step group, the samples of the same task group whose
  step keys are equal. GiGPO keys are the anchor observations (exact match, or greedy similarity clusters);
  forge keys are supplied by the caller (the observation index's cluster ids, the same clusters that drove
  retrieval). A singleton step group gives 0. The step value is the paper's discounted return from the step on
  (:func:`compute_step_discounted_returns`), or what the action led to (:func:`compute_next_state_values`: the
  step's reward plus the discounted value of the state it reached, which does not depend on the turn the action
  was taken at).

Modes: ``mean_norm`` (x - mean) and ``mean_std_norm`` ((x - mean) / (std + epsilon)); std is the unbiased
sample standard deviation, as in verl's GRPO. Every group operation is a scatter over integer group ids
(O(n) after an O(n log n) or hashed factorisation), with no Python loop over samples.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch
from rapidfuzz import fuzz, process

from recipe.forge.experience.bounds import bounded_key

ADVANTAGE_MODES = ("mean_norm", "mean_std_norm")
EPISODE_NORM_OVER = ("steps", "trajectories")
STATE_VALUES = ("mean", "best")  # the value of a state in compute_next_state_values
TERMINAL, UNSEEN = -1, -2  # next-state ids of compute_next_state_values: the episode ended; a state no step left


def factorize(keys: Sequence[Any] | np.ndarray) -> tuple[np.ndarray, int]:
    """Map arbitrary hashable keys to dense int64 codes in order of first appearance.

    Args:
        keys: (n,) keys (strings, ints, tuples, ...).

    Returns:
        codes: (n,) int64 in [0, n_unique); n_unique.
    """
    arr = np.asarray(keys, dtype=object) if not isinstance(keys, np.ndarray) else keys
    if arr.ndim != 1:
        arr = np.fromiter(((k if not isinstance(k, np.ndarray) else tuple(k.tolist())) for k in keys), dtype=object)
    codes, uniques = pd.factorize(arr, use_na_sentinel=False)
    return codes.astype(np.int64, copy=False), len(uniques)


def combine_codes(outer: np.ndarray, inner: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense codes of the pairs (outer, inner) of two code arrays of shape (n,)."""
    inner_size = int(inner.max()) + 1 if inner.size else 1
    return factorize(outer.astype(np.int64) * inner_size + inner.astype(np.int64))


def compute_step_discounted_returns(
    step_rewards: np.ndarray | torch.Tensor,
    traj_index: Sequence[Any] | np.ndarray,
    step_index: Sequence[int] | np.ndarray,
    gamma: float,
) -> np.ndarray:
    """Per-trajectory discounted returns R_t = sum_{k >= t} gamma^(k - t) r_k.

    Steps of a trajectory are ordered by ``step_index`` (gaps allowed; only the order matters).

    Args:
        step_rewards: (n,) reward of each step sample.
        traj_index: (n,) trajectory uid of each sample.
        step_index: (n,) position of the step inside its trajectory.
        gamma: discount in [0, 1].

    Returns:
        (n,) float64 discounted returns, aligned with the inputs.
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma={gamma} must be in [0, 1]")
    rewards = _as_numpy(step_rewards).astype(np.float64)
    n = rewards.shape[0]
    if n == 0:
        return rewards
    traj_codes, n_traj = factorize(traj_index)
    steps = np.asarray(step_index, dtype=np.int64)
    order = np.lexsort((steps, traj_codes))
    sorted_traj = traj_codes[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_traj)) + 1]
    lengths = np.diff(np.r_[starts, n])
    position = np.arange(n) - np.repeat(starts, lengths)
    row = np.repeat(np.arange(len(starts)), lengths)
    padded = np.zeros((len(starts), int(lengths.max()) + 1))
    padded[row, position] = rewards[order]
    # Backward recurrence R_t = r_t + gamma * R_{t+1}, vectorised over trajectories; O(max_len) numpy ops.
    for t in range(padded.shape[1] - 2, -1, -1):
        padded[:, t] += gamma * padded[:, t + 1]
    returns = np.empty(n)
    returns[order] = padded[row, position]
    return returns


def compute_next_state_values(
    rewards: np.ndarray | torch.Tensor,
    state_ids: np.ndarray,
    next_state_ids: np.ndarray,
    gamma: float,
    horizon: int,
    *,
    value: str = "mean",
) -> np.ndarray:
    """Step values that credit where an action led, not when it was taken: Q_i = r_i + gamma * V(s'_i).

    Every step i is one observed transition s_i -> s'_i with reward r_i of a graph whose nodes are states (a state
    is one step-group key inside one task group: the caller numbers them). V is the state's value on that graph:

        value="mean": V(s) = mean over the steps i taken at s of r_i + gamma * V(s'_i)   (the behaviour policy's)
        value="best": V(s) = max  over the steps i taken at s of r_i + gamma * V(s'_i)   (the best continuation seen)

    from V = 0, ``horizon`` sweeps (the longest episode: every path seen is then valued to its end). V(s') = 0 where
    the environment ended the episode (``TERMINAL``). A next state in which no step was taken (``UNSEEN``: a step
    limit cut the episode there) has no value of its own and takes the value of the state the step left, V(s_i).
    Two steps that took one action at one state reach one next state in a deterministic environment, so they get
    one value whatever their turns: a revisited state's later visit is not worth more for being later.

    Args:
        rewards: (n,) environment reward of each step (no invalid-action penalty: it is not carried to other steps).
        state_ids: (n,) int64 in [0, n_states): the state each step was taken in.
        next_state_ids: (n,) int64: the state it led to, TERMINAL or UNSEEN.
        gamma: discount in [0, 1].
        horizon: number of sweeps, >= 0.

    Returns:
        (n,) float64 Q_i.
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma={gamma} must be in [0, 1]")
    if value not in STATE_VALUES:
        raise ValueError(f"value={value!r}; choose one of {STATE_VALUES}")
    r = _as_numpy(rewards).astype(np.float64)
    states = np.asarray(state_ids, dtype=np.int64)
    nxt = np.asarray(next_state_ids, dtype=np.int64)
    if not r.shape == states.shape == nxt.shape:
        raise ValueError(f"rewards {r.shape}, state_ids {states.shape} and next_state_ids {nxt.shape} must align")
    n_states = int(states.max()) + 1 if states.size else 0
    if nxt.size and (nxt.max() >= n_states or nxt.min() < UNSEEN):
        raise ValueError(f"next_state_ids must be in [0, {n_states}), TERMINAL ({TERMINAL}) or UNSEEN ({UNSEEN})")
    target = np.where(nxt == UNSEEN, states, nxt)
    alive = target >= 0
    counts = np.bincount(states, minlength=n_states)
    values = np.zeros(n_states)
    for _ in range(max(0, int(horizon))):
        q = r + gamma * np.where(alive, values[np.maximum(target, 0)], 0.0)
        if value == "mean":
            values = np.bincount(states, weights=q, minlength=n_states) / np.maximum(counts, 1)
        else:
            values = np.full(n_states, -np.inf)
            np.maximum.at(values, states, q)
    return r + gamma * np.where(alive, values[np.maximum(target, 0)], 0.0)


def apply_invalid_action_penalty(
    step_returns: np.ndarray | torch.Tensor,
    episode_scores: np.ndarray | torch.Tensor,
    is_action_valid: np.ndarray | torch.Tensor,
    coef: float = 0.1,
) -> tuple[np.ndarray, np.ndarray]:
    """Subtract ``coef`` from the step return (after discounting) and the episode score of invalid steps.

    Args:
        step_returns: (n,) discounted step returns.
        episode_scores: (n,) episode score of each step sample.
        is_action_valid: (n,) bool.

    Returns:
        penalised (step_returns, episode_scores), both (n,) float64.
    """
    invalid = ~_as_numpy(is_action_valid).astype(bool)
    penalty = coef * invalid.astype(np.float64)
    return _as_numpy(step_returns).astype(np.float64) - penalty, _as_numpy(episode_scores).astype(np.float64) - penalty


def group_mean_std(values: torch.Tensor, group_ids: torch.Tensor, n_groups: int) -> tuple[torch.Tensor, ...]:
    """Per-group mean, unbiased std and size.

    Args:
        values: (n,) float tensor.
        group_ids: (n,) int64 tensor in [0, n_groups).

    Returns:
        mean (n_groups,), std (n_groups,) (0 for singleton groups), count (n_groups,).
    """
    dtype = values.dtype
    count = torch.zeros(n_groups, dtype=dtype).index_add_(0, group_ids, torch.ones_like(values))
    mean = torch.zeros(n_groups, dtype=dtype).index_add_(0, group_ids, values) / count.clamp(min=1)
    sq_dev = (values - mean[group_ids]) ** 2
    var = torch.zeros(n_groups, dtype=dtype).index_add_(0, group_ids, sq_dev) / (count - 1).clamp(min=1)
    return mean, var.sqrt(), count


def compute_episode_advantage(
    episode_scores: torch.Tensor,
    index: Sequence[Any] | np.ndarray,
    traj_index: Sequence[Any] | np.ndarray | None = None,
    *,
    mode: str = "mean_norm",
    episode_norm_over: str = "steps",
    epsilon: float = 1e-6,
) -> torch.Tensor:
    """Episode-level (GRPO-style) advantage of each step sample over its task group.

    Args:
        episode_scores: (n,) episode score of each step sample.
        index: (n,) task-group uid.
        traj_index: (n,) trajectory uid; required when ``episode_norm_over="trajectories"``.

    Returns:
        (n,) advantages in the dtype of ``episode_scores``.
    """
    _check_mode(mode)
    if episode_norm_over not in EPISODE_NORM_OVER:
        raise ValueError(f"episode_norm_over={episode_norm_over!r}; choose one of {EPISODE_NORM_OVER}")
    scores = episode_scores
    uid_codes, n_uid = factorize(index)
    uid_ids = torch.from_numpy(uid_codes)
    if episode_norm_over == "steps":
        mean, std, count = group_mean_std(scores, uid_ids, n_uid)
    else:
        if traj_index is None:
            raise ValueError("episode_norm_over='trajectories' needs traj_index")
        traj_codes, n_traj = factorize(traj_index)
        traj_ids = torch.from_numpy(traj_codes)
        traj_score, _, _ = group_mean_std(scores, traj_ids, n_traj)
        traj_uid = torch.zeros(n_traj, dtype=torch.int64).index_copy_(0, traj_ids, uid_ids)
        mean, std, count = group_mean_std(traj_score, traj_uid, n_uid)
    singleton = count <= 1
    mean = torch.where(singleton, torch.zeros_like(mean), mean)
    std = torch.where(singleton, torch.ones_like(std), std)
    centred = scores - mean[uid_ids]
    if mode == "mean_norm":
        return centred
    return centred / (std[uid_ids] + epsilon)


def compute_step_advantage(
    step_returns: torch.Tensor,
    step_group_ids: np.ndarray | torch.Tensor,
    *,
    mode: str = "mean_norm",
    epsilon: float = 1e-6,
) -> torch.Tensor:
    """Step-level advantage of each sample over its step group; singleton groups give 0.

    Args:
        step_returns: (n,) step values (discounted returns, or next-state values), penalised.
        step_group_ids: (n,) dense int group ids (already combined with the task-group uid).

    Returns:
        (n,) advantages.
    """
    _check_mode(mode)
    ids = torch.as_tensor(np.asarray(step_group_ids), dtype=torch.int64)
    n_groups = int(ids.max()) + 1 if ids.numel() else 0
    # A singleton group is its own mean, so it gets 0 in both modes (its std is defined as 0).
    mean, std, _ = group_mean_std(step_returns, ids, n_groups)
    centred = step_returns - mean[ids]
    return centred if mode == "mean_norm" else centred / (std[ids] + epsilon)


def similarity_step_groups(
    anchor_obs: Sequence[str] | np.ndarray, index: Sequence[Any] | np.ndarray, similarity_thresh: float
) -> np.ndarray:
    """Cluster anchors inside each task group by string similarity; returns (n,) dense step-group ids.

    Metric: ``rapidfuzz.fuzz.ratio / 100`` = 1 - InDel(a, b) / (|a| + |b|) = 2 * LCS(a, b) / (|a| + |b|),
    the quantity difflib's ``SequenceMatcher.ratio`` approximates (difflib's block matching can only find
    a shorter common subsequence, so this score is >= difflib's). Anchors are first deduplicated exactly;
    each distinct anchor then joins the most similar existing cluster representative of its task group whose
    score reaches the threshold (ties: the earliest cluster), else founds a new cluster. An anchor longer than
    ``bounds.MAX_KEY_CHARS`` is compared by its bounded key (its start, length and digest), as the experience
    index compares observations, so a step's cost is bounded whatever the observation's size. Cost per task group is
    O(distinct anchors x clusters) C-level comparisons, independent of the rest of the batch.
    """
    uid_codes, _ = factorize(index)
    anchor_codes, _ = factorize(anchor_obs)
    pair_codes, n_pairs = combine_codes(uid_codes, anchor_codes)
    first = np.full(n_pairs, -1, dtype=np.int64)
    first[pair_codes[::-1]] = np.arange(len(pair_codes))[::-1]
    anchors = np.asarray(anchor_obs, dtype=object)
    pair_uid = uid_codes[first]
    pair_text = anchors[first]
    cluster_of_pair = np.empty(n_pairs, dtype=np.int64)
    cutoff = similarity_thresh * 100.0
    next_cluster = 0
    order = np.argsort(pair_uid, kind="stable")
    bounds = np.r_[0, np.flatnonzero(np.diff(pair_uid[order])) + 1, n_pairs]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        reps: list[str] = []
        rep_cluster: list[int] = []
        for pair in order[lo:hi]:
            text = bounded_key(str(pair_text[pair]))  # compared as the experience index compares them
            match = process.extractOne(text, reps, scorer=fuzz.ratio, score_cutoff=cutoff) if reps else None
            if match is None:
                reps.append(text)
                rep_cluster.append(next_cluster)
                cluster_of_pair[pair] = next_cluster
                next_cluster += 1
            else:
                cluster_of_pair[pair] = rep_cluster[match[2]]
    return cluster_of_pair[pair_codes]


def compute_forge_advantage(
    token_level_rewards: torch.Tensor,
    step_rewards: torch.Tensor | np.ndarray,
    response_mask: torch.Tensor,
    index: Sequence[Any] | np.ndarray,
    traj_index: Sequence[Any] | np.ndarray,
    step_group_keys: Sequence[Any] | np.ndarray | None,
    *,
    use_step_rewards: bool = True,
    step_advantage_w: float = 1.0,
    mode: str = "mean_norm",
    episode_norm_over: str = "steps",
    epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SLEA-RL advantage: episode part over ``index`` plus ``w`` x step part over (index, step_group_keys).

    Args:
        token_level_rewards: (bs, response_len); its row sum is the sample's episode score.
        step_rewards: (bs,) step values: discounted step returns (:func:`compute_step_discounted_returns`) or
            next-state values (:func:`compute_next_state_values`), with the invalid-action penalty already applied
            (:func:`apply_invalid_action_penalty`).
        response_mask: (bs, response_len), 1 on response tokens.
        index: (bs,) task-group uid.
        traj_index: (bs,) trajectory uid.
        step_group_keys: (bs,) step-group key of each sample (the observation index's cluster id, or the
            caller's refinement of it: by turn, first visits); only compared within a task group. Ignored when
            ``use_step_rewards`` is False.

    Returns:
        advantages, returns: (bs, response_len), the same tensor, zero outside the response mask.
    """
    scores = token_level_rewards.sum(dim=-1).to(torch.float64)
    advantage = compute_episode_advantage(
        scores, index, traj_index, mode=mode, episode_norm_over=episode_norm_over, epsilon=epsilon
    )
    if use_step_rewards and step_advantage_w != 0.0:
        if step_group_keys is None:
            raise ValueError("compute_forge_advantage needs step_group_keys when use_step_rewards is True")
        uid_codes, _ = factorize(index)
        key_codes, _ = factorize(step_group_keys)
        group_ids, _ = combine_codes(uid_codes, key_codes)
        step_returns = torch.as_tensor(_as_numpy(step_rewards), dtype=torch.float64)
        advantage = advantage + step_advantage_w * compute_step_advantage(
            step_returns, group_ids, mode=mode, epsilon=epsilon
        )
    return _broadcast(advantage, token_level_rewards, response_mask)


def compute_gigpo_advantage(
    token_level_rewards: torch.Tensor,
    step_rewards: torch.Tensor | np.ndarray,
    response_mask: torch.Tensor,
    anchor_obs: Sequence[Any] | np.ndarray,
    index: Sequence[Any] | np.ndarray,
    traj_index: Sequence[Any] | np.ndarray,
    *,
    step_advantage_w: float = 1.0,
    mode: str = "mean_norm",
    enable_similarity: bool = False,
    similarity_thresh: float = 0.95,
    episode_norm_over: str = "steps",
    epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GiGPO advantage: step groups are identical anchor observations (or similarity clusters) per task group.

    Args and returns as :func:`compute_forge_advantage`, with ``anchor_obs`` (bs,) the raw observations.
    """
    keys = similarity_step_groups(anchor_obs, index, similarity_thresh) if enable_similarity else anchor_obs
    return compute_forge_advantage(
        token_level_rewards,
        step_rewards,
        response_mask,
        index,
        traj_index,
        keys,
        use_step_rewards=True,
        step_advantage_w=step_advantage_w,
        mode=mode,
        episode_norm_over=episode_norm_over,
        epsilon=epsilon,
    )


def _broadcast(
    advantage: torch.Tensor, token_level_rewards: torch.Tensor, response_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    scores = advantage.to(token_level_rewards.dtype).unsqueeze(-1) * response_mask.to(token_level_rewards.dtype)
    return scores, scores  # returns = advantages: one tensor, as verl's outcome estimators return it


def _check_mode(mode: str) -> None:
    if mode not in ADVANTAGE_MODES:
        raise ValueError(f"mode={mode!r}; choose one of {ADVANTAGE_MODES}")


def _as_numpy(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)
