"""Registration through the ``verl.plugins`` entry point, checked in fresh processes started outside the repo
root: a plain ``import verl`` and a Ray worker (where verl runs agent loops and trainers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(300)

REGISTRATIONS = """
import json, verl
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
import recipe.forge
print(json.dumps({
    "estimators": sorted(k for k in ("forge", "gigpo") if k in ADV_ESTIMATOR_REGISTRY),
    "agent_loop": _agent_loop_registry.get("forge_agent"),
    "trainer": TRAINER_REGISTRY["forge"].__module__ + "." + TRAINER_REGISTRY["forge"].__name__
    if "forge" in TRAINER_REGISTRY else None,
    "recipe_file": recipe.forge.__file__,
}))
"""


def run_outside_repo(code: str, tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VERL_USE_EXTERNAL_PLUGINS")}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_verl_registers_everything_in_a_fresh_process(tmp_path):
    from pathlib import Path

    got = run_outside_repo(REGISTRATIONS, tmp_path)
    assert got["estimators"] == ["forge", "gigpo"]
    assert got["agent_loop"] == {"_target_": "recipe.forge.engines.verl.agent_loop.ForgeAgentLoop"}
    assert got["trainer"] == "recipe.forge.engines.verl.trainer.ForgeTrainer"
    repo = Path(__file__).resolve().parents[2]
    assert Path(got["recipe_file"]).resolve() == repo / "recipe" / "forge" / "__init__.py"


LAZY_REGISTRATIONS = """
import json, os, sys, verl
heavy = ("verl.workers.engine", "verl.workers.engine_workers", "verl.workers.rollout", "verl.checkpoint_engine",
         "verl.experimental.agent_loop", "verl.trainer.ppo.v1")
imported_by_import_verl = [name for name in heavy if name in sys.modules]
from verl.workers.engine.base import EngineRegistry
from verl.workers.rollout.base import get_rollout_class
from verl.checkpoint_engine import CheckpointEngineRegistry
from verl.workers import engine_workers
from verl.utils import tensordict_utils
from recipe.forge.engines.verl.cpu.verl_private import fix_3d_position_ids
os.environ["VERL_ENGINE_DEVICE"] = "cpu"  # verl's own override of the device its engine lookup uses
print(json.dumps({
    "imported_by_import_verl": imported_by_import_verl,
    "cpu_engine": EngineRegistry.get_engine_cls("language_model", "fsdp2").__name__,
    "hf_rollout": "{0.__module__}.{0.__qualname__}".format(get_rollout_class("hf", "async")),
    "object_store": CheckpointEngineRegistry.get("object_store").__module__,
    "position_ids_fix": [m.maybe_fix_3d_position_ids is fix_3d_position_ids for m in (engine_workers, tensordict_utils)],
}))
"""


def test_import_verl_leaves_the_heavy_modules_and_registers_into_each_once_imported(tmp_path):
    """A process that only imports verl (most of a run's Ray processes) imports none of the modules the plug-in
    extends; a process that imports one finds forge's entries in it."""
    got = run_outside_repo(LAZY_REGISTRATIONS, tmp_path)
    assert got["imported_by_import_verl"] == []
    assert got["cpu_engine"] == "CpuFSDPEngineWithLMHead", got
    assert got["hf_rollout"] == "recipe.forge.engines.verl.cpu.hf_rollout.HFServerAdapter"
    assert got["object_store"] == "recipe.forge.engines.verl.cpu.object_store_engine"
    assert got["position_ids_fix"] == [True, True]


def test_ray_worker_imports_recipe_and_sees_registrations(tmp_path):
    code = (
        "import json, ray\n"
        "ray.init(num_cpus=1, include_dashboard=False)\n"
        "@ray.remote\n"
        "def probe():\n"
        "    import io, contextlib\n"
        "    out = io.StringIO()\n"
        "    with contextlib.redirect_stdout(out):\n"
        f"        exec({REGISTRATIONS!r}, {{}})\n"
        "    return out.getvalue().strip().splitlines()[-1]\n"
        "print(ray.get(probe.remote()))\n"
        "ray.shutdown()\n"
    )
    got = run_outside_repo(code, tmp_path)
    assert got["estimators"] == ["forge", "gigpo"]
    assert got["agent_loop"]["_target_"].endswith("ForgeAgentLoop")
    assert got["trainer"].endswith("ForgeTrainer")
    assert got["recipe_file"].endswith(os.path.join("recipe", "forge", "__init__.py"))


def test_a_note_verl_logs_per_episode_is_shown_once_per_process(tmp_path):
    """verl warns each time an agent loop (one per episode) picks its token builder for a model type it has no builder
    for; after the plugin, each such note is logged once in a process, a different note still once."""
    code = (
        "import io, json, logging, verl\n"
        "from verl.utils.tokenizer import continuous_token_wiring as wiring\n"
        "stream = io.StringIO()\n"
        "logging.getLogger().addHandler(logging.StreamHandler(stream))\n"
        "for model_type in ('llama', 'llama', 'llama', 'gpt2', 'gpt2'):\n"
        "    wiring.infer_continuous_token_model_family(hf_model_type=model_type)\n"
        "print(json.dumps({'lines': stream.getvalue().splitlines()}))\n"
    )
    lines = run_outside_repo(code, tmp_path)["lines"]
    assert len(lines) == 2 and "'llama'" in lines[0] and "'gpt2'" in lines[1], lines
