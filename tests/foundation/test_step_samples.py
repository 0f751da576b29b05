"""The step-sample core both engines share (recipe/forge/step_samples.py): samples from StepRecords and from verl
rows agree, token-level scores by hand, penalised step returns against a naive loop, the estimators' advantage,
and the one rule for forge steps without a cluster id (an error on every path).

The same steps read from verl rows go through the verl trainer's advantage step in
tests/verl_engine/test_step_batch.py, which holds the checks both files would share: step returns and row 0's
forge advantage by hand, forge's and gigpo's advantage against recipe/forge/core_forge.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agent_system.multi_turn_rollout.protocols import RolloutBatch, StepRecord, TrajectoryRecord
from recipe.forge.config_schema import ForgeAlgoConfig, ForgeConfig, GiGPOConfig
from recipe.forge.core_forge import compute_forge_advantage, compute_gigpo_advantage
from recipe.forge.engines.verl.row_codec import StepExtras, row_from_record, samples_from_rows
from recipe.forge.step_samples import (
    StepInputs,
    StepSamples,
    samples_advantage,
    step_advantage,
    step_inputs,
    step_returns,
    token_level_scores,
)

GAMMA, COEF = 0.5, 0.1
# (uid, traj_uid, step, reward, valid, anchor, cluster); episode returns: a 9, b 0, c 1
STEPS = [
    ("u1", "u1-a", 0, 0.0, True, "start", 7),
    ("u1", "u1-a", 1, -1.0, False, "mid", 8),
    ("u1", "u1-a", 2, 10.0, True, "end", 9),
    ("u1", "u1-b", 0, 0.0, True, "start", 7),
    ("u1", "u1-b", 1, 0.0, True, "mid", 8),
    ("u2", "u2-c", 0, 1.0, True, "start", 7),
]
RETURNS = {"u1-a": 9.0, "u1-b": 0.0, "u2-c": 1.0}
SUCCESS = {"u1-a": True, "u1-b": False, "u2-c": True}


def records(cluster: bool = True) -> list[StepRecord]:
    return [
        StepRecord(uid=u, traj_uid=t, step=s, anchor_obs=a, messages=[], plain_messages=[], response_text="",
                   action="", prompt_ids=[1, 2], response_ids=[3] * (s + 1), logprobs=[0.0] * (s + 1), reward=r,
                   is_action_valid=v, done=False, cluster_id=c if cluster else None)
        for u, t, s, r, v, a, c in STEPS
    ]


def rows() -> list[dict]:
    """The extra_fields the verl agent loop writes for the same steps (through the row codec)."""
    episodes = {t: TrajectoryRecord(uid=t.split("-")[0], traj_uid=t, task="", task_type=None, steps=[],
                                    episode_reward=RETURNS[t], success=SUCCESS[t], length=0) for t in RETURNS}
    return [row_from_record(record, episodes[record.traj_uid], StepExtras()) for record in records()]


def test_samples_from_records_and_from_verl_rows_agree():
    local = StepSamples.from_records(records(), RETURNS, SUCCESS)
    verl = samples_from_rows(rows())
    for name, value in vars(local).items():
        np.testing.assert_array_equal(value, getattr(verl, name), err_msg=name)
    assert local.episode_return.tolist() == [9.0, 9.0, 9.0, 0.0, 0.0, 1.0]
    assert len(local.take(np.array([0, 5]))) == 2 and local.take(local.success).traj_uid.tolist() == [
        "u1-a", "u1-a", "u1-a", "u2-c"]


def test_rows_without_step_fields_are_named():
    broken = rows()
    del broken[3]["traj_uid"]
    with pytest.raises(ValueError, match=r"1 batch rows \(first: 3\).*forge_agent"):
        samples_from_rows(broken)


def test_step_returns_match_a_naive_loop_on_shuffled_steps():
    rng = np.random.default_rng(0)
    steps = [(f"t{t}", s, float(rng.normal()), bool(rng.random() < 0.7)) for t in range(5) for s in range(rng.integers(1, 6))]
    order = rng.permutation(len(steps))
    shuffled = [steps[i] for i in order]
    samples = StepSamples.from_records(
        [StepRecord(uid="u", traj_uid=t, step=s, anchor_obs="", messages=[], plain_messages=[], response_text="",
                    action="", prompt_ids=[], response_ids=[], logprobs=[], reward=r, is_action_valid=v, done=False,
                    cluster_id=0) for t, s, r, v in shuffled],
        {f"t{t}": 0.0 for t in range(5)}, {f"t{t}": False for t in range(5)})
    expected = []
    for t, s, _, v in shuffled:
        later = sorted((k, r) for tt, k, r, _ in steps if tt == t and k >= s)
        expected.append(sum(GAMMA ** (k - s) * r for k, r in later) - COEF * (not v))
    np.testing.assert_allclose(step_returns(samples, GAMMA, COEF), expected, atol=1e-12)


def test_token_level_scores_sit_on_the_last_response_token():
    samples = StepSamples.from_records(records(), RETURNS, SUCCESS)
    mask = torch.zeros(6, 4, dtype=torch.int64)
    for i, n in enumerate([1, 3, 2, 0, 4, 2]):
        mask[i, :n] = 1
    scores = token_level_scores(samples, mask, COEF)
    assert scores.dtype == torch.float32
    expected = torch.zeros(6, 4)
    expected[0, 0], expected[1, 2], expected[2, 1], expected[4, 3], expected[5, 1] = 9.0, 8.9, 9.0, 0.0, 1.0
    torch.testing.assert_close(scores, expected)  # row 3 has no response token: no score


def _inputs():
    samples = StepSamples.from_records(records(), RETURNS, SUCCESS)
    mask = torch.ones(6, 3)
    scores = token_level_scores(samples, mask, COEF)
    paper = ForgeConfig(step_value="return")  # discounted returns: the figures below are worked from them
    return samples, mask, scores, ForgeAlgoConfig(gamma=GAMMA, invalid_action_penalty_coef=COEF, forge=paper)


def test_forge_advantage_is_also_its_returns():
    samples, mask, scores, algorithm = _inputs()
    adv, ret = samples_advantage("forge", scores, mask, samples, step_inputs(samples, "forge", algorithm), algorithm)
    torch.testing.assert_close(ret, adv)


def naive_forge_advantage(scores, returns, uid, cluster, w):
    """A loop over the definition (mean_norm, the episode part normalised over a task group's steps): a step's
    score less its task group's mean score (a task group of one step keeps its score), plus ``w`` x its step
    return less the mean return of its (task group, cluster) step group (0 for a group of one step)."""
    def centred(values, keys, singleton_mean_zero):
        out = []
        for i, key in enumerate(keys):
            members = [values[j] for j in range(len(keys)) if keys[j] == key]
            mean = 0.0 if len(members) == 1 and singleton_mean_zero else sum(members) / len(members)
            out.append(values[i] - mean)
        return out

    episode = centred(list(scores), list(uid), singleton_mean_zero=True)
    step = centred(list(returns), list(zip(uid, cluster)), singleton_mean_zero=False)
    return [e + w * s for e, s in zip(episode, step)]


@pytest.mark.parametrize("w", [1.0, 0.5])
def test_forge_advantage_and_returns_match_a_naive_loop(w):
    """Both tensors forge gives (its returns are its advantages, as verl's outcome estimators return them) against
    the definition, each row's value on its response tokens and 0 elsewhere."""
    samples, _, _, _ = _inputs()
    samples.cluster_id[5] = 8  # task u2's step at task u1's cluster 8: step groups are per task group
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1], [1, 1, 0], [0, 0, 0]], dtype=torch.float32)
    scores = token_level_scores(samples, mask, COEF)
    algorithm = ForgeAlgoConfig(gamma=GAMMA, invalid_action_penalty_coef=COEF,
                                forge=ForgeConfig(step_advantage_w=w, step_value="return"))
    returns = step_returns(samples, GAMMA, COEF)
    adv, ret = samples_advantage("forge", scores, mask, samples, step_inputs(samples, "forge", algorithm), algorithm)
    expected = naive_forge_advantage(scores.sum(-1).tolist(), returns.tolist(), samples.uid.tolist(),
                                     samples.cluster_id.tolist(), w)
    assert len({round(v, 6) for v in expected}) == len(expected)  # every row differs: a wrong group would show
    want = torch.tensor(expected, dtype=torch.float32)[:, None] * mask
    torch.testing.assert_close(adv, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ret, want, rtol=1e-5, atol=1e-6)


