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

from recipe.forge.engines.local.tiny import save_tiny_model_dir
from recipe.forge.evaluate import main as eval_main
from recipe.forge.export import main as export
from recipe.forge.testing.received import plant_code, write_verl_checkpoint

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
    err = capsys.readouterr().err
    assert one_line(err) and str(shard) in err, err
    assert not marker.exists() and not (tmp_path / "export").exists()


def test_a_shard_that_passes_the_check_still_loads_restricted(tmp_path, tiny_model):
    """The check reads the pickle; the merger's own loads are restricted too (whatever its weights_only says)."""
    from recipe.forge.runs.torch_files import weights_only_loads

    marker = tmp_path / "code_ran"
    plant_code(tmp_path / "planted.pt", marker)
    with weights_only_loads(), pytest.raises(Exception, match="Weights only load failed"):
        torch.load(tmp_path / "planted.pt", weights_only=False)
    assert not marker.exists()
    assert "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in os.environ  # the block restores the environment


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
