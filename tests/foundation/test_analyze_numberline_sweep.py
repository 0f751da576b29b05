"""scripts/analyze_numberline_sweep.py on a hand-made sweep folder: what was tried at states that need "-" and
what the library showed there, counted by hand below."""

from __future__ import annotations

import json
import math

import pytest


@pytest.fixture(scope="module")
def analysis(load_script):
    return load_script("analyze_numberline_sweep.py")


def step(traj, turn, target, current, action, success, shown="", ids=()):
    prompt = f"<|im_start|>user\nTarget: {target}\nCurrent: {current}{shown}<|im_end|>\n<|im_start|>assistant\n"
    return {"step": 0, "input": prompt, "output": f"{action}</action>", "score": 0.0, "task": "t", "traj_uid": traj,
            "turn": turn, "observation": f"Target: {target}\nCurrent: {current}", "action": action, "valid": True,
            "done": False, "episode_reward": 1.0 if success else -1.0, "success": success, "cluster_id": 0,
            "experience_ids": list(ids)}


def write_run(root, name, iterations, library=None):
    run = root / name / "rollouts"
    run.mkdir(parents=True)
    for it, lines in iterations.items():
        (run / f"{it}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    if library is not None:
        folder = root / name / "library"
        folder.mkdir()
        entries = [{"entry_id": i, "level": level} for i, level in library.items()]
        (folder / "experience_library.json").write_text(json.dumps({"library": {"entries": entries}}))


def test_counts_match_a_hand_count(analysis, tmp_path):
    minus_lesson = "\nDo: At \"Target: 0 Current: 2\", answer with <action>-</action>."
    plus_lesson = "\nDo: At \"Target: 3 Current: 2\", answer with <action>+</action>."
    write_run(tmp_path, "forge_seed0", {
        1: [step("a", 0, 0, 2, "+", False), step("a", 1, 0, 3, "+", False),        # needs -, tried + twice
            step("b", 0, 3, 1, "+", True)],                                        # needs +: not counted
        2: [step("c", 0, 0, 2, "-", True, minus_lesson, ids=(7,)),                 # needs -, tried -, shown -
            step("c", 1, 0, 1, "-", True, minus_lesson + plus_lesson, ids=(7, 8, 99)),  # episode c: a "-" win
            step("d", 0, 1, 2, "+", False, plus_lesson, ids=(8,)),                # needs -, shown +
            step("d", 1, 1, 3, "+", False)],                                       # needs -, shown nothing
    }, library={7: "example", 8: "principle"})
    write_run(tmp_path, "grpo_seed0", {1: [step("x", 0, 2, 0, "+", True)], 2: [step("y", 0, 0, 1, "-", True)]})

    summary = analysis.analyze(tmp_path, {"forge"})
    forge = summary["forge"]
    first, second = forge["per_iteration_mean"][1], forge["per_iteration_mean"][2]
    assert first["minus_tried"] == 0.0 and first["minus_wins"] == 0 and first["shown_any"] == 0.0
    assert second["minus_states"] == 4 and second["minus_tried"] == 0.5 and second["minus_wins"] == 1
    assert second["shown_minus"] == 0.5 and second["shown_plus"] == 0.5 and second["shown_any"] == 0.75
    # 4 steps need "-": example shown twice, principle twice, one id not in the saved library
    assert second["level/example"] == 0.5 and second["level/principle"] == 0.5 and second["level/unsaved"] == 0.25
    assert forge["first_minus_win"] == {"0": 2}
    grpo = summary["grpo"]
    assert "shown_any" not in grpo["per_iteration_mean"][2]  # no library in a grpo run
    assert math.isnan(analysis.iteration_figures([step("x", 0, 2, 0, "+", True)], None)["minus_tried"])
    # a library run whose library file was never saved still counts what its prompts showed
    unsaved = analysis.iteration_figures([step("c", 0, 0, 2, "-", True, minus_lesson, ids=(7,))], {})
    assert unsaved["shown_minus"] == 1.0 and unsaved["level/unsaved"] == 1.0
    assert "minus_states" in grpo["per_iteration_mean"][1] and "minus_tried" not in grpo["per_iteration_mean"][1]
    assert grpo["first_minus_win"] == {"0": 2}
    assert "first iteration with a '-' win" in analysis.render(summary)


def test_a_run_without_rollouts_is_a_clear_error(analysis, tmp_path):
    (tmp_path / "forge_seed1" / "rollouts").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="rollouts holds no"):
        analysis.analyze(tmp_path, {"forge"})


MINUS_HERE = {"id": "7", "zone": "golden", "level": "example", "advice": None,
              "text": "At \"Target: 0 Current: 2\", answer with <action>-</action>."}
PLUS_ELSEWHERE = {"id": "8", "zone": "warning", "level": "diagnostic", "advice": None,
                  "text": "At \"Target: 3 Current: 2\", answer with <action>+</action> instead of \"-\", which ended a "
                          "failed attempt (1 step, return -1)."}
HABIT = {"id": "3", "zone": "warning", "level": "mistake", "advice": None,
         "text": "Answer with one of <action>+</action>, <action>-</action>."}