def test_paper_step_inputs_are_the_penalised_returns_grouped_by_cluster():
    samples, _, _, algorithm = _inputs()
    inputs = step_inputs(samples, "forge", algorithm)
    np.testing.assert_allclose(inputs.values, step_returns(samples, GAMMA, COEF))
    # clusters 7, 8, 9, 7, 8, 7: equal codes exactly where the clusters are equal
    codes = inputs.group_keys
    assert [codes[i] == codes[j] for i, j in ((0, 3), (0, 5), (1, 4), (0, 1), (2, 4))] == [True, True, True, False, False]


def test_gigpo_advantage_needs_no_cluster_ids_and_matches_the_core():
    samples, mask, scores, algorithm = _inputs()
    samples.cluster_id[:] = None  # gigpo never reads clusters
    adv, _ = samples_advantage("gigpo", scores, mask, samples, step_inputs(samples, "gigpo", algorithm), algorithm)
    expected, _ = compute_gigpo_advantage(scores, step_returns(samples, GAMMA, COEF), mask, samples.anchor_obs,
                                          samples.uid, samples.traj_uid)
    torch.testing.assert_close(adv, expected)


def test_a_forge_step_without_cluster_id_is_an_error_naming_the_way_out():
    samples, _, _, algorithm = _inputs()
    samples.cluster_id[2] = None
    with pytest.raises(ValueError, match=r"1 of 6 steps came without a cluster id.*adv_estimator=gigpo"):
        step_inputs(samples, "forge", algorithm)


