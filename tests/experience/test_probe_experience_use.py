"""scripts/probe_experience_use.py: the lesson it injects, and that the injected text reaches the model."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def probe_module(load_script):
    return load_script("probe_experience_use.py")


def test_the_lesson_is_the_rule_extractors_example_for_that_state_and_action(probe_module):
    text = probe_module.rule_example("Target: 2\nCurrent: 1", "+")
    assert text == 'At "Target: 2 Current: 1", the action "+" moved the task forward.'


def test_tiny_model_probe_sees_every_state_once_and_the_system_message(probe_module):
    result = probe_module.probe("smollm2-135m-instruct", "gym_cards/NumberLine-v0", target_max=2, states=48,
                                prefix="<action>", tiny=True)
    # positions 0..2 with start != target: at most 3 * 2 = 6 distinct states
    assert 1 <= result["states"] <= 6
    p = result["p_expert"]
    assert all(0.0 <= v <= 1.0 for v in p.values())
    # a random model reacts to any change of its input: the injected lesson must have reached it, and the
    # right and wrong lessons differ in one token
    assert p["none"] != p["right"] and p["right"] != p["wrong"]
    assert result["uses_library_gap"] == pytest.approx(p["right"] - p["wrong"])
