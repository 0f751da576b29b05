"""Evolution: outcome partition, selection, extractors (rule and LLM), rate limits, admission, metrics."""

import json

import httpx
import pytest

from recipe.forge.experience import ExperienceSystem
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from recipe.forge.experience.evolution import dedupe, partition, positive_ratio, rate_limit, select, success_mask
from recipe.forge.experience.extract_llm import LLMExtractor, OpenAICompatibleLLM, parse_llm_output
from recipe.forge.experience.extract_rule import RuleExtractor
from recipe.forge.experience.library import GOLDEN, LEVELS, WARNING, Candidate
from recipe.forge.experience.lesson_quality import verdict

OBS = ["-= Welcome =- You are in the middle of a room.", "You arrive at countertop 1. You see a mug 1.",
       "You pick up the mug 1 from the countertop 1.", "You arrive at coffeemachine 1."]


def test_partition_threshold_median_and_faults(traj):
    ts = [traj("u", f"t{i}", "task", [("o", "a")], r) for i, r in enumerate([0.0, 2.0, 5.0, 10.0])]
    ts.append(traj("u", "crashed", "task", [("o", "a")], 10.0, failure_reason="worker crashed"))
    ok, bad, eta = partition(ts, 0.5)
    assert [t.traj_uid for t in ok] == ["t1", "t2", "t3"] and [t.traj_uid for t in bad] == ["t0"] and eta == 0.5
    ok, bad, eta = partition(ts, None)  # median of 0, 2, 5, 10 = 3.5
    assert eta == 3.5 and [t.traj_uid for t in ok] == ["t2", "t3"]
    assert partition([], None) == ([], [], 0.0)


@pytest.mark.parametrize("returns, successes", [
    ([10, 10, 10, 0], [True, True, True, False]),   # median 10: the paper's "> median" found no success at all
    ([10, 0, 0, 0], [True, False, False, False]),   # median 0
    ([10, 10, 0, 0], [True, True, False, False]),   # median 5
    ([0, 5, 5, 5, 10], [False, True, True, True, True]),  # the ties at the median are above the lowest return
    ([1.0, 2.0, 3.0], [False, True, True]),
])
def test_median_threshold_makes_the_winners_of_a_binary_batch_successes(traj, returns, successes):
    mask, eta = success_mask(np.array(returns, dtype=float), None)
    assert mask.tolist() == successes and eta == float(np.median(returns))
    ts = [traj("u", f"t{i}", "task", [("o", "a")], float(r)) for i, r in enumerate(returns)]
    ok, bad, _ = partition(ts, None)
    assert [t.traj_uid for t in ok] == [f"t{i}" for i, s in enumerate(successes) if s]
    assert len(ok) + len(bad) == len(returns)


def test_equal_returns_tell_nothing_and_the_won_flag_decides():
    for value in (10.0, 0.0):
        mask, eta = success_mask(np.full(4, value), None, won=np.array([value > 0] * 4))
        assert mask.tolist() == [value > 0] * 4 and eta == value
    assert success_mask(np.full(3, 7.0), None)[0].tolist() == [False] * 3  # no won flags: no success
    assert success_mask(np.zeros(0), None)[0].tolist() == []
    # a fixed threshold ignores the flags and ties: success iff return > threshold
    assert success_mask(np.array([0.5, 0.6, 10.0]), 0.5, won=np.array([True, False, False]))[0].tolist() == [
        False, True, True]


def naive_success(returns, won):
    """The rule in words: above the median wins; at the median wins when something lies below; all equal: the
    won flag."""
    ordered = sorted(returns)
    n = len(ordered)
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    if min(returns) == max(returns):
        return list(won)
    return [r > median or (r == median and any(x < median for x in returns)) for r in returns]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.0, 5.0, 10.0]), min_size=1, max_size=12), st.data())
def test_median_rule_matches_a_naive_reference_and_keeps_every_winner(returns, data):
    won = data.draw(st.lists(st.booleans(), min_size=len(returns), max_size=len(returns)))
    mask, _ = success_mask(np.array(returns), None, won=np.array(won))
    assert mask.tolist() == naive_success(returns, won)
    if min(returns) < max(returns):  # a batch with contrast: its best return is always golden material
        assert all(m for m, r in zip(mask, returns) if r == max(returns))
        assert not any(m for m, r in zip(mask, returns) if r == min(returns))