def test_forge_without_its_step_part_needs_no_cluster_ids():
    samples, mask, scores, _ = _inputs()
    samples.cluster_id[:] = None
    returns = step_returns(samples, GAMMA, COEF)
    episode_only, _ = compute_forge_advantage(scores, returns, mask, samples.uid, samples.traj_uid, None,
                                              use_step_rewards=False)
    for settings in (ForgeConfig(use_step_rewards=False), ForgeConfig(step_advantage_w=0.0)):
        algorithm = ForgeAlgoConfig(gamma=GAMMA, invalid_action_penalty_coef=COEF, forge=settings)
        inputs = step_inputs(samples, "forge", algorithm)
        adv, _ = samples_advantage("forge", scores, mask, samples, inputs, algorithm)
        torch.testing.assert_close(adv, episode_only)


def test_other_estimators_are_not_step_level():
    samples, mask, scores, algorithm = _inputs()
    with pytest.raises(ValueError, match="'grpo' is not a step-level estimator"):
        step_inputs(samples, "grpo", algorithm)
    with pytest.raises(ValueError, match="'grpo' is not a step-level estimator"):
        samples_advantage("grpo", scores, mask, samples, StepInputs(np.zeros(6), np.zeros(6, dtype=np.int64)),
                          algorithm)


def test_the_local_engine_and_the_registry_apply_the_same_cluster_rule():
    from recipe.forge.engines.local.advantages import compute_advantages
    from recipe.forge.engines.local.batch import build_step_batch
    from recipe.forge.estimator_registry import forge_adv_estimator

    steps = records(cluster=False)
    trajectories = [TrajectoryRecord(uid=t.split("-")[0], traj_uid=t, task="", task_type=None,
                                     steps=[s for s in steps if s.traj_uid == t], episode_reward=RETURNS[t],
                                     success=SUCCESS[t], length=0) for t in RETURNS]
    batch = build_step_batch(RolloutBatch(steps=steps, trajectories=trajectories), 0, COEF)
    algorithm = ForgeAlgoConfig(adv_estimator="forge", gamma=GAMMA, invalid_action_penalty_coef=COEF)
    with pytest.raises(ValueError, match="6 of 6 steps came without a cluster id"):
        compute_advantages(batch, algorithm)
    with pytest.raises(ValueError, match="6 of 6 steps came without a cluster id"):
        forge_adv_estimator(batch.token_level_rewards, batch.response_mask, index=batch.uid, config=algorithm,
                            step_samples=batch.samples)


