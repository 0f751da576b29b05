"""scripts/probe_step_credit.py: the three measures against hand-worked steps, and one small run on NumberLine
where the paper's step part shows the clock and the default's does not."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest


@pytest.fixture(scope="module")
def probe(load_script):
    return load_script("probe_step_credit.py")


def test_measures_by_hand(probe):
    """State s: the expert's action (+1.0, +0.5) beats the other valid one (0.0); state t: the other wins
    (0.2 > -0.2), state u ties. Invalid answers at s: turns 0 and 1 with -1 and -0.6, a perfect correlation of the
    advantage with the turn within that cell (the same action at one state); the valid cells vary with the turn too:
    pooled, the centred products sum to 0.1 + 0.05 + 0.1 = 0.25 over sqrt(0.2 * 1.5 ...)."""
    rows = [  # state, action, kind, turn, advantage
        ("s", "+", "expert", 0, 1.0), ("s", "+", "expert", 2, 0.5), ("s", "-", "other", 1, 0.0),
        ("s", "?", "invalid", 0, -1.0), ("s", "?", "invalid", 1, -0.6),
        ("t", "-", "expert", 0, -0.2), ("t", "+", "other", 0, 0.2),
        ("u", "+", "expert", 0, 0.3), ("u", "-", "other", 0, 0.3),
    ]
    table = pd.DataFrame(rows, columns=["state", "action", "kind", "turn", "advantage"])
    figures, counts = probe.measures(table)
    assert figures["precision"] == 0.5 and (counts["right"], counts["wrong"], counts["ties"]) == (1, 1, 1)
    # format: at s, mean valid (1.0 + 0.5 + 0.0) / 3 = 0.5 minus mean invalid -0.8 = 1.3; the only such state
    assert figures["format_signal"] == pytest.approx(1.3) and counts["format_states"] == 1
    # within-cell centring: (s,+): a = +-0.25, t = -+1; (s,?): a = -+0.2, t = -+0.5; the rest are single steps
    a = np.array([0.25, -0.25, -0.2, 0.2])
    t = np.array([-1.0, 1.0, -0.5, 0.5])
    assert figures["clock_bias"] == pytest.approx(float(a @ t / np.sqrt((a @ a) * (t @ t))))


def test_numberline_the_paper_credits_the_clock_and_the_default_does_not(probe, capsys):
    assert probe.main(["--env", "numberline", "--tasks", "4", "--batches", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["default"] == "next_state_hidden" and report["p"] == 0.5
    numberline = report["environments"]["numberline"]
    assert set(numberline) == set(probe.VARIANTS)
    assert all(set(f) == {"precision", "clock_bias", "format_signal"} for f in numberline.values())
    # an invalid answer keeps NumberLine's state and costs -1: later visits of one state lose less (the clock)
    assert numberline["paper"]["clock_bias"] > 0.1
    assert numberline["next_state"]["clock_bias"] == pytest.approx(0.0, abs=1e-9)
    assert numberline["next_state"]["precision"] == 1.0 and numberline["next_state"]["format_signal"] > 0
    # NumberLine's observation shows its whole state: the environment's states are the observations
    assert numberline["next_state_hidden"] == numberline["next_state"]
