"""MetricsTracker: the JSONL file, TensorBoard scalars and W&B (offline mode), including resumes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from recipe.forge.runs.tracking import MetricsTracker


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_jsonl_keeps_finite_numbers_only(tmp_path):
    tracker = MetricsTracker(tmp_path, ["jsonl"], "p", "e")
    tracker.log(1, {"a": 1, "b": 2.5, "nan": math.nan, "inf": math.inf, "text": "x", "flag": True})
    tracker.close()
    assert read_jsonl(tmp_path / "metrics.jsonl") == [{"iteration": 1, "a": 1.0, "b": 2.5, "flag": 1.0}]


def test_new_run_replaces_old_file_and_resume_truncates_later_iterations(tmp_path):
    first = MetricsTracker(tmp_path, [], "p", "e")
    for it in (1, 2, 3):
        first.log(it, {"x": it})
    first.close()
    resumed = MetricsTracker(tmp_path, [], "p", "e", resume_after=2)  # checkpoint after 2: iteration 3 is rerun
    resumed.log(3, {"x": 30})
    resumed.close()
    assert [(r["iteration"], r["x"]) for r in read_jsonl(tmp_path / "metrics.jsonl")] == [(1, 1), (2, 2), (3, 30)]
    fresh = MetricsTracker(tmp_path, [], "p", "e")  # not a resume: start over
    fresh.close()
    assert not (tmp_path / "metrics.jsonl").exists()


def test_console_prints_the_headline_metrics(tmp_path, capsys):
    tracker = MetricsTracker(tmp_path, ["console"], "p", "e")
    tracker.log(4, {"success_rate": 0.5, "not_shown": 1.0})
    assert capsys.readouterr().out.strip() == "[iter 4] success_rate=0.5"


def test_tensorboard_scalars_are_readable(tmp_path):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    tracker = MetricsTracker(tmp_path, ["tensorboard"], "p", "e")
    tracker.log(1, {"success_rate": 0.25})
    tracker.log(2, {"success_rate": 0.75})
    tracker.close()
    events = event_accumulator.EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("success_rate")] == [(1, 0.25), (2, 0.75)]


@pytest.mark.timeout(120)
def test_wandb_offline_run_is_continued_on_resume(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wandb_dir").mkdir()
    first = MetricsTracker(tmp_path / "out", ["wandb"], "proj", "exp", config={"lr": 1e-5})
    run_id = first.wandb.id
    first_log = Path(first.wandb.dir).parent / f"run-{run_id}.wandb"  # a resume in a later second gets its own folder
    first.log(1, {"success_rate": 0.25})
    first.log(2, {"success_rate": 0.75})  # W&B commits a step's row when the next step starts
    assert first.wandb.summary["success_rate"] == 0.25
    assert first.wandb.summary["_step"] == 1
    assert first.wandb.config["lr"] == 1e-5
    first.close()
    assert (tmp_path / "out" / "wandb_run_id").read_text().strip() == run_id

    resumed = MetricsTracker(tmp_path / "out", ["wandb"], "proj", "exp", resume_after=1)
    assert resumed.wandb.id == run_id
    resumed.close()
    fresh = MetricsTracker(tmp_path / "out", ["wandb"], "proj", "exp")
    assert fresh.wandb.id != run_id
    fresh.close()
    offline_runs = list((tmp_path / "wandb_dir" / "wandb").glob("offline-run-*"))
    assert {p.name.rsplit("-", 1)[-1] for p in offline_runs} == {run_id, fresh.wandb.id}
    assert b"success_rate" in first_log.read_bytes()  # the history reached the file `wandb sync` uploads
    assert wandb.run is None
