"""forge / gigpo advantage estimators against hand-worked numbers, a naive loop reference, and invariants."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rapidfuzz import fuzz

from recipe.forge.core_forge import (
    apply_invalid_action_penalty,
    compute_episode_advantage,
    compute_forge_advantage,
    compute_gigpo_advantage,
    compute_step_discounted_returns,
    similarity_step_groups,
)


def _token_rewards(scores, length=4, mask=None):
    """(bs, length) rewards with each sample's score on its last response token."""
    bs = len(scores)
    mask = torch.ones(bs, length) if mask is None else mask
    rewards = torch.zeros(bs, length)
    last = mask.sum(-1).long() - 1
    rewards[torch.arange(bs), last] = torch.tensor(scores, dtype=torch.float32)
    return rewards, mask


# ---------------------------------------------------------------- hand-worked example
# task a: trajectory t1 = steps (x, y), score 1; trajectory t2 = steps (x, z, y), score 0
# task b: one trajectory, one step, score 2 (singleton episode group: mean 0, std 1; singleton step group: 0)
INDEX = ["a", "a", "a", "a", "a", "b"]
TRAJ = ["t1", "t1", "t2", "t2", "t2", "t3"]
ANCHORS = ["x", "y", "x", "z", "y", "w"]
SCORES = [1.0, 1.0, 0.0, 0.0, 0.0, 2.0]
STEP_RETURNS = [0.9, 1.0, 0.0, 0.0, 0.0, 2.0]


def test_hand_worked_mean_norm():
    rewards, mask = _token_rewards(SCORES)
    adv, ret = compute_gigpo_advantage(rewards, STEP_RETURNS, mask, ANCHORS, INDEX, TRAJ)
    # episode mean of task a over its 5 step samples = 0.4 -> +0.6 / -0.4; step groups (a,x): 0.9 vs 0 -> +-0.45,
    # (a,y): 1.0 vs 0 -> +-0.5, (a,z) and (b,w) singletons -> 0
    expected = [0.6 + 0.45, 0.6 + 0.5, -0.4 - 0.45, -0.4, -0.4 - 0.5, 2.0]
    assert adv[:, -1].tolist() == pytest.approx(expected, abs=1e-6)
    assert adv is ret  # returns = advantages, as in verl's outcome estimators


def test_hand_worked_mean_std_norm():
    rewards, mask = _token_rewards(SCORES)
    adv, _ = compute_gigpo_advantage(rewards, STEP_RETURNS, mask, ANCHORS, INDEX, TRAJ, mode="mean_std_norm")
    std_a = math.sqrt((2 * 0.6**2 + 3 * 0.4**2) / 4)  # unbiased std of [1, 1, 0, 0, 0]
    std_pair = math.sqrt(0.45**2 * 2)  # unbiased std of [0.9, 0]
    std_y = math.sqrt(0.5**2 * 2)
    expected = [
        0.6 / std_a + 0.45 / std_pair,
        0.6 / std_a + 0.5 / std_y,
        -0.4 / std_a - 0.45 / std_pair,
        -0.4 / std_a,
        -0.4 / std_a - 0.5 / std_y,
        2.0,  # singleton episode group: (2 - 0) / (1 + eps)
    ]
    assert adv[:, -1].tolist() == pytest.approx(expected, abs=1e-4)


def test_episode_stats_over_trajectories_weighs_each_trajectory_once():
    scores = torch.tensor(SCORES, dtype=torch.float64)
    adv = compute_episode_advantage(scores, INDEX, TRAJ, episode_norm_over="trajectories")
    # task a: trajectory scores 1 and 0 -> mean 0.5 (instead of 0.4 over step samples)
    assert adv.tolist() == pytest.approx([0.5, 0.5, -0.5, -0.5, -0.5, 2.0])


def test_forge_uses_caller_keys_not_anchors():
    rewards, mask = _token_rewards(SCORES)
    # the clusters merge y and z of task a: (a,c1) = t1s1, t2s1, t2s2 -> returns 1, 0, 0 -> mean 1/3
    keys = [0, 1, 0, 1, 1, 7]
    adv, _ = compute_forge_advantage(rewards, STEP_RETURNS, mask, INDEX, TRAJ, keys)
    expected = [0.6 + 0.45, 0.6 + 2 / 3, -0.4 - 0.45, -0.4 - 1 / 3, -0.4 - 1 / 3, 2.0]
    assert adv[:, -1].tolist() == pytest.approx(expected, abs=1e-6)


