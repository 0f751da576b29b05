"""Lesson quality against the environment's expert (recipe/forge/experience/lesson_quality.py): hand-worked
verdicts and metrics, the advice the rule extractor gives its lessons, the oracle extractor, an oracle run whose
injected lessons are all right, and the viewer's verdicts."""

from __future__ import annotations

import json

import pytest

from agent_system.config_checks import ConfigError
from agent_system.multi_turn_rollout.protocols import StepRecord
from recipe.forge.experience import ExperienceSystem
from recipe.forge.experience.extract_oracle import OracleExtractor
from recipe.forge.experience.extract_rule import RuleExtractor
from recipe.forge.experience.lesson_quality import lesson_quality_stats, verdict
from recipe.forge.experience.library import Advice, ExperienceEntry
from recipe.forge.commands.library_viewer import main as viewer_main

A, B = "Target: 2\nCurrent: 1", "Target: 0\nCurrent: 1"  # NumberLine states: the expert answers "+" at A, "-" at B


# ------------------------------------------------------------------------------------------------ verdicts


@pytest.mark.parametrize("advice, expected", [
    (Advice(A, do=("+",), expert="+"), "right"),
    (Advice(A, do=("-",), expert="+"), "wrong"),
    (Advice(A, avoid=("-",), expert="+"), "right"),
    (Advice(A, avoid=("+",), expert="+"), "wrong"),
    (Advice(A, do=("-", "+"), avoid=("x",), expert="+"), "right"),  # one of the actions it names
    (Advice(A, do=("+",), avoid=("+",), expert="+"), "wrong"),  # an avoided expert is wrong whatever do says
    (Advice("hall", do=("Go  North",), expert="go north"), "right"),  # whitespace and case do not count
    (Advice("hall", avoid=(" GO north ",), expert="go north"), "wrong"),
    (Advice(A, do=("+",), expert=None), None),  # no expert: not checkable
    (None, None),  # no advice: not checkable
])
def test_verdict_by_hand(advice, expected):
    assert verdict(advice) == expected


def entry(entry_id, level, advice=None):
    zone = "golden" if level in ("principle", "method", "example") else "warning"
    return ExperienceEntry(entry_id=entry_id, text=f"lesson {entry_id}", zone=zone, level=level, score=1.0,
                           task="t", task_type=None, key="", cluster_ids=[], advice=advice)


def shown(*ids) -> StepRecord:
    return StepRecord(uid="u", traj_uid="u-0", step=0, anchor_obs="s", messages=[], plain_messages=[],
                      response_text="", action="", prompt_ids=[], response_ids=[], logprobs=[], reward=0.0,
                      is_action_valid=True, done=False, experience_ids=tuple(str(i) for i in ids))


def test_lesson_quality_stats_by_hand():
    entries = {
        1: entry(1, "example", Advice(A, do=("+",), expert="+")),  # right
        2: entry(2, "example", Advice(B, do=("+",), expert="-")),  # wrong
        3: entry(3, "diagnostic", Advice(A, avoid=("+",), expert="+")),  # wrong, and at A it contradicts #1
        4: entry(4, "diagnostic", Advice(B, do=("-",), avoid=("+",), expert="-")),  # right
        5: entry(5, "principle"),  # no advice
        6: entry(6, "example", Advice(A, do=("-", "+"), expert=None)),  # no expert; its do differs from #1's
    }
    steps = [shown(1, 5), shown(1, 3), shown(2, 4), shown(1, 6), shown(), shown(4, 99)]  # 99: pruned since
    got = lesson_quality_stats(steps, entries)
    # 10 injected lessons; checkable: 1, 1, 3, 2, 4, 1, 4 -> 5 right (1, 1, 4, 1, 4), 2 wrong (3, 2)
    assert got["forge/lesson_precision"] == pytest.approx(5 / 7)
    assert got["forge/lessons_checkable"] == pytest.approx(7 / 10)
    assert got["forge/lesson_precision/example"] == pytest.approx(3 / 4)  # 1, 1, 2, 1
    assert got["forge/lesson_precision/diagnostic"] == pytest.approx(2 / 3)  # 3, 4, 4
    assert "forge/lesson_precision/principle" not in got  # nothing checkable there: no figure, not a 0
    # 5 steps were shown lessons; 3 conflict: (1, 3) do "+" against avoid "+" at A, (2, 4) do "+" against do "-"
    # (and avoid "+") at B, (1, 6) two different do sets at A
    assert got["forge/lesson_conflict"] == pytest.approx(3 / 5)
    assert got["forge/library_precision"] == pytest.approx(2 / 4)  # entries 1 and 4 right, 2 and 3 wrong