def test_positive_ratio_is_the_share_of_successes_over_all_trajectories(traj):
    ts = [traj("u", f"t{i}", "task", [("o", "a")], r) for i, r in enumerate([10.0, 10.0, 10.0, 0.0])]
    ts.append(traj("u", "crashed", "task", [("o", "a")], 10.0, failure_reason="worker crashed"))
    assert positive_ratio(ts, None) == pytest.approx(3 / 5)  # a faulted episode is never a success
    assert positive_ratio(ts, 0.5) == pytest.approx(3 / 5)
    assert positive_ratio(ts, 10.0) == 0.0 and positive_ratio([], None) == 0.0


def test_select_top_successes_and_bottom_failures(traj):
    succ = [traj("u", f"s{i}", "t", [("o", "a")] * n, r) for i, (r, n) in enumerate([(5, 3), (10, 4), (10, 2)])]
    fail = [traj("u", f"f{i}", "t", [("o", "a")] * n, r) for i, (r, n) in enumerate([(0, 3), (0.2, 1), (0, 5)])]
    best, worst = select(succ, fail, 2)
    assert [t.traj_uid for t in best] == ["s2", "s1"]  # highest return, then shorter
    assert [t.traj_uid for t in worst] == ["f2", "f0"]  # lowest return, then longer


def test_rule_extractor_every_level_of_both_zones(traj):
    win = traj("u", "w", "put a hot mug in coffeemachine.", list(zip(OBS, [
        "go to countertop 1", "take mug 1 from countertop 1", "go to coffeemachine 1", "put mug 1 in/on coffeemachine 1"
    ])), 10.0, clusters=[0, 1, 2, 3])
    loss = traj("u", "l", "put a hot mug in coffeemachine.", [(OBS[0], "look"), (OBS[0], "look"), (OBS[0], "zzz"),
                                                              (OBS[1], "look")], 0.0, clusters=[0, 0, 0, 1],
                valid=[True, True, False, True])
    out = RuleExtractor().extract([win], [loss], 0.5)
    got = {(c.zone, c.level): c for c in out}
    assert set(got) == {(z, l) for z in LEVELS for l in LEVELS[z]}
    assert got[(GOLDEN, "principle")].text == ("For pick_and_place tasks, a plan of this shape succeeded: "
                                               "go -> take -> go -> put.")
    assert "go to countertop 1; take mug 1 from countertop 1;" in got[(GOLDEN, "method")].text
    example = got[(GOLDEN, "example")]
    assert example.key == OBS[3] and example.cluster_ids == [3] and "put mug 1 in/on coffeemachine 1" in example.text
    assert all(c.score == 10.0 for c in out if c.zone == GOLDEN)
    assert got[(WARNING, "mistake")].text.startswith("1 of 4 actions were invalid")
    # "look" left the welcome room as it was twice (the third "look" moved on): a loop of 2 at one state
    assert got[(WARNING, "pattern")].text.startswith('Repeating "look" (2 times in 4 steps) made no progress')
    assert got[(WARNING, "diagnostic")].key == OBS[1] and got[(WARNING, "diagnostic")].cluster_ids == [1]
    assert all(c.score == 0.5 for c in out if c.zone == WARNING)  # threshold - return


