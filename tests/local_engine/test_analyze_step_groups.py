"""scripts/analyze_step_groups.py on a hand-worked dump: the timing signal in groups of invalid answers."""

from __future__ import annotations

import json

import pytest


def _row(copy: int, turn: int, valid: bool, obs: str = "Target: 0\nCurrent: 1") -> dict:
    return {"traj_uid": f"train1-0-copy{copy}", "turn": turn, "score": -1.0, "valid": valid, "observation": obs,
            "cluster_id": None, "episode_reward": -2.0, "success": False}


def test_invalid_answers_at_one_state_are_ranked_by_turn_and_valid_ones_above_them(load_script, tmp_path):
    script = load_script("analyze_step_groups.py")
    run = tmp_path / "runs" / "forge_seed0" / "rollouts"
    run.mkdir(parents=True)
    # two copies, two turns each, every answer invalid at one state; gamma 0.5, no penalty:
    # returns turn 0: -1 + 0.5 * -1 = -1.5, turn 1: -1; group mean -1.25 -> turn 0: -0.25, turn 1: +0.25
    rows = [_row(c, t, False) for c in (0, 1) for t in (0, 1)]
    (run / "1.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    # an iteration past the format phase (all valid) is not read
    (run / "2.jsonl").write_text(json.dumps(_row(0, 0, True)) + "\n")
    out = tmp_path / "out.json"
    assert script.main(["--runs-dir", str(tmp_path / "runs"), "--gamma", "0.5", "--penalty", "0",
                        "--json", str(out)]) == 0
    result = json.loads(out.read_text())["forge_seed0"]
    assert result["steps"] == 4 and result["mixed_turn_share"] == 1.0 and result["valid_gain"] is None
    assert result["invalid_by_turn"] == {"0": pytest.approx(-0.25), "1": pytest.approx(0.25)}


def test_valid_gain_is_the_valid_answers_mean_advantage_minus_the_invalid_ones(load_script, tmp_path):
    script = load_script("analyze_step_groups.py")
    run = tmp_path / "runs" / "gigpo_seed0" / "rollouts"
    run.mkdir(parents=True)
    # one turn, three copies at one state: one valid (return -1), two invalid with penalty 0.5 (return -1.5);
    # group mean -4/3: valid +1/3, invalid -1/6 each: gain 1/2
    rows = [_row(0, 0, True), _row(1, 0, False), _row(2, 0, False)]
    (run / "1.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    out = tmp_path / "out.json"
    assert script.main(["--runs-dir", str(tmp_path / "runs"), "--penalty", "0.5", "--below", "0.9",
                        "--json", str(out)]) == 0
    result = json.loads(out.read_text())["gigpo_seed0"]
    assert result["valid_gain"] == pytest.approx(0.5) and result["mixed_turn_share"] == 0.0


def test_next_state_values_leave_invalid_answers_at_one_state_flat_in_the_turn(load_script, tmp_path):
    """The first test's dump, each step recording the state it led to (the same one: an invalid answer changes
    nothing): every step is worth -1 + 0.5 V(s), whatever its turn, so the invalid-only group is flat at 0."""
    script = load_script("analyze_step_groups.py")
    run = tmp_path / "runs" / "forge_seed0" / "rollouts"
    run.mkdir(parents=True)
    rows = [{**_row(c, t, False), "next_observation": "Target: 0\nCurrent: 1"} for c in (0, 1) for t in (0, 1)]
    (run / "1.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    out = tmp_path / "out.json"
    assert script.main(["--runs-dir", str(tmp_path / "runs"), "--gamma", "0.5", "--penalty", "0",
                        "--step-value", "next_state", "--json", str(out)]) == 0
    result = json.loads(out.read_text())["forge_seed0"]
    assert result["invalid_by_turn"] == {"0": pytest.approx(0.0), "1": pytest.approx(0.0)}
    old = [{k: v for k, v in r.items() if k != "next_observation"} for r in rows]
    (run / "1.jsonl").write_text("\n".join(map(json.dumps, old)) + "\n")
    with pytest.raises(ValueError, match="before the steps recorded the observation they led to"):
        script.main(["--runs-dir", str(tmp_path / "runs"), "--step-value", "next_state"])