# An invalid answer keeps the state (reward -1 a step, as NumberLine answers it); "+" at s1 wins (+1, the end).
# (traj, turn, state, action, reward, valid, next observation: None = the environment ended the episode)
LOOP = [
    ("a", 0, "s0", "?", -1.0, False, "s0"),
    ("a", 1, "s0", "+", 0.0, True, "s1"),
    ("a", 2, "s1", "+", 1.0, True, None),
    ("b", 0, "s0", "-", -1.0, True, "s2"),
    ("b", 1, "s2", "?", -1.0, False, "s2"),  # the step limit cut the episode here: s2 is kept
]


def loop_samples(steps=LOOP) -> StepSamples:
    recs = [StepRecord(uid="u", traj_uid=t, step=k, anchor_obs=o, messages=[], plain_messages=[], response_text="",
                       action=a, prompt_ids=[1], response_ids=[2], logprobs=[0.0], reward=r, is_action_valid=v,
                       done=False, cluster_id={"s0": 0, "s1": 1, "s2": 2}[o], next_anchor_obs=n)
            for t, k, o, a, r, v, n in steps]
    episode = {t: sum(r for tt, _, _, _, r, _, _ in steps if tt == t) for t in {st[0] for st in steps}}
    return StepSamples.from_records(recs, episode, {t: False for t in episode})


def test_next_state_values_by_hand():
    """gamma 0.5, 3 sweeps (the longest episode), mean values from V = 0:
    sweep 1: Q = (-1, 0, 1, -1, -1); V(s0) = -2/3, V(s1) = 1, V(s2) = -1
    sweep 2: Q = (-4/3, 1/2, 1, -3/2, -3/2); V(s0) = -7/9, V(s2) = -3/2
    sweep 3: Q = (-25/18, 1/2, 1, -7/4, -7/4); V(s0) = (-25/18 + 1/2 - 7/4) / 3 = -95/108, V(s2) = -7/4
    values: Q with the last V, minus the penalty 0.1 of the invalid steps."""
    algorithm = ForgeAlgoConfig(gamma=0.5, invalid_action_penalty_coef=0.1,
                                forge=ForgeConfig(step_value="next_state"))
    values = step_inputs(loop_samples(), "forge", algorithm).values
    expected = [-1 + 0.5 * (-95 / 108) - 0.1, 0.5, 1.0, -1 + 0.5 * (-7 / 4), -1 + 0.5 * (-7 / 4) - 0.1]
    np.testing.assert_allclose(values, expected, atol=1e-12)
    best = ForgeAlgoConfig(gamma=0.5, invalid_action_penalty_coef=0.1, forge=ForgeConfig(step_value="best_next_state"))
    # best values: V(s1) = 1, V(s0) = max(-1 + V(s0)/2, 0 + V(s1)/2, -1 + V(s2)/2) = 1/2, V(s2) = -2 (its loop)
    np.testing.assert_allclose(step_inputs(loop_samples(), "forge", best).values,
                               [-1 + 0.25 - 0.1, 0.5, 1.0, -1 + 0.5 * -1.75, -1.875 - 0.1], atol=1e-12)


def test_a_revisited_state_is_not_worth_more_for_being_later():
    """The same invalid answer at s0 on turns 0, 1 and 2 of one episode: the paper's discounted returns rise with
    the turn (fewer steps left to lose), the next-state values are equal."""
    steps = [("a", k, "s0", "?", -1.0, False, "s0") for k in range(3)] + [("b", 0, "s0", "+", 1.0, True, None)]
    samples = loop_samples(steps)
    paper = step_inputs(samples, "forge", ForgeAlgoConfig(gamma=0.9, forge=ForgeConfig(step_value="return"))).values
    assert paper[0] < paper[1] < paper[2]
    fixed = step_inputs(samples, "forge", ForgeAlgoConfig(gamma=0.9, forge=ForgeConfig(step_value="next_state"))).values
    assert fixed[0] == fixed[1] == fixed[2] < fixed[3]