# the text names "+" at another state; the advice (which the analysis prefers) names "-" at "Target: 1 Current: 2"
ADVISED = {"id": "9", "zone": "golden", "level": "example",
           "text": "At \"Target: 0 Current: 2\", answer with <action>+</action>.",
           "advice": {"state": "Target: 1\nCurrent: 2", "do": ["-"], "avoid": ["+"], "expert": "-"}}


def val_step(traj, turn, target, current, action, success, shown=(), valid=True):
    line = step(traj, turn, target, current, action, success, ids=[e["id"] for e in shown])
    return {**line, "valid": valid, "action": action if valid else "", "experiences": list(shown)}


def write_validation(root, name, passes):
    for (pass_name, iteration), lines in passes.items():
        folder = root / name / "rollouts" / pass_name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{iteration}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_validation_per_held_out_state_matches_a_hand_count(analysis, tmp_path):
    for seed in (0, 1):
        write_run(tmp_path, f"forge_seed{seed}", {1: [step("t", 0, 0, 2, "-", True)]})
    write_run(tmp_path, "grpo_seed0", {1: [step("x", 0, 2, 0, "+", True)]})
    write_validation(tmp_path, "forge_seed0", {
        ("val", 4): [val_step("a", 0, 0, 2, "-", True, (MINUS_HERE, HABIT)), val_step("a", 1, 0, 1, "-", True, (HABIT,)),
                     val_step("b", 0, 0, 2, "+", False, (MINUS_HERE, PLUS_ELSEWHERE)),
                     val_step("b", 1, 0, 3, "?", False, valid=False),
                     val_step("c", 0, 1, 2, "-", True, (ADVISED,))],
        ("val_no_library", 4): [val_step("a", 0, 0, 2, "+", False), val_step("a", 1, 0, 3, "+", False),
                                val_step("b", 0, 0, 2, "-", True), val_step("b", 1, 0, 1, "-", True)],
        ("val", 2): [val_step("z", 0, 0, 2, "+", False)],
    })
    write_validation(tmp_path, "forge_seed1", {
        ("val", 4): [val_step("d", 0, 0, 2, "-", True, (MINUS_HERE,))],
        ("val_no_library", 4): [val_step("e", 0, 0, 2, "x", False, valid=False)],
    })

    summary = analysis.analyze(tmp_path, {"forge"})
    assert "validation" not in summary["grpo"]  # no validation dumps in that run
    validation = summary["forge"]["validation"]
    assert list(validation) == [2, 4]
    states = validation[4]
    here = states["Target: 0\nCurrent: 2"]  # steps a0, b0 (seed 0) and d0 (seed 1); without: a0, b0, e0
    assert here["needs_minus"] is True
    assert here["val"] == {"steps": 3, "success": pytest.approx(2 / 3), "answered": {"+": 1, "-": 2},
                           "shown_steps": 3, "levels": {"diagnostic": 1, "example": 3, "mistake": 1},
                           "named": {"-": 3}, "told_steps": 3, "followed": pytest.approx(2 / 3)}
    assert here["val_no_library"] == {"steps": 3, "success": pytest.approx(1 / 3),
                                      "answered": {"(invalid)": 1, "+": 1, "-": 1}, "shown_steps": 0, "levels": {},
                                      "named": {}, "told_steps": 0, "followed": None}
    advised = states["Target: 1\nCurrent: 2"]
    assert "val_no_library" not in advised  # that pass never reached the state
    assert advised["val"]["named"] == {"-": 1} and advised["val"]["followed"] == 1.0
    one = states["Target: 0\nCurrent: 1"]["val"]  # shown the habit only: it names no action for the state
    assert one["shown_steps"] == 1 and one["levels"] == {"mistake": 1} and one["told_steps"] == 0
    assert one["followed"] is None
    assert states["Target: 0\nCurrent: 3"]["val"]["answered"] == {"(invalid)": 1}
    assert validation[2]["Target: 0\nCurrent: 2"]["val"]["steps"] == 1

    text = analysis.render(summary)
    assert "forge: validation at iteration 4" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("Target: 0 Current: 2 ")
               and "0.667" in line)
    assert "0.333" in row and "example:3" in row and "-:3" in row


@pytest.mark.parametrize("text, state, expected", [
    ("At \"Target: 0 Current: 2\", answer with one of <action>+</action>, <action>-</action> instead.",
     "Target: 0\nCurrent: 2", ["+", "-"]),
    ("At \"Target: 0 Current: 2\", do not answer with the action \"+\": it ended a failed attempt.",
     "Target: 0\nCurrent: 2", []),
    ("Do not repeat \"+\": it made no progress; at \"Target: 0 Cur...\", answer with <action>-</action> instead.",
     "Target: 0\nCurrent: 2", ["-"]),  # a quote cut short matches the state it starts
    ("At \"Target: 3 Current: 2\", answer with <action>+</action>.", "Target: 0\nCurrent: 2", []),
])
def test_the_action_a_lesson_names_for_a_state(analysis, text, state, expected):
    assert analysis.named_actions({"text": text, "advice": None}, state) == expected
    assert analysis.named_actions(ADVISED, "Target: 0\nCurrent: 2") == []  # advice, where present, decides
