"""Trainer checkpoints under attack: replaced files never run code, a resume never starts over while checkpoints
exist, a kill mid-save leaves only complete checkpoints, metrics survive torn lines and resumes (issue 14)."""

from __future__ import annotations

import json
import os
import pickle
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from recipe.forge.runs.durable import CheckpointError
from recipe.forge.runs.checkpoint import (
    LATEST, capture_rng, checkpoint_to_resume, latest_checkpoint, load_checkpoint, save_checkpoint,
)
from recipe.forge.runs.tracking import MetricsTracker, read_metrics

REPO = Path(__file__).resolve().parents[2]


class RunsCode:
    """Unpickling this runs ``touch <marker>``: what a replaced checkpoint file could do on resume."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _parts(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, betas=(0.8, 0.9))
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    critic = torch.nn.Linear(3, 1)
    critic_optimizer = torch.optim.AdamW(critic.parameters(), lr=0.01)
    rngs = {"sampler": torch.Generator().manual_seed(seed), "shuffle": np.random.default_rng(seed)}
    return model, optimizer, critic, critic_optimizer, rngs


def _save(out: Path, iteration: int, seed: int = 0) -> Path:
    _, optimizer, critic, critic_optimizer, rngs = _parts(seed)
    return save_checkpoint(out, iteration, optimizer=optimizer, rng=rngs, critic=critic,
                           critic_optimizer=critic_optimizer)


def _load(path: Path):
    _, optimizer, critic, critic_optimizer, rngs = _parts(seed=1)
    state = load_checkpoint(path, optimizer=optimizer, rng=rngs, critic=critic, critic_optimizer=critic_optimizer)
    return state, optimizer, critic, rngs


@pytest.mark.parametrize("name", ["optimizer.pt", "critic.pt"])
def test_a_replaced_tensor_file_is_refused_and_runs_no_code(tmp_path, name):
    path = _save(tmp_path, 1)
    marker = tmp_path / "pwned"
    (path / name).write_bytes(pickle.dumps({"state": RunsCode(marker)}))
    with pytest.raises(CheckpointError, match=f"{name} cannot be read as plain tensors"):
        _load(path)
    assert not marker.exists()
    # the attack is real: the same bytes run the command when unpickled without the guard
    pickle.loads((path / name).read_bytes())
    assert marker.exists()


def test_rng_state_is_json_and_a_pickled_rng_file_is_never_read(tmp_path):
    path = _save(tmp_path, 1)
    json.loads((path / "rng.json").read_text())  # plain JSON, nothing to unpickle
    marker = tmp_path / "pwned"
    (path / "rng.json").unlink()
    (path / "rng.pt").write_bytes(pickle.dumps(RunsCode(marker)))  # an old-style file, planted
    with pytest.raises(CheckpointError, match="rng.json is missing .*pickled files are not loaded"):
        _load(path)
    assert not marker.exists()


def test_rng_round_trip_is_exact_and_a_bad_state_changes_nothing(tmp_path):
    generators = {"sampler": torch.Generator().manual_seed(3), "shuffle": np.random.default_rng(4)}
    random.seed(5)
    np.random.seed(6)
    torch.manual_seed(7)
    path = save_checkpoint(tmp_path, 2, rng=generators)
    expected = (random.random(), np.random.rand(), torch.rand(1).item(),
                torch.rand(1, generator=generators["sampler"]).item(), generators["shuffle"].random())
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    fresh = {"sampler": torch.Generator().manual_seed(0), "shuffle": np.random.default_rng(0)}
    assert load_checkpoint(path, rng=fresh)["iteration"] == 2
    assert (random.random(), np.random.rand(), torch.rand(1).item(), torch.rand(1, generator=fresh["sampler"]).item(),
            fresh["shuffle"].random()) == expected

    state = json.loads((path / "rng.json").read_text())
    state["python"]["internal"] = state["python"]["internal"][:10]
    (path / "rng.json").write_text(json.dumps(state))
    before = random.getstate()
    with pytest.raises(CheckpointError, match="python.internal must be a list of 625 integers"):
        load_checkpoint(path, rng=fresh)
    assert random.getstate() == before


def test_optimizer_and_critic_state_resume_exactly(tmp_path):
    path = _save(tmp_path, 1, seed=0)
    _, want_optimizer, want_critic, _, _ = _parts(seed=0)
    _, optimizer, critic, _ = _load(path)
    assert optimizer.param_groups[0]["betas"] == (0.8, 0.9)
    for a, b in zip(critic.parameters(), want_critic.parameters()):
        assert torch.equal(a, b)
    got, want = optimizer.state_dict()["state"], want_optimizer.state_dict()["state"]
    assert all(torch.equal(got[k]["exp_avg"], want[k]["exp_avg"]) for k in want)


def test_auto_resume_takes_the_newest_complete_checkpoint(tmp_path):
    for k in (1, 2, 3):
        _save(tmp_path, k)
    # a kill while re-saving step 3 (the old layout deleted it first): the marker names a folder without state
    (tmp_path / "global_step_3" / "trainer_state.json").unlink()
    with pytest.warns(UserWarning, match="names iteration 3, which is not a complete checkpoint; resuming from the "
                                         "newest complete one, global_step_2"):
        assert latest_checkpoint(tmp_path) == tmp_path / "global_step_2"
    (tmp_path / LATEST).write_text("")  # an empty marker is not a bare ValueError
    with pytest.warns(UserWarning, match="not an iteration number"):
        assert checkpoint_to_resume(tmp_path, "auto", None) == tmp_path / "global_step_2"


def test_auto_resume_never_starts_over_while_checkpoint_folders_exist(tmp_path):
    assert checkpoint_to_resume(tmp_path, "auto", None) is None  # a new run
    _save(tmp_path, 1)
    (tmp_path / "global_step_1" / "trainer_state.json").unlink()
    with pytest.raises(CheckpointError, match="no complete checkpoint .* refusing to start over"):
        checkpoint_to_resume(tmp_path, "auto", None)


def test_resave_replaces_a_step_atomically_and_the_marker_is_written_atomically(tmp_path):
    _save(tmp_path, 1, seed=0)
    _save(tmp_path, 1, seed=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global_step_1", LATEST]  # no temporaries left
    assert (tmp_path / LATEST).read_text() == "1"


SAVER = textwrap.dedent("""
    import sys, torch, numpy as np
    from recipe.forge.runs.checkpoint import save_checkpoint
    out = sys.argv[1]
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 64)).sum().backward(); optimizer.step()
    rngs = {"sampler": torch.Generator().manual_seed(0), "shuffle": np.random.default_rng(0)}
    k = 0
    print("ready", flush=True)
    while True:
        k += 1
        save_checkpoint(out, k % 3 + 1, optimizer=optimizer, rng=rngs)  # re-saves steps, as a rerun would
