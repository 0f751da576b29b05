"""scripts/probe_lesson_credit.py: lesson precision of outcome and step credit under a scripted policy."""

import json

import pytest

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def probe(load_script):
    return load_script("probe_lesson_credit.py")


def test_an_expert_that_never_errs_gives_right_outcome_lessons_and_nothing_to_compare(probe, capsys):
    """p=1, no invalid answers: every episode is won, so outcome credit makes only golden examples, all naming the
    expert's action; every copy takes the same action at a state, so step credit compares nothing and keeps those
    outcome examples (its fallback where no two actions were compared): the same right lessons."""
    assert probe.main(["--p", "1.0", "--invalid", "0", "--iterations", "2", "--json"]) == 0
    [report] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["results"]
    assert report["success_rate"] == 1.0
    assert report["outcome"]["precision"] == 1.0 and report["outcome"]["checked"] > 0
    assert report["outcome"]["levels"]["example"]["wrong"] == 0 and "diagnostic" not in report["outcome"]["levels"]
    assert report["step"]["precision"] == 1.0 and report["step"]["checked"] == report["outcome"]["checked"]
    assert set(report["step"]["levels"]) == {"example", "principle", "method"}


def test_a_noisy_policy_gives_step_lessons_to_check_at_both_levels(probe, capsys):
    assert probe.main(["--p", "0.5", "--iterations", "3", "--tasks", "8", "--json"]) == 0
    [report] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["results"]
    step = report["step"]
    assert step["checked"] > 0 and 0.0 <= step["precision"] <= 1.0
    assert {"example", "diagnostic"} <= set(step["levels"])
    levels = step["levels"]
    assert step["checked"] == sum(levels[l]["right"] + levels[l]["wrong"] for l in levels)