def test_rule_extractor_imperative_style_names_the_action_for_the_state(traj):
    win = traj("u", "w", "reach the target.", [("Target: 2\nCurrent: 3", "-")], 1.0, clusters=[5])
    loss = traj("u", "l", "reach the target.", [("Target: 2\nCurrent: 1", "-"), ("Target: 2\nCurrent: 0", "-"),
                                                ("Target: 2\nCurrent: 0", "-"), ("Target: 2\nCurrent: 0", "zz")], -4.0,
                valid=[True, True, True, False], end="Target: 2\nCurrent: 0")
    imperative = {(c.zone, c.level): c for c in RuleExtractor("imperative").extract([win], [loss], 0.5)}
    descriptive = {(c.zone, c.level): c for c in RuleExtractor("descriptive").extract([win], [loss], 0.5)}
    assert imperative[(GOLDEN, "example")].text == 'At "Target: 2 Current: 3", answer with <action>-</action>.'
    assert descriptive[(GOLDEN, "example")].text == 'At "Target: 2 Current: 3", the action "-" moved the task forward.'
    assert imperative[(GOLDEN, "principle")].text == "For pick_and_place tasks, follow a plan of this shape: -."
    assert imperative[(GOLDEN, "method")].text.endswith("(solved in 1 step).")  # one step, in the singular
    assert descriptive[(WARNING, "diagnostic")].text.startswith('Failed "reach the target." after 4 steps')
    assert imperative[(WARNING, "diagnostic")].text.startswith(
        'At "Target: 2 Current: 0", do not answer with the action "zz": it ended a failed attempt')
    assert imperative[(WARNING, "pattern")].text == ('Do not repeat "-": it made no progress; after one try, choose a '
                                                     'different action.')
    assert imperative[(WARNING, "mistake")].text == "Answer with exactly one admissible action in the required format."
    # the wording changes, nothing else: same levels, scores, keys and clusters
    for key, cand in descriptive.items():
        other = imperative[key]
        assert (other.score, other.key, other.cluster_ids, other.task) == (cand.score, cand.key, cand.cluster_ids,
                                                                           cand.task)
        assert other.text != cand.text
    # an answer the response does not hold in a tagged block is quoted
    untagged = traj("u", "w", "reach the target.", [("Target: 2\nCurrent: 3", "-")], 1.0)
    untagged.steps[0].response_text = "-"
    example = next(c for c in RuleExtractor("imperative").golden(untagged) if c.level == "example")
    assert example.text == 'At "Target: 2 Current: 3", answer with the action "-".'
    with pytest.raises(ValueError, match="lesson_style='loud' is not one of"):
        RuleExtractor("loud")


def test_imperative_warnings_name_the_actions_left_untried_at_their_state(traj):
    # NumberLine from 1 towards 0, answering "+" every time: the walk ends stuck at 3 (positions 0..3)
    states = ["Target: 0\nCurrent: 1", "Target: 0\nCurrent: 2", "Target: 0\nCurrent: 3", "Target: 0\nCurrent: 3"]
    loss = traj("u", "l", "reach the target.", [(s, "+") for s in states], -4.0, admissible=("+", "-"),
                end=states[3])
    got = {c.level: c for c in RuleExtractor("imperative").warning(loss, 0.5)}
    assert got["diagnostic"].text == ('At "Target: 0 Current: 3", answer with <action>-</action> instead of "+", '
                                      'which ended a failed attempt (4 steps, return -4).')
    assert got["diagnostic"].key == states[3]
    # the loop is where "+" left the state as it was (at the stop, twice), not the first "+" of the walk
    assert got["pattern"].text == ('At "Target: 0 Current: 3", answer with <action>-</action>: repeating another answer '
                                   'here made no progress.')
    assert got["pattern"].key == states[2]
    assert "<action>+</action>" not in got["diagnostic"].text + got["pattern"].text  # the failed action is not primed
    descriptive = {c.level: c.text for c in RuleExtractor("descriptive").warning(loss, 0.5)}
    assert '"-"' not in descriptive["diagnostic"] + descriptive["pattern"]  # the descriptive wording states facts only


