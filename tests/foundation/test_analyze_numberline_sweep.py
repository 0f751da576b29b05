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
