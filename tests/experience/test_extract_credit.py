"""Step-credit extraction (lesson_credit: step) against hand-worked NumberLine-like episodes.

NumberLine's rewards: +1 on reaching the target (the episode ends), -1 for a step that does not bring the
marker closer (a blocked move included), 0 otherwise. Every expected return below is worked by hand from
R_t = r_t + gamma * R_{t+1}, with the invalid-action penalty subtracted from an invalid step's own return.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_system.config_checks import ConfigError
from agent_system.multi_turn_rollout.protocols import StepRecord, TrajectoryRecord
from recipe.forge.experience import ExperienceSystem
from recipe.forge.experience.extract_credit import CreditExtractor
from recipe.forge.experience.extract_llm import LLMExtractor
from recipe.forge.experience.extract_rule import RuleExtractor
from recipe.forge.experience.library import GOLDEN, WARNING, Advice

TASK = "Move the current position to the target position on the number line."
S1 = "Target: 2\nCurrent: 1"  # "+" reaches the target
S0 = "Target: 2\nCurrent: 0"  # "+" moves closer, "-" is blocked
PENALTY = 0.1
CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "recipe" / "forge" / "config")


def expert(obs: str) -> str:
    target, current = (int(line.split(": ")[1]) for line in obs.splitlines())
    return "+" if current < target else "-"


def led_to(obs: str, action: str, valid: bool) -> str | None:
    """The observation ``action`` leads to from ``obs`` on the number line 0..3 (None: the target is reached and
    the episode ends); an invalid answer, an unknown action or a blocked move leaves the state as it was."""
    target, current = (int(line.split(": ")[1]) for line in obs.splitlines())
    moved = min(current + 1, 3) if action == "+" else max(current - 1, 0) if action == "-" else current
    moved = moved if valid else current
    return None if moved == target else f"Target: {target}\nCurrent: {moved}"


def episode(uid, traj_uid, steps, clusters=None):
    """steps: (anchor_obs, action, reward) or (anchor_obs, action, reward, valid), in order; ``clusters``:
    the cluster id of each step (default: none, so steps group by anchor observation). Each step's next
    observation follows the number line's moves (:func:`led_to`)."""
    records = []
    for i, (obs, action, reward, *valid) in enumerate(steps):
        records.append(StepRecord(
            uid=uid, traj_uid=traj_uid, step=i, anchor_obs=obs, messages=[], plain_messages=[],
            response_text=f"<think>.</think><action>{action}</action>", action=action, prompt_ids=[],
            response_ids=[], logprobs=[], reward=reward, is_action_valid=valid[0] if valid else True,
            done=i == len(steps) - 1, cluster_id=None if clusters is None else clusters[i],
            admissible_actions=("+", "-"), expert_action=expert(obs),
            next_anchor_obs=led_to(obs, action, valid[0] if valid else True)))
    total = sum(s[2] for s in steps)
    return TrajectoryRecord(uid=uid, traj_uid=traj_uid, task=TASK, task_type="numberline", steps=records,
                            episode_reward=total, success=total > 0.5, length=len(records))


def four_copies(uid="u", clusters=True):
    """Four copies of one task from S1 (at most 2 steps): two answer "+" and win; two answer "-" to S0 and fail,
    one of them with the right "+" as its last action (it only ran out of steps)."""
    at = {S1: 0, S0: 1}
    plan = [[(S1, "+", 1.0)], [(S1, "+", 1.0)],
            [(S1, "-", -1.0), (S0, "+", 0.0)],   # failed; its last action "+" moved closer
            [(S1, "-", -1.0), (S0, "-", -1.0)]]  # failed; "-" at 0 is blocked
    return [episode(uid, f"{uid}-{k}", steps, [at[s[0]] for s in steps] if clusters else None)
            for k, steps in enumerate(plan)]


def credit(style="imperative", gamma=0.95, base=None):
    return CreditExtractor(base or RuleExtractor(style), style, gamma, PENALTY)


def state_lessons(candidates):
    return [c for c in candidates if c.level in ("example", "pattern", "diagnostic")]


def summary(c):
    return c.zone, c.level, c.text, round(c.score, 9), c.support, c.cluster_ids, c.key, c.advice


def golden_at(state, action, score, support, cluster):
    shown = state.replace("\n", " ")
    return (GOLDEN, "example", f"At \"{shown}\", answer with <action>{action}</action>.", round(score, 9),
            support, [cluster], state, Advice(state, (action,), (), expert(state)))