def test_a_repeated_action_that_moved_on_is_no_loop_and_a_step_limit_blames_no_last_action(traj):
    """Turning a dial towards its target repeats one action at every state; a failed episode that ran out of steps
    while doing so holds no loop and no dead end (the rule extractor once told "+" was a loop to break at the
    walk's first state, and the last "+" a dead end: against the expert at both)."""
    walk = ["Target: 4\nCurrent: 0", "Target: 4\nCurrent: 1", "Target: 4\nCurrent: 2"]
    ran_out = traj("u", "l", "reach the target.", [(s, "+") for s in walk], 0.0, admissible=("+", "-"),
                   experts=["+"] * 3, end="Target: 4\nCurrent: 3")  # every turn closer: 0 each
    assert RuleExtractor("imperative").warning(ran_out, 0.5) == []  # no loop, no dead end, no invalid answer
    descriptive = {c.level: c for c in RuleExtractor("descriptive").warning(ran_out, 0.5)}
    assert descriptive["mistake"].text == "For pick_and_place tasks, this plan shape failed: +."  # a fact, no order
    assert descriptive["pattern"].text == 'Spending 3 of 3 steps on "+" actions did not reach the goal.'
    assert descriptive["diagnostic"].text.startswith('"reach the target." ended below the batch\'s threshold after 3 '
                                                     'steps (return 0), at "Target: 4 Current: 2" after the action "+"')
    assert descriptive["diagnostic"].advice is None
    # a won episode below the batch's threshold ended at its winning action: no dead end either
    won = traj("u", "w", "reach the target.", [(walk[2], "+"), ("Target: 4\nCurrent: 3", "+")], 1.0,
               admissible=("+", "-"), experts=["+", "+"])
    assert RuleExtractor("imperative").warning(won, 2.0) == []
    # the environment ending a lost episode blames its last action
    lost = traj("u", "x", "reach the target.", [(walk[2], "-")], -1.0, admissible=("+", "-"), experts=["+"])
    diagnostic = {c.level: c for c in RuleExtractor("imperative").warning(lost, 0.5)}["diagnostic"]
    assert diagnostic.advice.avoid == ("-",) and verdict(diagnostic.advice) == "right"


def test_a_last_move_the_environment_scored_lowest_is_a_dead_end_and_a_constant_step_cost_blames_nothing(traj):
    """NumberLine towards 0 from 1: "+" twice (-1 each, away from the target), a lesson's "-" at the stop (0, closer),
    then "+" again (-1) as the steps run out. The last "+" moved on, but the environment scored it lowest of the
    episode while "-" scored higher: it is blamed, and the dead end names the expert's "-" (the walk back a
    followed lesson starts; the rule without the score clause gave no diagnostic here)."""
    c = ["Target: 0\nCurrent: 1", "Target: 0\nCurrent: 2", "Target: 0\nCurrent: 3"]
    back = traj("u", "b", "reach the target.", [(c[0], "+"), (c[1], "+"), (c[2], "-"), (c[1], "+")], -3.0,
                admissible=("+", "-"), experts=["-"] * 4, end=c[2])
    for step, reward in zip(back.steps, (-1.0, -1.0, 0.0, -1.0)):
        step.reward = reward
    diagnostic = {c.level: c for c in RuleExtractor("imperative").warning(back, 0.5)}["diagnostic"]
    assert diagnostic.key == c[1] and diagnostic.advice.avoid == ("+",) and verdict(diagnostic.advice) == "right"
    # a step cost the same at every step (Sokoban's -0.1) scores no move below another
    costly = traj("u", "s", "push the box.", [("room A", "left"), ("room B", "up"), ("room C", "up")], -0.3,
                  admissible=("left", "up", "down"), end="room D")
    for step in costly.steps:
        step.reward = -0.1
    assert "diagnostic" not in {c.level for c in RuleExtractor("imperative").warning(costly, 0.5)}


def test_imperative_warnings_without_untried_actions_keep_their_plain_wording(traj):
    tried = traj("u", "l", "reach the target.", [("Target: 0\nCurrent: 3", "+"), ("Target: 0\nCurrent: 3", "-"),
                                                 ("Target: 0\nCurrent: 3", "+")], -3.0, admissible=("+", "-"),
                 end="Target: 0\nCurrent: 3")
    unlisted = traj("u", "l", "reach the target.", [("Target: 0\nCurrent: 3", "+")] * 2, -2.0,
                    end="Target: 0\nCurrent: 3")
    many = traj("u", "l", "reach the target.", [("hall", "go north")] * 2, -2.0,
                admissible=("go north", "go south", "go east", "go west", "look"), end="hall")
    for loss in (tried, unlisted, many):
        got = {c.level: c.text for c in RuleExtractor("imperative").warning(loss, 0.5)}
        assert got["diagnostic"].startswith(f'At "{" ".join(loss.steps[-1].anchor_obs.split())}", do not answer with '
                                            f'the action "{loss.steps[-1].action}"')
        assert got["pattern"].endswith("after one try, choose a different action.")
    few_left = traj("u", "l", "leave.", [("hall", "go north")] * 2, -2.0,
                    admissible=("go north", "go south", "look"), end="hall")
    got = {c.level: c.text for c in RuleExtractor("imperative").warning(few_left, 0.5)}
    assert got["diagnostic"].startswith('At "hall", answer with one of <action>go south</action>, <action>look</action> '
                                        'instead of "go north"')