# One observation, "hall", in two states: empty-handed (E) and holding the key (K). At E, "take" picks the key up and
# "open" leaves the state as it was (the door is locked); at K, "open" wins. (traj, turn, hidden, action, reward, next)
HALL = [
    ("a", 0, "E", "take", 0.0, "K"), ("a", 1, "K", "open", 1.0, None),
    ("b", 0, "E", "open", 0.0, "E"), ("b", 1, "E", "take", 0.0, "K"), ("b", 2, "K", "open", 1.0, None),
]


def hall_samples() -> StepSamples:
    recs = [StepRecord(uid="u", traj_uid=t, step=k, anchor_obs="hall", messages=[], plain_messages=[],
                       response_text="", action=a, prompt_ids=[1], response_ids=[2], logprobs=[0.0], reward=r,
                       is_action_valid=True, done=False, cluster_id=0, next_anchor_obs=None if n is None else "hall",
                       hidden_state=h, next_hidden_state=n or "")
            for t, k, h, a, r, n in HALL]
    return StepSamples.from_records(recs, {"a": 1.0, "b": 1.0}, {"a": True, "b": True})


@pytest.mark.parametrize("estimator", ["forge", "gigpo"])
def test_the_environments_hidden_state_tells_apart_the_states_one_observation_shows(estimator):
    """gamma 0.5, next_state values over 3 sweeps from V = 0. step_state=environment: states E and K;
    sweep 1: V(E) = 0, V(K) = 1; sweep 2: Q(take) = 1/2, Q(open at E) = 0, V(E) = 1/3; sweep 3: Q(open at E) = 1/6,
    V(E) = (1/2 + 1/6 + 1/2) / 3 = 7/18; so take 1/2, open at E 7/36, open at K 1. With step_state=observation
    both are one state: take and the locked door's open both lead back to "hall" and tie."""
    section = (ForgeConfig if estimator == "forge" else GiGPOConfig)
    def inputs(step_state):
        algorithm = ForgeAlgoConfig(gamma=0.5, **{estimator: section(step_value="next_state", step_state=step_state)})
        return step_inputs(hall_samples(), estimator, algorithm)

    hidden = inputs("environment")
    np.testing.assert_allclose(hidden.values, [0.5, 1.0, 7 / 36, 0.5, 1.0], atol=1e-12)
    codes = hidden.group_keys
    assert codes[0] == codes[2] == codes[3] != codes[1] == codes[4]
    seen = inputs("observation")
    assert seen.values[0] == seen.values[2] == seen.values[3] and len(set(seen.group_keys)) == 1


def test_a_step_state_other_than_observation_or_environment_is_a_config_error():
    from agent_system.config_checks import ConfigError

    for section in (ForgeConfig, GiGPOConfig):
        with pytest.raises(ConfigError, match="step_state.*'history'.*observation.*environment"):
            section(step_state="history")


def test_first_visit_groups_leave_a_trajectorys_returns_to_a_state_out():
    samples = loop_samples()
    algorithm = ForgeAlgoConfig(gamma=0.5, forge=ForgeConfig(step_groups="first_visit"))
    codes = step_inputs(samples, "forge", algorithm).group_keys
    # a's second step at s0 is a group of its own; a's and b's first steps at s0 share one
    assert codes[0] == codes[3] and len({codes[1], codes[0], codes[2], codes[4]}) == 4
    mask = torch.ones(5, 1)
    scores = torch.zeros(5, 1)
    adv, _ = samples_advantage("forge", scores, mask, samples, step_inputs(samples, "forge", algorithm), algorithm)
    assert adv[1, 0].item() == 0.0  # a later visit gets no step part


