"""scripts/plot_training.py: runs sharing a label are seeds, summarised as mean and min-max band (hand-worked)."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def plotter(load_script):
    return load_script("plot_training.py")


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_seeds_of_one_label_give_mean_and_band_over_common_iterations(plotter, tmp_path):
    a = write(tmp_path / "a.jsonl", [{"iteration": 1, "success_rate": 0.0}, {"iteration": 2, "success_rate": 0.5},
                                     {"iteration": 3, "success_rate": 1.0, "val/success_rate": 0.75}])
    b = write(tmp_path / "b.jsonl", [{"iteration": 1, "success_rate": 0.5}, {"iteration": 2, "success_rate": 0.25},
                                     {"iteration": 3, "success_rate": 0.5, "val/success_rate": 0.25}])
    c = write(tmp_path / "c.jsonl", [{"iteration": 1, "success_rate": 0.25}, {"iteration": 2, "success_rate": 0.0}])
    single = write(tmp_path / "d.jsonl", [{"iteration": 1, "success_rate": 0.125}])
    out = tmp_path / "plot.png"
    summary = plotter.plot([("S", a), ("S", b), ("S", c), ("G", single)], out)
    assert out.stat().st_size > 0
    s = summary["S"]
    # iteration 3 is missing from c: the band covers iterations 1 and 2 only
    assert s["success_rate"] == pytest.approx({1: 0.25, 2: 0.25})
    assert s["success_rate/min"] == {1: 0.0, 2: 0.0} and s["success_rate/max"] == {1: 0.5, 2: 0.5}
    assert "val/success_rate" not in s  # c never validated
    summary = plotter.plot([("S", a), ("S", b)], out)
    assert summary["S"]["val/success_rate"] == {3: 0.5}
    assert summary["S"]["val/success_rate/min"] == {3: 0.25} and summary["S"]["val/success_rate/max"] == {3: 0.75}
    assert summary["S"]["success_rate"] == pytest.approx({1: 0.25, 2: 0.375, 3: 0.75})
    one = plotter.plot([("G", single)], out)["G"]
    assert one == {"success_rate": {1: 0.125}}  # one run: no band keys


def test_validation_without_the_library_is_drawn_beside_the_one_with_it(plotter, tmp_path):
    run = write(tmp_path / "f.jsonl", [{"iteration": 1, "success_rate": 0.25},
                                       {"iteration": 2, "success_rate": 0.5, "val/success_rate": 0.75,
                                        "val_no_library/success_rate": 0.5, "val/valid_action_ratio": 1.0}])
    summary = plotter.plot([("SLEA-RL", run)], tmp_path / "plot.png")["SLEA-RL"]
    assert summary["val/success_rate"] == {2: 0.75} and summary["val_no_library/success_rate"] == {2: 0.5}
    assert summary["val/valid_action_ratio"] == {2: 1.0} and "val_no_library/valid_action_ratio" not in summary

