"""Bad config values (issue 14): each is a ConfigError naming the key, the value and what is allowed, raised by
the checks that run before verl, torch or any model is loaded."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from agent_system.config_checks import ConfigError
from recipe.forge.config_rules import check_config_values
from recipe.forge.run_config import verl_config_searchpath
from recipe.forge.run_config import check_run_config, load_run_config

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = str(REPO / "recipe" / "forge" / "config")
A = "actor_rollout_ref.actor"

FAULTS = [
    ({f"{A}.optim.lr": "abc"}, "optim.lr='abc' must be a number"),
    ({f"{A}.grad_clip": "abc"}, "grad_clip='abc' must be a number"),
    ({"actor_rollout_ref.rollout.top_k": "abc"}, "top_k='abc' must be an integer"),
    ({"actor_rollout_ref.rollout.top_k": -5}, r"top_k=-5 is out of range; allowed \[-1, inf\]"),
    ({f"{A}.optim.betas": [0.9]}, r"betas=\[0.9\] must be two numbers"),
    ({f"{A}.optim.betas": [0.9, 1.5]}, r"betas\[1\]=1.5 is out of range"),
    ({f"{A}.ppo_micro_batch_size_per_gpu": 0}, "ppo_micro_batch_size_per_gpu=0 is out of range"),
    ({"actor_rollout_ref.model.lora_alpha": "abc"}, "lora_alpha='abc' must be a number"),
    ({"algorithm.forge.golden_capacity_per_level": 0},
     "golden_capacity_per_level=0 is smaller than algorithm.forge.top_k_golden=2"),
    ({"trainer.resume_mode": "resume_path"}, "needs trainer.resume_from_path"),
    ({"trainer.resume_mode": "resume_path", "trainer.resume_from_path": "/nowhere/global_step_3"},
     "resume_from_path='/nowhere/global_step_3' does not exist"),
    ({"actor_rollout_ref.model.path": "/nowhere/model"}, "path='/nowhere/model' does not exist"),
    ({"actor_rollout_ref.model.path": "someone/no-such-model-xyz"}, "not in the local Hugging Face cache"),
    ({f"{A}.optim.lr": float("nan")}, "must be a number, not NaN"),
    ({"algorithm.forge.obs_similarity_threshold": "abc"}, "obs_similarity_threshold='abc' must be a number"),
    ({"env.appworld.timeout_s": 0}, "env.appworld.timeout_s=0"),
    ({"algorithm.forge.extractor": "oracle", "env.env_name": "alfworld"},
     "extractor=oracle needs the expert's action on every step, and env.env_name='alfworld' does not record it"),
]


@pytest.fixture(scope="module")
def shipped():
    searchpath = f"hydra.searchpath=[{verl_config_searchpath()}]"  # as main_forge composes: verl not imported
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="forge_trainer", overrides=[searchpath])


def _with(cfg, values: dict):
    cfg = copy.deepcopy(cfg)
    for key, value in values.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    return cfg


@pytest.mark.parametrize("values,message", FAULTS)
def test_each_bad_value_is_named_before_anything_heavy(shipped, values, message):
    cfg = _with(shipped, values)
    with pytest.raises(ConfigError, match=message):
        check_run_config(cfg)


def test_a_resume_path_to_an_incomplete_checkpoint_is_refused(shipped, tmp_path):
    (tmp_path / "global_step_2").mkdir()
    cfg = _with(shipped, {"trainer.resume_mode": "resume_path",
                          "trainer.resume_from_path": str(tmp_path / "global_step_2")})
    with pytest.raises(ConfigError, match="is not a complete checkpoint"):
        check_run_config(cfg)


def test_the_oracle_extractor_passes_on_an_environment_that_records_its_expert(shipped):
    check_config_values(_with(shipped, {"algorithm.forge.extractor": "oracle", "env.env_name": "sokoban"}))


def test_the_shipped_values_pass_and_a_micro_batch_is_read_as_given(shipped):
    check_run_config(shipped)
    run = load_run_config(_with(shipped, {f"{A}.ppo_micro_batch_size_per_gpu": 4}))
    assert run.policy.actor.ppo_micro_batch_size_per_gpu == 4


PROBE = textwrap.dedent("""
    import sys
    from hydra import compose, initialize_config_dir
    from recipe.forge.run_config import verl_config_searchpath
    with initialize_config_dir(config_dir=sys.argv[1], version_base=None):
        cfg = compose("forge_trainer", overrides=[f"hydra.searchpath=[{verl_config_searchpath()}]"])
    from recipe.forge.run_config import check_run_config
    check_run_config(cfg)
    heavy = sorted(m for m in ("torch", "verl", "transformers", "ray") if m in sys.modules)
    print("heavy:", heavy)
""")


def test_composing_and_checking_imports_neither_verl_nor_torch():
    proc = subprocess.run([sys.executable, "-c", PROBE, CONFIG_DIR], capture_output=True, text=True, timeout=120,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "heavy: []"
