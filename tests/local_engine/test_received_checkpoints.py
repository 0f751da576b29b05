"""A received checkpoint or run folder on ``slea-rl eval``, ``slea-rl export`` and a resume (issue 35): no file of it
runs code, its records supply no endpoint, credential or environment value, and a refused command's record is
never taken for the run's config."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from recipe.forge.hf.tiny import save_tiny_model_dir
from recipe.forge.commands.eval.evaluate import main as eval_main
from recipe.forge.commands.export import main as export
from recipe.forge.testing.received import alias_bomb, plant_code, write_record, write_verl_checkpoint

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model")


def one_line(err: str) -> bool:
    return err.count("\n") == 1 and "Traceback" not in err


# no code from any checkpoint file -----------------------------------------------------------------------------------

def test_a_verl_shard_holding_code_is_refused_by_export_and_eval_naming_it(tmp_path, tiny_model, capsys):
    """verl's model merger unpickles the shards: before the fix the planted pickle ran in both commands."""
    checkpoint = write_verl_checkpoint(tmp_path / "run" / "global_step_1", tiny_model)
    shard = checkpoint / "actor" / "model_world_size_1_rank_0.pt"
    marker = tmp_path / "code_ran"
    plant_code(shard, marker)
    capsys.readouterr()  # what building it printed
    assert export([str(checkpoint), "--out", str(tmp_path / "export")]) == 2
    err = capsys.readouterr().err
    assert one_line(err) and str(shard) in err and "posix.system" in err, err
    assert eval_main([str(checkpoint), "--tasks", "1", "--samples", "1", "--no-progress",
                      "--out", str(tmp_path / "eval")]) == 2
    err = capsys.readouterr().err  # a note on the run config, then the one error line
    assert "Traceback" not in err and str(shard) in err.splitlines()[-1], err
    assert not marker.exists() and not (tmp_path / "export").exists()


def test_a_shard_that_passes_the_check_still_loads_restricted(tmp_path, tiny_model):
    """The check reads the pickle; the merger's own loads are restricted too (whatever its weights_only says)."""
    from recipe.forge.runs.torch_files import weights_only_loads

    marker = tmp_path / "code_ran"
    plant_code(tmp_path / "planted.pt", marker)
    before = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD")  # set where an earlier in-process command forced it
    with weights_only_loads(), pytest.raises(Exception, match="Weights only load failed"):
        torch.load(tmp_path / "planted.pt", weights_only=False)
    assert not marker.exists()
    assert os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD") == before  # the block restores the environment


def test_the_verl_engines_processes_read_a_resumed_checkpoint_without_running_code(tmp_path, compose_cfg,
                                                                                    run_overrides):
    """verl's checkpoint manager and trainer load a resume's shards, optimizer, RNG state and data.pt with
    torch.load(weights_only=False). Every Ray process of a run gets the run's runtime_env and imports verl (our
    plug-in): there a planted file is refused and verl's own RNG state (numpy inside) still loads."""
    from recipe.forge.engines.verl.main import prepare_verl_config
    from recipe.forge.main_forge import validate

    cfg = prepare_verl_config(validate(compose_cfg(run_overrides(tmp_path / "run") + [
        "trainer.engine=verl", "trainer.device=cpu"])))
    env_vars = dict(cfg.ray_kwargs.ray_init.runtime_env.env_vars)
    marker = tmp_path / "code_ran"
    plant_code(tmp_path / "extra_state_world_size_1_rank_0.pt", marker)
    torch.save({"lr_scheduler": {"last_epoch": 3}, "rng": {"cpu": torch.get_rng_state(), "numpy": np.random.get_state(),
                                                           "random": random.getstate()}}, tmp_path / "verl_rng.pt")
    probe = ("import sys, torch, verl\n"
             "state = torch.load(sys.argv[2], weights_only=False)\n"
             "assert state['rng']['numpy'][0] == 'MT19937'\n"
             "try:\n"
             "    torch.load(sys.argv[1], weights_only=False)\n"
             "except Exception as exc:\n"
             "    print('refused', type(exc).__name__)\n")
    proc = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "extra_state_world_size_1_rank_0.pt"),
                           str(tmp_path / "verl_rng.pt")], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **env_vars}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "refused UnpicklingError" and not marker.exists()


# records never supply endpoints, credentials, interpolations or code -------------------------------------------------

SECRET = "s3cr3t-value-of-the-victim"


@pytest.fixture
def stubs():
    """Two chat endpoints: the user's (``mine``) and the one a received record names (``theirs``)."""
    from agent_system.testing.chat_stub import ChatStub
    from agent_system.testing.threaded_server import ThreadedServer

    mine, theirs = ChatStub(lambda: "ok"), ChatStub(lambda: "ok")
    with ThreadedServer(mine) as a, ThreadedServer(theirs) as b:
        yield {"mine": (mine, f"{a.base_url}/v1"), "theirs": (theirs, f"{b.base_url}/v1")}


def api_overrides(out: Path, url: str, run_overrides) -> list[str]:
    return run_overrides(out) + ["trainer.engine=api", f"trainer.api.base_url={url}", "trainer.api.model=stub",
                                 "trainer.save_freq=1", "trainer.api.timeout_s=60"]