def test_keys_are_only_compared_within_a_task_group():
    rewards, mask = _token_rewards([1.0, 0.0])
    adv, _ = compute_forge_advantage(rewards, [1.0, 0.0], mask, ["a", "b"], ["t1", "t2"], ["same", "same"])
    assert adv[:, -1].tolist() == pytest.approx([1.0, 0.0])  # both singletons: episode part only


def test_use_step_rewards_false_is_episode_only():
    rewards, mask = _token_rewards(SCORES)
    adv, _ = compute_forge_advantage(rewards, STEP_RETURNS, mask, INDEX, TRAJ, None, use_step_rewards=False)
    assert adv[:, -1].tolist() == pytest.approx([0.6, 0.6, -0.4, -0.4, -0.4, 2.0], abs=1e-6)


def test_response_mask_respected():
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.float32)
    rewards, _ = _token_rewards([1.0, 0.0, 3.0], mask=mask)
    adv, _ = compute_forge_advantage(rewards, [1.0, 0.0, 0.0], mask, ["a", "a", "b"], ["t1", "t2", "t3"], [0, 0, 0])
    assert torch.all(adv[mask == 0] == 0)
    for row in range(3):  # one scalar per sample, broadcast over its response tokens
        vals = adv[row][mask[row] == 1]
        assert torch.allclose(vals, vals[0].expand_as(vals))


def test_step_keys_required_when_step_rewards_used():
    rewards, mask = _token_rewards([1.0])
    with pytest.raises(ValueError, match="step_group_keys"):
        compute_forge_advantage(rewards, [1.0], mask, ["a"], ["t"], None)


# ---------------------------------------------------------------- discounted returns and penalty
def test_discounted_returns_hand_worked():
    # trajectory A given out of order: steps 2, 0, 1 with rewards 1, 0, 0.5; gamma 0.5
    returns = compute_step_discounted_returns([1.0, 0.0, 0.5, 4.0], ["A", "A", "A", "B"], [2, 0, 1, 0], 0.5)
    # R2 = 1, R1 = 0.5 + 0.5 * 1 = 1, R0 = 0 + 0.5 * 1 = 0.5; B single step: 4
    assert returns.tolist() == pytest.approx([1.0, 0.5, 1.0, 4.0])


def test_gamma_one_sparse_final_reward_gives_equal_returns():
    n = 7
    rewards = np.zeros(n)
    rewards[-1] = 10.0
    returns = compute_step_discounted_returns(rewards, ["t"] * n, np.arange(n), 1.0)
    assert np.all(returns == 10.0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.floats(-10, 10, allow_nan=False)), min_size=1, max_size=40),
    st.floats(0.0, 1.0),
)
def test_discounted_returns_match_naive(rows, gamma):
    traj = [f"t{r[0]}" for r in rows]
    rewards = [r[1] for r in rows]
    counters: dict[str, int] = defaultdict(int)
    steps = []
    for t in traj:  # order of appearance defines the step order
        steps.append(counters[t])
        counters[t] += 1
    got = compute_step_discounted_returns(rewards, traj, steps, gamma)
    for i in range(len(rows)):
        later = [j for j in range(len(rows)) if traj[j] == traj[i] and steps[j] >= steps[i]]
        naive = sum(gamma ** (steps[j] - steps[i]) * rewards[j] for j in later)
        assert got[i] == pytest.approx(naive, abs=1e-6)


def test_invalid_action_penalty():
    step, episode = apply_invalid_action_penalty([1.0, 1.0], [5.0, 5.0], [True, False], coef=0.1)
    assert step.tolist() == pytest.approx([1.0, 0.9])
    assert episode.tolist() == pytest.approx([5.0, 4.9])


def test_gamma_out_of_range():
    with pytest.raises(ValueError, match="gamma"):
        compute_step_discounted_returns([1.0], ["t"], [0], 1.5)