def warning_at(state, action, worse, score, support, cluster):
    shown = state.replace("\n", " ")
    return (WARNING, "diagnostic", f"At \"{shown}\", answer with <action>{action}</action> instead of \"{worse}\", "
            "which led to a lower return from this state in the same task.", round(score, 9), support, [cluster],
            state, Advice(state, (action,), (worse,), expert(state)))


@pytest.mark.parametrize("gamma", [0.5, 0.95])
def test_four_copies_give_the_hand_worked_golden_and_warning_lessons(gamma):
    # returns at S1: "+" 1 and 1; "-" -1 + gamma * 0 = -1 and -1 + gamma * (-1) = -1 - gamma.
    # "+" mean 1, "-" mean -1 - gamma / 2: gap 2 + gamma / 2 (2.25 at 0.5, 2.475 at 0.95), 4 steps behind it.
    # returns at S0: "+" 0 (the last step), "-" -1: gap 1, 2 steps.
    lessons = credit(gamma=gamma).state_lessons(four_copies())
    gap = 2 + gamma / 2
    assert [summary(c) for c in lessons] == [
        golden_at(S1, "+", gap, 4, 0), warning_at(S1, "+", "-", gap, 4, 0),
        golden_at(S0, "+", 1.0, 2, 1), warning_at(S0, "+", "-", 1.0, 2, 1),
    ]


def test_a_failed_episode_whose_last_action_was_right_gets_no_warning_against_it():
    batch = four_copies()
    failed = batch[2]  # S1 "-" then S0 "+": right at S0, out of steps
    outcome = RuleExtractor("imperative").warning(failed, threshold=0.5)
    # its last action moved on and the step limit cut it: the outcome extractor blames no dead end (it once told
    # to take "-", blocked there, instead of the right "+")
    assert not [c for c in outcome if c.level == "diagnostic"]
    lessons = credit().extract([], [failed], 0.5, batch=batch)
    at_s0 = [c for c in state_lessons(lessons) if c.key == S0]
    assert [(c.zone, c.advice.do, c.advice.avoid) for c in at_s0] == [(GOLDEN, ("+",), ()), (WARNING, ("+",), ("-",))]
    assert not any(c.advice.avoid == ("+",) for c in state_lessons(lessons))


def test_the_other_levels_are_the_outcome_extractors_and_its_state_levels_are_replaced():
    batch = four_copies()
    best, worst = batch[:2], batch[2:]
    rule = RuleExtractor("imperative").extract(best, worst, 0.5, batch=batch)
    mixed = credit().extract(best, worst, 0.5, batch=batch)
    kept = [c for c in rule if c.level in ("principle", "method", "mistake")]
    assert len(kept) == 4 and [summary(c) for c in mixed[:len(kept)]] == [summary(c) for c in kept]
    assert [summary(c) for c in mixed[len(kept):]] == [summary(c) for c in credit().state_lessons(batch)]
    # no loop here, so no pattern; every answer was valid, so no imperative mistake (no failed plan shape)
    assert {c.level for c in rule} == {c.level for c in mixed} == {"principle", "method", "example", "diagnostic"}


def test_tied_returns_give_no_state_lesson():
    # both actions at S1 return 1
    tie = [episode("u", "a", [(S1, "+", 1.0)]), episode("u", "b", [(S1, "-", 1.0)])]
    assert credit().state_lessons(tie) == []
    # three actions, the best mean shared by two: no single action to name
    top_tie = tie + [episode("u", "c", [(S1, "wait", -1.0)])]
    assert credit().state_lessons(top_tie) == []


def test_one_action_only_gives_no_state_lesson():
    assert credit().state_lessons([episode("u", "a", [(S1, "+", 1.0)]), episode("u", "b", [(S1, "+", 1.0)])]) == []


def test_different_task_groups_are_never_compared():
    # the same state and cluster in two task groups, each with one action: compared across uids they would
    # make a lesson, within their groups they make none
    batch = [episode("a", "a-0", [(S1, "+", 1.0)], [0]), episode("a", "a-1", [(S1, "+", 1.0)], [0]),
             episode("b", "b-0", [(S1, "-", -1.0)], [0]), episode("b", "b-1", [(S1, "-", -1.0)], [0])]
    assert credit().state_lessons(batch) == []
    # two groups that each compare: one lesson pair per group, with the group's own returns
    both = four_copies("a") + four_copies("b")
    assert len(credit().state_lessons(both)) == 8