def test_lesson_quality_stats_without_data_report_shares_but_no_precision():
    empty = lesson_quality_stats([], {})
    assert empty == {"forge/lessons_checkable": 0.0, "forge/lesson_conflict": 0.0}
    unchecked = lesson_quality_stats([shown(1)], {1: entry(1, "example")})  # shown, but without advice
    assert unchecked == {"forge/lessons_checkable": 0.0, "forge/lesson_conflict": 0.0}


def test_one_lesson_conflicts_with_nothing_and_agreeing_lessons_do_not_conflict():
    entries = {1: entry(1, "example", Advice(A, do=("+",), expert="+")),
               2: entry(2, "diagnostic", Advice(" Target: 2  Current: 1", do=("+",), avoid=("-",), expert="+"))}
    assert lesson_quality_stats([shown(1), shown(1, 2)], entries)["forge/lesson_conflict"] == 0.0


# ------------------------------------------------------------------------------------- the rule extractor


def advice_by_level(candidates):
    return {c.level: c.advice for c in candidates}


@pytest.mark.parametrize("style", ["descriptive", "imperative"])
def test_the_golden_example_advises_its_decisive_action_with_the_expert_of_that_step(traj, style):
    win = traj("u", "w", "reach the target.", [(B, "+"), ("Target: 0\nCurrent: 2", "-"), (B, "-")], 1.0,
               experts=["-", "-", "-"])
    got = advice_by_level(RuleExtractor(style).golden(win))
    assert got == {"principle": None, "method": None, "example": Advice(B, do=("-",), expert="-")}
    assert verdict(got["example"]) == "right"


@pytest.mark.parametrize("style", ["descriptive", "imperative"])
def test_warnings_advise_untried_actions_and_avoid_the_valid_failed_one(traj, style):
    # NumberLine from 1 towards 0, answering "+" every time: stuck at 3, where the expert answers "-"
    states = ["Target: 0\nCurrent: 1", "Target: 0\nCurrent: 2", "Target: 0\nCurrent: 3", "Target: 0\nCurrent: 3"]
    loss = traj("u", "l", "reach the target.", [(s, "+") for s in states], -4.0, admissible=("+", "-"),
                experts=["-"] * 4, end=states[3])
    got = advice_by_level(RuleExtractor(style).warning(loss, 0.5))
    assert got.get("mistake") is None  # no imperative mistake; the descriptive plan shape names no state's action
    if style == "imperative":  # the loop: "+" left the stop as it was
        assert got["pattern"] == Advice(states[2], do=("-",), avoid=("+",), expert="-")
        assert got["diagnostic"] == Advice(states[3], do=("-",), avoid=("+",), expert="-")
    else:  # "Repeating ... choose a different action" names no action; the dead end names the failed one
        assert got["pattern"] is None
        assert got["diagnostic"] == Advice(states[3], avoid=("+",), expert="-")
    assert {verdict(a) for a in got.values() if a is not None} == {"right"}