""")


def test_kills_mid_save_leave_only_complete_checkpoints(tmp_path):
    rng = random.Random(0)
    for attempt in range(4):
        proc = subprocess.Popen([sys.executable, "-c", SAVER, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                                cwd=REPO)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        path = latest_checkpoint(tmp_path)
        assert path is not None
        _, optimizer, _, _, rngs = _parts()
        torch.manual_seed(0)
        model = torch.nn.Linear(64, 64)
        optimizer = torch.optim.AdamW(model.parameters())
        state = load_checkpoint(path, optimizer=optimizer, rng=rngs)
        assert state["iteration"] in (1, 2, 3)
        for folder in tmp_path.glob("global_step_*"):
            assert (folder / "trainer_state.json").is_file()


def test_a_torn_last_metrics_line_is_dropped_with_a_warning(tmp_path):
    tracker = MetricsTracker(tmp_path, [], "p", "e")
    for it in (1, 2):
        tracker.log(it, {"x": it})
    tracker.close()
    with (tmp_path / "metrics.jsonl").open("a") as handle:
        handle.write('{"iteration": 3, "x": 3.')  # a kill mid-append
    with pytest.warns(UserWarning, match=r"metrics.jsonl:3 is not a complete JSON record"):
        resumed = MetricsTracker(tmp_path, [], "p", "e", resume_after=2)
    resumed.log(3, {"x": 30})
    resumed.close()
    assert [(r["iteration"], r["x"]) for r in read_metrics(tmp_path / "metrics.jsonl")] == [(1, 1), (2, 2), (3, 30)]


def test_resume_after_a_kill_between_logging_and_saving_shows_each_tensorboard_step_once(tmp_path):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    first = MetricsTracker(tmp_path, ["tensorboard"], "p", "e")
    for it in (1, 2, 3):  # iteration 3 was logged, then the run was killed before its checkpoint
        first.log(it, {"loss": float(it)})
    first.close()
    time.sleep(1.1)  # TensorBoard orders event files by the second in their name
    resumed = MetricsTracker(tmp_path, ["tensorboard"], "p", "e", resume_after=2)
    resumed.log(3, {"loss": 30.0})
    resumed.close()
    events = event_accumulator.EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(1, 1.0), (2, 2.0), (3, 30.0)]


def test_a_fresh_start_after_a_kill_before_the_first_checkpoint_shows_each_step_once(tmp_path):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    first = MetricsTracker(tmp_path, ["tensorboard"], "p", "e")
    first.log(1, {"loss": 1.0})  # logged, then killed before any checkpoint: the rerun starts at iteration 0
    first.close()
    time.sleep(1.1)
    again = MetricsTracker(tmp_path, ["tensorboard"], "p", "e")
    again.log(1, {"loss": 10.0})
    again.close()
    events = event_accumulator.EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(1, 10.0)]


def test_rng_capture_is_plain_json():
    state = capture_rng({"sampler": torch.Generator().manual_seed(0), "shuffle": np.random.default_rng(0)})
    assert json.loads(json.dumps(state)) == state


def test_the_verl_engine_is_refused_a_fresh_start_over_existing_checkpoints(tmp_path):
    """verl's own resume starts over when its marker is missing or names a missing folder."""
    from recipe.forge.runs.checkpoint import refuse_fresh_start

    refuse_fresh_start(tmp_path)  # a new run
    (tmp_path / "global_step_2").mkdir()
    (tmp_path / LATEST).write_text("2")
    refuse_fresh_start(tmp_path)  # verl resumes global_step_2
    (tmp_path / LATEST).write_text("3")
    with pytest.raises(CheckpointError, match=r"holds \['global_step_2'\] but .* does not name one of them"):
        refuse_fresh_start(tmp_path)
    (tmp_path / LATEST).unlink()
    with pytest.raises(CheckpointError, match="refusing to start over"):
        refuse_fresh_start(tmp_path)