def test_invalid_answers_are_left_out_of_the_comparison():
    # returns at S1: invalid "(+" 0 + 0.95 * 1 - 0.1 = 0.85 (left out), "+" 1, "-" -1 + 0.95 * 0 = -1: gap 2,
    # supported by the 2 valid steps; the invalid answer is neither golden nor warned against
    batch = [episode("u", "a", [(S1, "(+", 0.0, False), (S1, "+", 1.0)], [0, 0]),
             episode("u", "b", [(S1, "-", -1.0), (S0, "+", 0.0)], [0, 1])]
    assert [summary(c) for c in credit().state_lessons(batch)] == [
        golden_at(S1, "+", 2.0, 2, 0), warning_at(S1, "+", "-", 2.0, 2, 0)]
    # an invalid answer with the higher return is not golden, and a valid action alone is compared with nothing
    alone = [episode("u", "a", [(S1, "(+", 0.0, False), (S1, "+", 1.0)], [0, 0]),
             episode("u", "b", [(S0, "-", -1.0)], [1])]
    assert credit().state_lessons(alone) == []
    only_invalid_better = [episode("u", "a", [(S0, "x", 0.0, False), (S1, "+", 1.0)], [1, 0]),
                           episode("u", "b", [(S0, "-", -1.0)], [1])]
    assert [c for c in credit().state_lessons(only_invalid_better) if c.key == S0] == []


def test_invalid_penalty_enters_after_discounting_on_the_invalid_step_only():
    # at S0: "+" then an invalid answer at S1 (reward -1, penalised return -1.1, left out): "+" returns
    # 0 + 0.95 * (-1) = -0.95 (the penalty is not discounted into it); "-" twice: -1 + 0.95 * (-1) = -1.95 and
    # -1, mean -1.475. Gap 0.525 over 3 steps (a penalty before discounting would give 0.43)
    batch = [episode("u", "a", [(S0, "+", 0.0), (S1, "?", -1.0, False)]),
             episode("u", "b", [(S0, "-", -1.0), (S0, "-", -1.0)])]
    lessons = credit().state_lessons(batch)
    assert [(c.zone, c.key, c.score, c.support) for c in lessons] == [
        (GOLDEN, S0, pytest.approx(0.525), 3), (WARNING, S0, pytest.approx(0.525), 3)]


def test_steps_group_by_cluster_and_by_anchor_observation_without_one():
    # one cluster holding two near-identical observations: the advantage treats them as one state, so do the
    # lessons; they quote the observation of the first step that took the best action
    near = "Target: 2\nCurrent: 1 "
    batch = [episode("u", "a", [(near, "-", -1.0)], [7]), episode("u", "b", [(S1, "+", 1.0)], [7])]
    assert [(c.key, c.cluster_ids, c.advice.avoid) for c in credit().state_lessons(batch)] == [
        (S1, [7], ()), (S1, [7], ("-",))]
    # without cluster ids the anchors decide: different observations are different states
    unclustered = [episode("u", "a", [(near, "-", -1.0)]), episode("u", "b", [(S1, "+", 1.0)])]
    assert credit().state_lessons(unclustered) == []
    assert [(c.key, c.cluster_ids) for c in credit().state_lessons(four_copies(clusters=False))][:1] == [(S1, [])]


def test_descriptive_wording_is_the_rule_extractors_example_and_says_what_happened():
    lessons = credit("descriptive").state_lessons(four_copies())
    assert [c.text for c in lessons[:2]] == [
        'At "Target: 2 Current: 1", the action "+" moved the task forward.',
        'At "Target: 2 Current: 1", the action "-" led to a lower return than "+" from this state in the same task.']


def test_counters_and_a_batch_with_a_repeated_episode_id():
    extractor = credit()
    extractor.extract([], [], 0.5, batch=four_copies())
    assert (extractor.stats["credit_states"], extractor.stats["credit_lessons"]) == (2, 4)
    batch = four_copies()
    with pytest.raises(ValueError, match="traj_uid='u-0'"):
        credit().state_lessons(batch + [batch[0]])


def test_the_config_key_is_checked_at_start_up(cfg):
    from hydra import compose, initialize_config_dir

    from recipe.forge.run_config import load_run_config

    assert cfg().lesson_credit == "outcome"
    with pytest.raises(ConfigError, match=r"algorithm.forge.lesson_credit='credit' .*'outcome', 'step'"):
        cfg(lesson_credit="credit")
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        shipped = compose("forge_trainer")
        bad = compose("forge_trainer", overrides=["algorithm.forge.lesson_credit=steps"])
    assert load_run_config(shipped).algorithm.forge.lesson_credit == "outcome"
    with pytest.raises(ConfigError, match="algorithm.forge.lesson_credit='steps'"):
        load_run_config(bad)
    with pytest.raises(ConfigError, match="extractor=oracle .* use lesson_credit=outcome with the oracle"):
        cfg(extractor="oracle", lesson_credit="step")