def test_imperative_invalid_habit_names_the_admissible_actions_and_quotes_no_invalid_answer(traj):
    garbage = "<action> #AskForSetOperation (+"
    loss = traj("u", "l", "reach the target.", [("Target: 1\nCurrent: 0", "")] * 2, -2.0, valid=[False, False],
                admissible=("+", "-"))
    for step in loss.steps:
        step.response_text = garbage
    got = {c.level: c.text for c in RuleExtractor("imperative").warning(loss, 0.5)}
    assert got["mistake"] == 'Answer with exactly one admissible action ("+" or "-") in the required format.'
    fewer = traj("u", "l2", "reach the target.", [("Target: 1\nCurrent: 0", "")] * 3, -3.0, valid=[False, True, True],
                 admissible=("+", "-"))
    again = {c.level: c.text for c in RuleExtractor("imperative").warning(fewer, 0.5)}
    assert again["mistake"] == got["mistake"]  # one habit, one text: its support grows instead of a text per count
    assert "pattern" not in got  # no valid action, no pattern of actions: the mistake is the habit already
    assert got["diagnostic"] == ('At "Target: 1 Current: 0", answer with one of "+", "-" instead of an invalid answer, '
                                 'which ended a failed attempt (2 steps, return -2).')
    assert all(garbage not in text for text in got.values())
    descriptive = {c.level: c.text for c in RuleExtractor("descriptive").warning(loss, 0.5)}
    assert garbage in descriptive["mistake"]  # the descriptive wording keeps its example


def test_imperative_invalid_habit_shows_the_admissible_actions_in_the_answer_format_the_episode_used(traj):
    loss = traj("u", "l", "reach the target.", [("Target: 1\nCurrent: 0", "+"), ("Target: 1\nCurrent: 1", ""),
                                                ("Target: 1\nCurrent: 1", "")], -3.0, valid=[True, False, False],
                admissible=("+", "-"))
    loss.steps[0].response_text = "<action>+</action>"
    loss.steps[1].response_text = loss.steps[2].response_text = "<action> Response Response"
    got = {c.level: c for c in RuleExtractor("imperative").warning(loss, 0.5)}
    assert got["mistake"].text == "Answer with one of <action>+</action>, <action>-</action>."
    assert got["mistake"].key == "Target: 1\nCurrent: 1"  # keyed at the first invalid step
    assert "Response" not in " ".join(c.text for c in got.values())