def test_an_invalid_failed_answer_is_not_advised_against(traj):
    loss = traj("u", "l", "reach the target.", [("Target: 1\nCurrent: 0", "")] * 2, -2.0, valid=[False, False],
                admissible=("+", "-"), experts=["+", "+"])
    imperative = advice_by_level(RuleExtractor("imperative").warning(loss, 0.5))
    assert imperative["mistake"] is None  # the invalid-answer habit
    assert imperative["diagnostic"] == Advice("Target: 1\nCurrent: 0", do=("+", "-"), expert="+")
    prohibition = traj("u", "l", "leave.", [("hall", "dance")] * 2, -2.0, valid=[False, False], experts=["go", "go"])
    for style in ("imperative", "descriptive"):  # a dead end at an invalid answer, with nothing untried to name
        assert advice_by_level(RuleExtractor(style).warning(prohibition, 0.5))["diagnostic"] is None


def test_imperative_prohibition_and_loops_without_untried_actions(traj):
    tried = traj("u", "l", "reach the target.", [("Target: 0\nCurrent: 3", "+"), ("Target: 0\nCurrent: 3", "-"),
                                                 ("Target: 0\nCurrent: 3", "+")], -3.0, admissible=("+", "-"),
                 experts=["-", "-", "-"], end="Target: 0\nCurrent: 3")
    got = advice_by_level(RuleExtractor("imperative").warning(tried, 0.5))
    assert got["pattern"] is None  # "after one try, choose a different action": no action named
    assert got["diagnostic"] == Advice("Target: 0\nCurrent: 3", avoid=("+",), expert="-")


def test_without_an_expert_the_advice_is_kept_but_not_checkable(traj):
    win = traj("u", "w", "reach the target.", [(B, "-")], 1.0)
    example = advice_by_level(RuleExtractor("imperative").golden(win))["example"]
    assert example == Advice(B, do=("-",)) and verdict(example) is None


# ----------------------------------------------------------------------------------- the oracle extractor


def test_the_oracle_teaches_the_expert_action_of_every_state_in_the_rule_extractors_words(traj):
    # two episodes of one task: the second visits B twice; C has no expert (the expert gave up there)
    C = "Target: 3\nCurrent: 3"
    first = traj("u", "u-0", "reach the target.", [(A, "-"), (B, "-")], -1.0, clusters=[7, 8], experts=["+", "-"])
    second = traj("u", "u-1", "reach the target.", [(B, "+"), (B, "-"), (C, "+")], 1.0, clusters=[8, 9, 10],
                  experts=["-", "-", None])
    for step in second.steps:
        step.response_text = f"<answer>{step.action}</answer>"  # its episode's answer format
    oracle = OracleExtractor("imperative")
    got = {c.key: c for c in oracle.extract([], [], 0.0, batch=[first, second])}
    assert set(got) == {A, B}
    a, b = got[A], got[B]
    assert a.text == 'At "Target: 2 Current: 1", answer with <action>+</action>.'
    assert b.text == 'At "Target: 0 Current: 1", answer with <action>-</action>.'
    assert (a.zone, a.level, b.zone, b.level) == ("golden", "example", "golden", "example")
    assert a.advice == Advice(A, do=("+",), expert="+") and b.advice == Advice(B, do=("-",), expert="-")
    assert (a.score, b.score) == (1.0, 1 / 3)  # the share of the state's steps that missed the expert
    assert (a.support, b.support) == (1, 2) and (a.cluster_ids, b.cluster_ids) == ([7], [8, 9])
    # the same lesson as the rule extractor's example of a step that took the expert action there
    rule = next(c for c in RuleExtractor("imperative").golden(traj("v", "v-0", "t", [(A, "+")], 1.0))
                if c.level == "example")
    assert rule.text == a.text
    descriptive = {c.key: c.text for c in OracleExtractor("descriptive").extract([], [], 0.0, batch=[first])}
    assert descriptive[A] == 'At "Target: 2 Current: 1", the action "+" moved the task forward.'
    assert OracleExtractor("imperative").extract([], [], 0.0, batch=[]) == []