def test_the_system_evolves_credit_assigned_lessons(cfg):
    c = cfg(lesson_credit="step", lesson_style="imperative", enable_clustering=False, novelty_threshold=1.0,
            obs_similarity_threshold=1.0, step_value="return")  # the scores below are discounted-return gaps
    with pytest.raises(ValueError, match=r"ExperienceSystem.from_algorithm\(algorithm\)"):
        ExperienceSystem(c)
    system = ExperienceSystem.from_config(c, gamma=0.95, invalid_action_penalty_coef=PENALTY)
    batch = four_copies(clusters=False)
    metrics = system.evolve(batch, 0)
    s1, s0 = batch[3].steps[0].cluster_id, batch[3].steps[1].cluster_id  # the index's, set by evolve
    examples = system.library.level_entries(GOLDEN, "example")
    diagnostics = system.library.level_entries(WARNING, "diagnostic")
    assert [(e.key, e.score, e.support, e.cluster_ids, e.advice.do) for e in examples] == [
        (S1, pytest.approx(2.475), 4, [s1], ("+",)), (S0, pytest.approx(1.0), 2, [s0], ("+",))]
    assert [(e.key, e.advice.avoid) for e in diagnostics] == [(S1, ("-",)), (S0, ("-",))]
    assert system.library.level_entries(WARNING, "pattern") == []
    assert system.library.level_entries(GOLDEN, "principle")
    assert (metrics["forge/extractor_credit_states"], metrics["forge/extractor_credit_lessons"]) == (2.0, 4.0)
    # a worker's read-only copy never evolves, so it needs no returns
    assert ExperienceSystem.from_snapshot(system.snapshot()).view


def test_step_credit_composes_with_the_llm_extractor(cfg):
    reply = ('[{"level": "principle", "text": "Move towards the target."}, '
             '{"level": "example", "text": "At Target: 2 Current: 1, press -."}]')
    system = ExperienceSystem(cfg(extractor="llm", lesson_credit="step", enable_clustering=False,
                                  novelty_threshold=1.0),
                              llm=lambda prompt: reply, gamma=0.95, invalid_action_penalty_coef=PENALTY)
    assert isinstance(system.extractor, CreditExtractor) and isinstance(system.extractor.base, LLMExtractor)
    system.evolve(four_copies(clusters=False), 0)
    assert [e.text for e in system.library.level_entries(GOLDEN, "principle")] == ["Move towards the target."]
    examples = system.library.level_entries(GOLDEN, "example")  # the credit's, not the model's "press -"
    assert [(e.key, e.advice.do) for e in examples] == [(S1, ("+",)), (S0, ("+",))]
    assert system.metrics()["forge/extractor_llm_calls"] == 4.0


def test_where_no_two_actions_were_compared_the_outcome_lessons_that_name_what_to_try_stay():
    """Both copies answer "-" at S1 and at S0 (blocked twice there) and fail: step credit compares nothing, so the
    rule extractor's dead end and loop (at S0, "+" instead of "-", which left the state as it was) stay: each names
    the action no copy tried there, the expert's. At the states four_copies compares, the outcome's state lessons
    go."""
    lost = [episode("v", f"v-{k}", [(S1, "-", -1.0), (S0, "-", -1.0), (S0, "-", -1.0)], [0, 1, 1]) for k in range(2)]
    extractor = credit()
    lessons = state_lessons(extractor.extract([], lost, 0.5, batch=lost))
    assert {(c.level, c.key, c.advice.do, c.advice.expert) for c in lessons} == {
        ("diagnostic", S0, ("+",), "+"), ("pattern", S0, ("+",), "+")}
    assert extractor.stats["credit_fallbacks"] == 4 and extractor.stats["credit_states"] == 0  # two per episode
    batch = four_copies()
    compared = credit()
    assert [summary(c) for c in state_lessons(compared.extract(batch[:2], batch[2:], 0.5, batch=batch))] == [
        summary(c) for c in credit().state_lessons(batch)]
    assert compared.stats["credit_fallbacks"] == 0