def test_imperative_pattern_reads_valid_actions_only_and_carries_no_counts(traj):
    # a 135M policy's failed episodes: invalid answers whose parsed action is garbage, among valid "+" steps
    def loss(uid: str, actions: list[str], valid: list[bool]):
        return traj("u", uid, "reach the target.", [(f"Target: 0\nCurrent: {i + 1}", a) for i, a in enumerate(actions)],
                    -float(len(actions)), valid=valid, admissible=("+", "-"))

    short = loss("a", ["(+", "(+", "+"], [False, False, True])
    long = loss("b", ["(+", "+", "(+", "(+", "-"], [False, True, False, False, True])
    texts = [{c.level: c.text for c in RuleExtractor("imperative").warning(t, 0.5)} for t in (short, long)]
    assert "pattern" not in texts[0]  # "+" moved on each time it was answered: no loop
    assert all("(+" not in text for got in texts for text in got.values())  # no invalid answer quoted
    stuck = "Target: 0\nCurrent: 3"  # "+" against the stop leaves the state as it was
    looped = traj("u", "c", "reach the target.", [(stuck, a) for a in ["+", "(+", "+", "+"]], -4.0,
                  valid=[True, False, True, True], admissible=("+", "-"), end=stuck)
    twice = traj("u", "d", "reach the target.", [(stuck, "+")] * 2, -2.0, admissible=("+", "-"), end=stuck)
    loops = [{c.level: c.text for c in RuleExtractor("imperative").warning(t, 0.5)}["pattern"] for t in (looped, twice)]
    # no counts, and the repeated "+" is not quoted: the lesson leads with the state and the action to take
    assert loops[0] == loops[1] == ('At "Target: 0 Current: 3", answer with <action>-</action>: repeating another '
                                    'answer here made no progress.')
    invalid_loop = traj("u", "e", "reach the target.", [(stuck, "(+")] * 2 + [(stuck, "+")], -3.0,
                        valid=[False, False, True], admissible=("+", "-"), end="Target: 0\nCurrent: 2")
    descriptive = {c.level: c.text for c in RuleExtractor("descriptive").warning(invalid_loop, 0.5)}
    assert descriptive["pattern"].startswith('Repeating "(+" (2 times in 3 steps)')  # the descriptive facts stay


def test_dedupe_and_rate_limit_spread_over_levels():
    c = lambda text, level, score: Candidate(text=text, zone=GOLDEN, level=level, score=score, cluster_ids=[1])
    merged = dedupe([c("a", "method", 1.0), c("a", "method", 3.0), c("b", "method", 2.0)])
    assert [(m.text, m.score, m.support) for m in merged] == [("a", 3.0, 2), ("b", 2.0, 1)]
    pool = [c(f"p{i}", "principle", 5.0) for i in range(3)] + [c(f"m{i}", "method", 5.0) for i in range(3)] + \
           [c("e0", "example", 5.0), c("low", "example", 1.0)]
    chosen = [x.text for x in rate_limit(pool, GOLDEN, 4)]
    assert chosen == ["p0", "m0", "e0", "p1"]
    assert rate_limit(pool, WARNING, 4) == []


def test_evolve_respects_rate_limits_and_reports_metrics(cfg, traj):
    system = ExperienceSystem.from_config(cfg(max_strategies_per_iter=2, max_warnings_per_iter=1,
                                              top_k_trajectories=1))
    ts = [traj("u", f"w{i}", f"task {i}", [(OBS[i], f"act {i}")], 10.0 - i, clusters=[i]) for i in range(3)]
    ts += [traj("u", f"l{i}", f"task {i}", [(OBS[i], "look")] * 2, 0.0, clusters=[i, i]) for i in range(2)]
    metrics = system.evolve(ts, 0)
    assert metrics["forge/strategies_added"] == 2 and metrics["forge/warnings_added"] == 1
    assert system.library.size(GOLDEN) == 2 and system.library.size(WARNING) == 1
    assert {e.task for e in system.library.all_entries()} <= {"task 0"}  # K_traj=1: best success / worst failure
    for key in ("forge/library_golden_size", "forge/library_warning_size", "forge/library_total_size",
                "forge/retrieval_hit_rate", "forge/experiences_per_step", "forge/cluster_count",
                "forge/step_group_singleton_share", "forge/step_group_mean_size"):
        assert key in metrics
    assert metrics["forge/library_total_size"] == 3.0
    # step groups (uid, cluster): cluster 0 holds w0 + 2 l0 steps, cluster 1 w1 + 2 l1, cluster 2 w2 -> 3 groups
    assert metrics["forge/step_groups"] == 3 and metrics["forge/step_group_singleton_share"] == pytest.approx(1 / 3)