def test_eval_of_a_received_run_never_takes_its_endpoint_credential_or_interpolations(
        tmp_path, stubs, run_overrides, compose_cfg, monkeypatch, capsys):
    """Before the fix eval applied the record's trainer.api.base_url and api_key_env: their stub received
    ``Authorization: Bearer <the named variable>``."""
    from recipe.forge.main_forge import run

    mine, my_url = stubs["mine"]
    theirs, their_url = stubs["theirs"]
    out = tmp_path / "run"
    run(compose_cfg(api_overrides(out, my_url, run_overrides)))
    mine.headers.clear()
    monkeypatch.setenv("VICTIM_SECRET", SECRET)
    write_record(out, ["trainer.engine=api", f"trainer.api.base_url={their_url}", "trainer.api.api_key_env=VICTIM_SECRET",
                       "trainer.api.model=${oc.env:VICTIM_SECRET}", "env.max_steps=2",
                       "actor_rollout_ref.model._target_=builtins.print", "hydra.searchpath=[file:///tmp]"])
    capsys.readouterr()
    argv = [str(out / "global_step_1"), "--tasks", "1", "--samples", "1", "--no-progress"]
    assert eval_main(argv) == 2  # the endpoint must be named: a record never supplies it
    err = capsys.readouterr().err
    assert one_line(err) and "trainer.api.base_url" in err and theirs.sent.total() == 0
    assert eval_main(argv + [f"trainer.api.base_url={my_url}"]) == 0
    err = capsys.readouterr().err
    assert theirs.sent.total() == 0 and mine.sent.total() > 0
    assert not any(SECRET in json.dumps(h) for h in mine.headers) and not any(SECRET in json.dumps(b) for b in mine.bodies)
    assert "from the run's Hydra record" in err and "env.max_steps=2" in err
    left_out = next(line for line in err.splitlines() if "left out of that record" in line)
    for key in ("trainer.api.api_key_env", "trainer.api.model", "actor_rollout_ref.model._target_",
                "hydra.searchpath"):
        assert key in left_out
    assert SECRET not in err
    episodes = [json.loads(line) for line in (out / "eval" / "global_step_1" / "episodes.jsonl").read_text().splitlines()]
    assert max(e["length"] for e in episodes) <= 2  # the record's env.max_steps=2 was taken


def test_export_writes_a_records_interpolations_as_written_and_refuses_an_alias_bomb(
        tmp_path, stubs, run_overrides, compose_cfg, monkeypatch, capsys):
    """Before the fix the manifest held the resolved ${oc.env:...} secret, and a record of nested aliases hung
    the export."""
    from recipe.forge.main_forge import run

    _, my_url = stubs["mine"]
    out = tmp_path / "run"
    run(compose_cfg(api_overrides(out, my_url, run_overrides)))
    monkeypatch.setenv("VICTIM_SECRET", SECRET)
    write_record(out, [], config="trainer:\n  api:\n    model: ${oc.env:VICTIM_SECRET}\n    base_url: "
                                 "https://user:pw@example.org/v1\n  wandb_api_key: abc\n")
    assert export([str(out / "global_step_1"), "--out", str(tmp_path / "export")]) == 0
    manifest = (tmp_path / "export" / "manifest.json").read_text()
    assert SECRET not in manifest and "${oc.env:VICTIM_SECRET}" in manifest
    assert "user:pw" not in manifest and '"wandb_api_key": "<redacted>"' in manifest
    assert "from " in capsys.readouterr().out  # says what it took from the record

    write_record(out, [], config=alias_bomb(), name="2026-01-02_00-00-00_000000")
    with pytest.warns(UserWarning, match="anchors or aliases"):
        assert export([str(out / "global_step_1"), "--out", str(tmp_path / "export2")]) == 0
    assert json.loads((tmp_path / "export2" / "manifest.json").read_text())["config"] is None


def test_a_refused_commands_record_is_never_taken_for_the_runs_config(tmp_path, stubs, run_overrides):
    """A command refused on a held folder or for a bad key leaves no record; a run that starts marks its own;
    the readers skip an unmarked record. Before the fix a refused Sokoban command's record was the newest, and
    eval and export read it."""
    from recipe.forge.runs.records import newest_record
    from recipe.forge.testing.run_folders import HOLDER

    _, my_url = stubs["mine"]
    out = tmp_path / "run"
    command = [sys.executable, "-m", "recipe.forge.main_forge", *api_overrides(out, my_url, run_overrides)]
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        refused = subprocess.run(command + ["env.env_name=sokoban"], cwd=REPO, capture_output=True, text=True,
                                 timeout=300)
    finally:
        holder.kill()
        holder.wait()
    assert refused.returncode == 2 and "in use by another run" in refused.stderr
    bad_key = subprocess.run(command + ["env.rollout.n=0"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert bad_key.returncode == 2 and "env.rollout.n" in bad_key.stderr
    assert not (out / "hydra").exists()
    started = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr[-2000:]
    record = newest_record(out)
    assert record is not None and "env.env_name=sokoban" not in (record / "overrides.yaml").read_text()
    write_record(out, ["env.env_name=sokoban"], started=False, name="2099-01-01_00-00-00_000000")
    assert newest_record(out) == record