# ---------------------------------------------------------------- naive reference on random batches
def naive_advantage(scores, returns, index, traj, keys, w, mode, over, eps=1e-6):
    """Plain loops over dicts: the definition, written independently of the implementation."""
    n = len(scores)
    members = defaultdict(list)
    for i in range(n):
        members[index[i]].append(i)
    episode = [0.0] * n
    for uid, idx in members.items():
        if over == "steps":
            pool = [scores[i] for i in idx]
        else:
            per_traj = defaultdict(list)
            for i in idx:
                per_traj[traj[i]].append(scores[i])
            pool = [sum(v) / len(v) for v in per_traj.values()]
        if len(pool) > 1:
            mean, std = statistics.fmean(pool), statistics.stdev(pool)
        else:
            mean, std = 0.0, 1.0
        for i in idx:
            episode[i] = scores[i] - mean if mode == "mean_norm" else (scores[i] - mean) / (std + eps)
    step_members = defaultdict(list)
    for i in range(n):
        step_members[(index[i], keys[i])].append(i)
    step = [0.0] * n
    for idx in step_members.values():
        if len(idx) == 1:
            continue
        vals = [returns[i] for i in idx]
        mean, std = statistics.fmean(vals), statistics.stdev(vals)
        for i in idx:
            step[i] = returns[i] - mean if mode == "mean_norm" else (returns[i] - mean) / (std + eps)
    return [episode[i] + w * step[i] for i in range(n)]