def test_the_oracle_in_the_answer_format_of_the_episode_and_the_most_frequent_expert(traj):
    ep = traj("u", "u-0", "t", [("hall", "north"), ("hall", "north"), ("hall", "look")], 0.0,
              experts=["south", "north", "north"])
    for step in ep.steps:
        step.response_text = f"<answer>{step.action}</answer>"
    [lesson] = OracleExtractor("imperative").extract([], [], 0.0, batch=[ep])
    assert lesson.text == 'At "hall", answer with <answer>north</answer>.' and lesson.advice.do == ("north",)
    assert lesson.score == pytest.approx(1 / 3)


def test_the_oracle_on_steps_without_an_expert_names_the_key(traj):
    ep = traj("u", "u-0", "t", [(A, "+"), (B, "-")], 1.0)
    with pytest.raises(ConfigError, match=r"algorithm.forge.extractor=oracle .* none of this iteration's 2 steps"):
        OracleExtractor("imperative").extract([ep], [], 0.0, batch=[ep])


def test_the_config_offers_the_oracle_extractor(cfg):
    system = ExperienceSystem.from_config(cfg(extractor="oracle"))
    assert isinstance(system.extractor, OracleExtractor)
    with pytest.raises(ConfigError, match=r"algorithm.forge.extractor.*\['rule', 'llm', 'oracle'\]"):
        cfg(extractor="expert")


def test_an_oracle_run_on_an_environment_without_an_expert_fails_at_the_first_evolution(cfg, iterate):
    system = ExperienceSystem.from_config(cfg(extractor="oracle"))
    with pytest.raises(ConfigError, match="extractor=oracle"):
        iterate(system, 0, seed=1)  # the synthetic ALFWorld-like episodes carry no expert


def test_an_oracle_library_gives_only_right_lessons_through_retrieval_and_injection(cfg):
    """A short run on the real NumberLine: random answers, the oracle's library, its lessons injected."""
    from agent_system.environments import make_envs
    from agent_system.multi_turn_rollout.protocols import SamplingParams
    from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
    from agent_system.testing.configs import run_config
    from agent_system.testing.policies import RandomGenerator

    system = ExperienceSystem.from_config(cfg(extractor="oracle", lesson_style="imperative", enable_clustering=False,
                                              obs_similarity_threshold=1.0, novelty_threshold=1.0))
    envs = make_envs(run_config("gym_cards/NumberLine-v0", n=2, train_b=3, gym_cards={"target_max": 3}))[0]
    generator = RandomGenerator(envs, seed=4)
    metrics = []
    for iteration in range(3):
        system.begin_iteration(iteration)
        batch = TrajectoryCollector().collect(envs, generator, SamplingParams(), system.provider,
                                              seeds=[3 * iteration + k for k in range(3)])
        metrics.append(system.evolve(batch.trajectories, iteration))
    assert metrics[0]["forge/strategies_added"] > 0 and metrics[0]["forge/library_precision"] == 1.0
    later = metrics[1:]
    assert all(m["forge/retrieval_hit_rate"] > 0 for m in later)
    assert all(m["forge/lesson_precision"] == 1.0 and m["forge/lessons_checkable"] == 1.0 for m in later)
    assert all(m["forge/lesson_precision/example"] == 1.0 and m["forge/lesson_conflict"] == 0.0 for m in later)
    assert all(e.level == "example" and verdict(e.advice) == "right" for e in system.library.all_entries())
    # the validation entry point: a batch's steps against the library that served them. A wrong twin of every
    # oracle lesson (the other action, at the same state and cluster) and a wrong lesson at a state no step visits
    # make the injected precision a count over what the steps were shown, apart from the library's precision
    from recipe.forge.experience.library import Candidate

    oracle = list(system.library.all_entries())
    other = {"+": "-", "-": "+"}
    twins = system.library.insert_unchecked([
        Candidate(f"At this state answer {other[e.advice.expert]}.", "golden", "example", 0.5, key=e.key,
                  cluster_ids=list(e.cluster_ids), advice=Advice(e.advice.state, do=(other[e.advice.expert],),
                                                                  expert=e.advice.expert))
        for e in oracle] + [Candidate("At nowhere answer -.", "golden", "example", 9.0, key="nowhere",
                                      advice=Advice("nowhere", do=("-",), expert="+"))], iteration=3)
    wrong = {str(i) for i in twins}
    view = ExperienceSystem.from_snapshot(system.snapshot())
    view.begin_iteration(3)
    held_out = TrajectoryCollector().collect(envs, generator, SamplingParams(), view.provider, seeds=[100, 101, 102])
    shown = [raw for step in held_out.steps for raw in step.experience_ids]
    wrong_shown = sum(raw in wrong for raw in shown)
    assert 0 < wrong_shown < len(shown), "the held-out steps must be shown right and wrong lessons"
    quality = view.lesson_quality(held_out.steps)
    assert quality["forge/lesson_precision"] == pytest.approx(1 - wrong_shown / len(shown))
    assert quality["forge/library_precision"] == pytest.approx(len(oracle) / (2 * len(oracle) + 1))


