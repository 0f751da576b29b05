"""scripts/probe_experience_use.py: the lesson it injects, the settings it reads from a preset, and that every
placement x wording reaches the model."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def probe_module(load_script):
    return load_script("probe_experience_use.py")


def test_the_lesson_is_the_rule_extractors_example_for_that_state_and_action(probe_module):
    assert probe_module.rule_example("Target: 2\nCurrent: 1", "+") == (
        'At "Target: 2 Current: 1", the action "+" moved the task forward.')
    assert probe_module.rule_example("Target: 2\nCurrent: 1", "+", "imperative") == (
        'At "Target: 2 Current: 1", answer with <action>+</action>.')


def test_the_warning_is_the_rule_extractors_diagnostic_for_a_failure_at_that_state(probe_module):
    assert probe_module.rule_diagnostic("Target: 2\nCurrent: 3", "+", ["+", "-"], "imperative") == (
        'At "Target: 2 Current: 3", answer with <action>-</action> instead of "+", which ended a failed attempt '
        '(1 step, return -1).')
    assert probe_module.rule_diagnostic("Target: 2\nCurrent: 3", "+", ["+", "-"]).endswith(
        'the last action "+" at "Target: 2 Current: 3" led nowhere.')


def test_the_loop_is_the_rule_extractors_pattern_for_an_answer_that_left_the_state_as_it_was(probe_module):
    assert probe_module.rule_loop("Target: 2\nCurrent: 3", "+", ["+", "-"], "imperative") == (
        'At "Target: 2 Current: 3", answer with <action>-</action>: repeating another answer here made no progress.')
    assert probe_module.rule_loop("Target: 2\nCurrent: 3", "+", ["+", "-"]).startswith(
        'Repeating "+" (2 times in 2 steps) made no progress')


def test_the_habit_is_the_rule_extractors_mistake_for_an_invalid_answer(probe_module):
    assert probe_module.rule_mistake("Target: 2\nCurrent: 3", ["+", "-"], "imperative") == (
        "Answer with one of <action>+</action>, <action>-</action>.")
    assert probe_module.rule_mistake("Target: 2\nCurrent: 3", ["+", "-"]).startswith("1 of 2 actions were invalid")


def test_the_main_job_preset_gives_the_settings_it_trains_with(probe_module):
    main_job = probe_module.settings_from_config("main_job", [])
    assert (main_job.env_name, main_job.target_max, main_job.prefix) == ("gym_cards/NumberLine-v0", 3, "<action>")
    assert (main_job.injection, main_job.lesson_style, main_job.max_tokens) == ("user_suffix", "imperative", 300)
    base = probe_module.settings_from_config(None, ["algorithm.forge.injection=user_prefix"])
    assert (base.injection, base.lesson_style, base.prefix) == ("user_prefix", "descriptive", "<action>")


def test_tiny_model_probe_measures_every_placement_and_style(probe_module):
    settings = probe_module.settings_from_config("main_job", ["env.gym_cards.target_max=2"])
    result = probe_module.probe(settings, states=48, tiny=True)
    # positions 0..2 with start != target: at most 3 * 2 = 6 distinct states
    assert 1 <= result["states"] <= 6
    assert {(r["injection"], r["lesson_style"]) for r in result["table"]} == {
        (i, s) for i in ("system", "user_prefix", "user_suffix") for s in ("descriptive", "imperative")}
    for row in result["table"]:
        p = row["p_expert"]
        assert all(0.0 <= v <= 1.0 for v in p.values())
        # a random model reacts to any change of its input: the lesson reached it wherever it was placed, and
        # the right and wrong lessons differ in the action they name
        assert p["none"] != p["right"] and p["right"] != p["wrong"]
        assert row["uses_library_gap"] == pytest.approx(p["right"] - p["wrong"])
        assert p["warning"] != p["none"]
        assert row["uses_warning_gap"] == pytest.approx(p["warning"] - p["none"])
        assert p["loop"] != p["none"] and row["uses_loop_gap"] == pytest.approx(p["loop"] - p["none"])
        valid = row["p_valid"]
        assert p["none"] < valid["none"] <= 1.0  # the expert is one of the admissible answers, and not the only one
        assert valid["habit"] != valid["none"] and row["habit_valid_gap"] == pytest.approx(valid["habit"] - valid["none"])
    own = next(r for r in result["table"] if (r["injection"], r["lesson_style"]) == ("user_suffix", "imperative"))
    assert result["uses_library_gap"] == own["uses_library_gap"] and result["p_expert"] == own["p_expert"]
    assert result["uses_warning_gap"] == own["uses_warning_gap"] and result["habit_valid_gap"] == own["habit_valid_gap"]