def test_the_registry_applies_every_step_rule_as_the_engines_do():
    from recipe.forge.estimator_registry import SAMPLE_COLUMNS, forge_adv_estimator, gigpo_adv_estimator

    samples = loop_samples()
    mask, scores = torch.ones(5, 2), torch.zeros(5, 2)
    scores[:, -1] = torch.tensor([-2.0, -2.0, -2.0, -2.0, -2.0])
    for estimator, entry in (("forge", forge_adv_estimator), ("gigpo", gigpo_adv_estimator)):
        groups = "cluster_and_turn" if estimator == "forge" else "anchor_and_turn"
        section = {"step_value": "next_state", "step_groups": groups}
        algorithm = ForgeAlgoConfig(gamma=0.5, **{estimator: (ForgeConfig if estimator == "forge" else GiGPOConfig)(**section)})
        expected, _ = samples_advantage(estimator, scores, mask, samples, step_inputs(samples, estimator, algorithm),
                                        algorithm)
        by_keyword, _ = entry(scores, mask, index=samples.uid, config=algorithm, step_samples=samples)
        columns = {name: getattr(samples, name) for name in SAMPLE_COLUMNS}
        by_columns, _ = entry(scores, mask, index=samples.uid, config=algorithm, non_tensor_batch=columns)
        torch.testing.assert_close(by_keyword, expected)
        torch.testing.assert_close(by_columns, expected)


def test_time_aware_forge_groups_compare_a_state_only_at_one_turn():
    """Two copies answer invalidly at one state for two turns (reward -1 a step, gamma 0.5, no penalty):
    returns turn 0: -1.5, turn 1: -1. By cluster (the paper) the later visits win +0.25 whatever was answered; by
    cluster and turn every group is tied and the step part is 0. Episode part: both episodes score -2, so 0."""
    steps = [(t, k, "s0", "?", -1.0, False, "s0") for t in "ab" for k in range(2)]
    samples = loop_samples(steps)
    mask = torch.ones(4, 2)
    scores = torch.zeros(4, 2)
    scores[:, -1] = -2.0

    def advantage(step_groups: str) -> list[float]:
        algorithm = ForgeAlgoConfig(gamma=0.5, invalid_action_penalty_coef=0.0,
                                    forge=ForgeConfig(step_groups=step_groups, step_value="return"))
        adv, _ = samples_advantage("forge", scores, mask, samples, step_inputs(samples, "forge", algorithm), algorithm)
        return adv[:, 0].tolist()

    assert advantage("cluster") == pytest.approx([-0.25, 0.25, -0.25, 0.25])
    assert advantage("cluster_and_turn") == [0.0] * 4


def test_an_empty_generation_counts_in_its_episodes_step_values_on_the_local_engine():
    """The verl engine's case (tests/verl_engine/test_cpu_backend.py): trajectory a has steps 0 and 1, step 1
    generated nothing and earned 4; b one step with reward 0; gamma 0.5, one cluster. Trained rows a0 and b0:
    episode scores 4 and 0 (mean 2); step returns 0 + 0.5 * 4 = 2 and 0 (mean 1): advantages +3 and -3. Before, the
    local engine dropped the empty step before discounting, and a0's step return was 0."""
    from recipe.forge.engines.local.advantages import compute_advantages
    from recipe.forge.engines.local.batch import build_step_batch

    def step(traj: str, k: int, reward: float, response: list[int]) -> StepRecord:
        return StepRecord(uid="u", traj_uid=traj, step=k, anchor_obs="s", messages=[], plain_messages=[],
                          response_text="", action="", prompt_ids=[1], response_ids=response,
                          logprobs=[0.0] * len(response), reward=reward, is_action_valid=True, done=False, cluster_id=1)

    steps = [step("a", 0, 0.0, [3, 4]), step("a", 1, 4.0, []), step("b", 0, 0.0, [3])]
    trajectories = [TrajectoryRecord(uid="u", traj_uid=t, task="", task_type=None, steps=[s for s in steps if s.traj_uid == t],
                                     episode_reward=r, success=False, length=0) for t, r in (("a", 4.0), ("b", 0.0))]
    batch = build_step_batch(RolloutBatch(steps=steps, trajectories=trajectories), 0, 0.1)
    assert len(batch) == 2
    paper = ForgeConfig(step_value="return")
    advantages, _ = compute_advantages(batch, ForgeAlgoConfig(adv_estimator="forge", gamma=0.5, forge=paper))
    assert advantages[:, 0].tolist() == pytest.approx([3.0, -3.0])