# ----------------------------------------------------------------------------------------------- the viewer


def test_the_viewer_shows_each_entrys_verdict_and_counts_per_level(cfg, tmp_path, capsys):
    from recipe.forge.experience.library import Candidate

    system = ExperienceSystem.from_config(cfg())
    system.library.insert_unchecked([
        Candidate('At "A", answer with <action>+</action>.', "golden", "example", 2.0, key=A,
                  advice=Advice(A, do=("+",), expert="+")),
        Candidate('At "B", answer with <action>+</action>.', "golden", "example", 1.0, key=B,
                  advice=Advice(B, do=("+",), expert="-")),
        Candidate("For tasks like this, follow a plan of this shape: +.", "golden", "principle", 1.0),
        Candidate('At "B", do not answer with the action "-" <b>', "warning", "diagnostic", 1.0, key=B,
                  advice=Advice(B, avoid=("-",), expert="-")),
    ], iteration=0)
    system.save(tmp_path / "ck")
    out_json, out_md, out_html = tmp_path / "v.json", tmp_path / "v.md", tmp_path / "v.html"
    assert viewer_main([str(tmp_path / "ck"), "--export-json", str(out_json), "--export-md", str(out_md),
                        "--export-html", str(out_html)]) == 0
    printed = capsys.readouterr().out
    assert "-- example (2 shown; right 1, wrong 1, not checkable 0) --" in printed
    assert "-- principle (1 shown; right 0, wrong 0, not checkable 1) --" in printed
    lines = {line.split("  ")[-1]: line for line in printed.splitlines() if line.startswith("    #")}
    assert "right" in lines['At "A", answer with <action>+</action>.']
    assert "wrong" in lines['At "B", answer with <action>+</action>.']
    assert "not checkable" in lines["For tasks like this, follow a plan of this shape: +."]
    view = json.loads(out_json.read_text())
    assert [r["verdict"] for r in view["zones"]["golden"]["example"]] == ["right", "wrong"]
    assert view["verdicts"]["warning"]["diagnostic"] == {"right": 0, "wrong": 1, "not checkable": 0}
    markdown = out_md.read_text()
    assert "### example (2; right 1, wrong 1, not checkable 0)" in markdown
    assert '| 0 | 2 | 1 | 0 | - | - | - | right | At "A", answer with &lt;action&gt;+&lt;/action&gt;. |' in markdown  # no raw tag
    page = out_html.read_text()
    assert "<td>wrong</td><td class='text'>At &quot;B&quot;, do not answer with the action &quot;-&quot; &lt;b&gt;</td>" in page
    assert "<h3>principle (1; right 0, wrong 0, not checkable 1)</h3>" in page
    assert viewer_main([str(tmp_path / "ck"), "--top", "1"]) == 0  # the counts cover the whole level
    assert "-- example (1 shown; right 1, wrong 1, not checkable 0) --" in capsys.readouterr().out