batch_rows = st.lists(
    st.tuples(
        st.integers(0, 3),  # task group
        st.integers(0, 3),  # trajectory inside the group
        st.sampled_from(["room", "kitchen", "hall", "desk 1"]),  # anchor
        st.floats(-5, 5, allow_nan=False, width=32),  # episode score
        st.floats(-5, 5, allow_nan=False, width=32),  # step return
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=80, deadline=None)
@given(
    batch_rows,
    st.sampled_from(["mean_norm", "mean_std_norm"]),
    st.sampled_from(["steps", "trajectories"]),
    st.sampled_from([0.0, 0.5, 1.0]),
)
def test_matches_naive_reference(rows, mode, over, w):
    index = [f"u{r[0]}" for r in rows]
    traj = [f"u{r[0]}-t{r[1]}" for r in rows]
    anchors = [r[2] for r in rows]
    # an episode score is a property of the trajectory: take the first row's value for every step of it
    first_score = {}
    for t, r in zip(traj, rows):
        first_score.setdefault(t, r[3])
    scores = [first_score[t] for t in traj]
    returns = [r[4] for r in rows]
    rewards, mask = _token_rewards(scores)
    adv, _ = compute_gigpo_advantage(
        rewards, returns, mask, anchors, index, traj, step_advantage_w=w, mode=mode, episode_norm_over=over
    )
    expected = naive_advantage(
        [float(torch.tensor(s, dtype=torch.float32)) for s in scores], returns, index, traj, anchors, w, mode, over
    )
    assert adv[:, -1].double().numpy() == pytest.approx(np.array(expected), rel=1e-4, abs=1e-3)


@settings(max_examples=50, deadline=None)
@given(batch_rows)
def test_mean_norm_parts_sum_to_zero_per_group(rows):
    index = [f"u{r[0]}" for r in rows]
    traj = [f"u{r[0]}-t{r[1]}" for r in rows]
    anchors = [r[2] for r in rows]
    scores = torch.tensor([r[3] for r in rows], dtype=torch.float64)
    returns = [r[4] for r in rows]
    episode = compute_episode_advantage(scores, index, traj)
    rewards, mask = _token_rewards(scores.tolist())
    full, _ = compute_gigpo_advantage(rewards.double(), returns, mask.double(), anchors, index, traj)
    step = full[:, -1] - episode
    for uid in set(index):
        members = [i for i in range(len(rows)) if index[i] == uid]
        if len(members) > 1:
            assert float(episode[members].sum()) == pytest.approx(0.0, abs=1e-6)
        for key in set(anchors[i] for i in members):
            group = [i for i in members if anchors[i] == key]
            if len(group) == 1:
                assert float(step[group[0]]) == pytest.approx(0.0, abs=1e-9)
            else:
                assert float(step[group].sum()) == pytest.approx(0.0, abs=1e-6)


@settings(max_examples=30, deadline=None)
@given(batch_rows)
def test_w_zero_is_pure_episode_advantage(rows):
    index = [f"u{r[0]}" for r in rows]
    traj = [f"u{r[0]}-t{r[1]}" for r in rows]
    scores = [r[3] for r in rows]
    rewards, mask = _token_rewards(scores)
    adv, _ = compute_gigpo_advantage(rewards, [r[4] for r in rows], mask, [r[2] for r in rows], index, traj,
                                     step_advantage_w=0.0)
    episode = compute_episode_advantage(rewards.sum(-1).double(), index, traj)
    assert torch.allclose(adv[:, -1].double(), episode, atol=1e-5)


# ---------------------------------------------------------------- similarity grouping
def naive_similarity_groups(anchors, index, thresh):
    """Greedy clustering per task group: join the best representative scoring >= thresh, else found one."""
    labels, reps = [], defaultdict(list)  # uid -> [(text, label)]
    next_label = 0
    for text, uid in zip(anchors, index):
        scored = [(fuzz.ratio(text, rep) / 100.0, -k, lab) for k, (rep, lab) in enumerate(reps[uid])]
        best = max(scored) if scored else None
        if best is not None and best[0] >= thresh:
            labels.append(best[2])
        else:
            reps[uid].append((text, next_label))
            labels.append(next_label)
            next_label += 1
    return labels


def _same_partition(a, b):
    pairs = {}
    for x, y in zip(a, b):
        if pairs.setdefault(x, y) != y:
            return False
    return len(set(a)) == len(set(b))


def test_similarity_groups_hand_worked():
    anchors = [
        "You see a cabinet 1, a drawer 2.",
        "You see a cabinet 1, a drawer 3.",  # near-duplicate of the first
        "Nothing happens.",
        "You see a cabinet 1, a drawer 2.",  # same text, other task group: must not join task a's cluster
    ]
    labels = similarity_step_groups(anchors, ["a", "a", "a", "b"], 0.9)
    assert labels[0] == labels[1]
    assert labels[2] != labels[0]
    assert labels[3] not in (labels[0], labels[2])


def test_similarity_groups_compare_long_anchors_by_their_bounded_keys():
    # 8,000 shared characters, then 12,000 that differ: whole, the ratio is 2 * 8000 / 40000 = 0.4 (two groups);
    # as bounded keys (8,192 characters: the start, then length and digest) nearly all is shared: one group, as
    # the experience index clusters them
    shared = "You are in the middle of a room. " * 243
    a, b = shared[:8000] + "a" * 12000, shared[:8000] + "b" * 12000
    labels = similarity_step_groups([a, b, "Nothing happens."], ["t", "t", "t"], 0.95)
    assert labels[0] == labels[1] != labels[2]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.text(alphabet="abcde ", min_size=0, max_size=12)), min_size=1, max_size=30
    ),
    st.floats(0.3, 1.0),
)
def test_similarity_groups_match_naive(rows, thresh):
    anchors = [r[1] for r in rows]
    index = [r[0] for r in rows]
    got = similarity_step_groups(anchors, index, thresh)
    # the implementation deduplicates exact anchors first; the naive reference sees identical texts score 100
    assert _same_partition(list(got), naive_similarity_groups(anchors, index, thresh))


def test_gigpo_similarity_mode_merges_near_duplicates():
    rewards, mask = _token_rewards([1.0, 0.0])
    anchors = ["You are in the kitchen. You see a fridge 1.", "You are in the kitchen. You see a fridge 2."]
    exact, _ = compute_gigpo_advantage(rewards, [1.0, 0.0], mask, anchors, ["a", "a"], ["t1", "t2"])
    similar, _ = compute_gigpo_advantage(
        rewards, [1.0, 0.0], mask, anchors, ["a", "a"], ["t1", "t2"], enable_similarity=True, similarity_thresh=0.9
    )
    assert exact[:, -1].tolist() == pytest.approx([0.5, -0.5])  # distinct anchors: singleton step groups
    assert similar[:, -1].tolist() == pytest.approx([1.0, -1.0])  # one step group: +-0.5 more