@pytest.mark.parametrize("reply, levels, bad", [
    ('[{"level": "principle", "text": "heat first"}, {"level": "method", "text": "go; take"}]',
     ["principle", "method"], 0),
    ('Sure! ```json\n[{"level": "example", "text": "at the fridge open it"}]\n``` hope it helps', ["example"], 0),
    ('Here: [{"level": "principle", "text": "a"}, {"level": "mistake", "text": "wrong zone"}, {"text": "x"}, 3]',
     ["principle"], 3),
    ("principle: always check the fridge\n- **method**: go to fridge; open it\nnoise line", ["principle", "method"], 0),
    ("I cannot help with that.", [], 1),
    ('[{"level": "method", "text": ""}]', [], 1),
    ('[{"level": "method", "text": "' + "x" * 2000 + '"}]', [], 1),
    ("[not json at all", [], 1),
])
def test_llm_output_parsing_is_robust(reply, levels, bad):
    pairs, malformed = parse_llm_output(reply, GOLDEN)
    assert [lvl for lvl, _ in pairs] == levels and malformed == bad


def test_llm_extractor_counts_failures_and_never_raises(traj):
    win = traj("u", "w", "task", [(OBS[0], "go to countertop 1")], 10.0, clusters=[4])
    loss = traj("u", "l", "task", [(OBS[1], "look")], 0.0, clusters=[5])
    prompts = []

    def llm(prompt):
        prompts.append(prompt)
        if "SUCCESSFUL" in prompt:
            return '[{"level": "method", "text": "go to countertop 1 first"}, {"level": "bogus", "text": "x"}]'
        raise ConnectionError("endpoint down")

    ext = LLMExtractor(llm)
    out = ext.extract([win], [loss], 0.5)
    assert [(c.zone, c.level, c.text, c.cluster_ids) for c in out] == [(GOLDEN, "method", "go to countertop 1 first",
                                                                         [4])]
    assert ext.stats == {"llm_calls": 2, "llm_errors": 1, "malformed": 1}
    assert "go to countertop 1" in prompts[0] and "FAILED" in prompts[1]
    assert LLMExtractor(lambda p: None).extract([win], [], 0.5) == []


def test_llm_prompt_lists_a_states_admissible_actions_only_when_they_are_few(traj):
    from recipe.forge.experience.extract_llm import MAX_ACTIONS_SHOWN, format_steps

    few = traj("u", "l", "reach the target.", [("Target: 0\nCurrent: 3", "+"), ("Target: 0\nCurrent: 3", "zz")], -2.0,
               valid=[True, False], admissible=("+", "-"))
    assert format_steps(few).splitlines() == ["0. Target: 0 Current: 3 -> + [admissible: +, -]",
                                              "1. Target: 0 Current: 3 -> zz [invalid] [admissible: +, -]"]
    many = traj("u", "l", "t", [("hall", "look")], 0.0, admissible=[f"go {i}" for i in range(MAX_ACTIONS_SHOWN + 1)])
    unlisted = traj("u", "l", "t", [("hall", "look")], 0.0)
    assert format_steps(many) == format_steps(unlisted) == "0. hall -> look"


def test_llm_extractor_in_the_system_and_config_errors(cfg, traj):
    with pytest.raises(ValueError, match="extractor='llm' needs an llm"):
        ExperienceSystem.from_config(cfg(extractor="llm"))
    system = ExperienceSystem.from_config(cfg(extractor="llm"), llm=lambda p: '[{"level": "mistake", "text": "m"},'
                                          '{"level": "principle", "text": "p"}]')
    system.evolve([traj("u", "w", "t", [(OBS[0], "a")], 10.0), traj("u", "l", "t", [(OBS[1], "b")], 0.0)], 0)
    assert {(e.zone, e.level, e.text) for e in system.library.all_entries()} == {(GOLDEN, "principle", "p"),
                                                                                (WARNING, "mistake", "m")}
    assert system.metrics()["forge/extractor_malformed"] == 2  # one wrong-zone item per reply


def test_openai_compatible_endpoint_through_a_mock_transport():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["path"] = request.url.path
        seen["body"] = json.loads(request.content)
        return httpx.Response(200, json={
            "id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": '[{"level": "method", "text": "ok"}]'}}],
        })

    llm = OpenAICompatibleLLM("http://llm.local/v1", "policy", http_client=httpx.Client(
        transport=httpx.MockTransport(handler)))
    assert llm("hello") == '[{"level": "method", "text": "ok"}]'
    assert seen["path"] == "/v1/chat/completions" and seen["body"]["model"] == "policy"
    assert seen["body"]["messages"] == [{"role": "user", "content": "hello"}]
