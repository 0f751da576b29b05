"""The verl plugin registers forge and gigpo in any fresh process; the registered functions read their
settings from the typed algorithm config and their step data from keyword arguments or the non-tensor batch."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from recipe.forge.config_schema import ForgeAlgoConfig, ForgeConfig, GiGPOConfig
from recipe.forge.core_forge import compute_forge_advantage, compute_gigpo_advantage


def test_import_verl_registers_estimators_in_fresh_process(tmp_path):
    code = (
        "import verl\n"
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
        "print(get_adv_estimator_fn('forge').__module__, get_adv_estimator_fn('gigpo').__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["recipe.forge.estimator_registry", "recipe.forge.estimator_registry"]


def test_recipe_imports_outside_repo_root(tmp_path):
    code = "import recipe, recipe.forge, agent_system; print(recipe.__file__ is not None)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "True"  # a regular package, not TransferQueue's namespace folder


def _batch():
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([1.0, 1.0, 0.0, 0.0])
    mask = torch.ones(4, 3)
    return dict(
        token_level_rewards=rewards,
        response_mask=mask,
        index=np.array(["a", "a", "a", "a"], dtype=object),
        traj=np.array(["t1", "t1", "t2", "t2"], dtype=object),
        returns=np.array([0.5, 1.0, 0.0, 0.0]),
        anchors=np.array(["s", "m", "s", "m"], dtype=object),
    )


def test_registered_forge_reads_config_and_non_tensor_batch():
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    b = _batch()
    config = ForgeAlgoConfig(forge=ForgeConfig(step_advantage_w=0.5, mode="mean_std_norm"))
    non_tensor = {"traj_uid": b["traj"], "step_rewards": b["returns"], "cluster_id": np.array([3, 4, 3, 4])}
    adv, _ = get_adv_estimator_fn("forge")(
        b["token_level_rewards"], b["response_mask"], index=b["index"], config=config, non_tensor_batch=non_tensor
    )
    expected, _ = compute_forge_advantage(
        b["token_level_rewards"], b["returns"], b["response_mask"], b["index"], b["traj"], [3, 4, 3, 4],
        step_advantage_w=0.5, mode="mean_std_norm",
    )
    assert torch.allclose(adv, expected)


def test_registered_gigpo_reads_keyword_step_data():
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    b = _batch()
    config = ForgeAlgoConfig(gigpo=GiGPOConfig(step_advantage_w=2.0))
    adv, _ = get_adv_estimator_fn("gigpo")(
        b["token_level_rewards"], b["response_mask"], index=b["index"], config=config,
        step_rewards=b["returns"], traj_index=b["traj"], anchor_obs=b["anchors"],
    )
    expected, _ = compute_gigpo_advantage(
        b["token_level_rewards"], b["returns"], b["response_mask"], b["anchors"], b["index"], b["traj"],
        step_advantage_w=2.0,
    )
    assert torch.allclose(adv, expected)


def test_registered_estimator_without_step_data_names_what_is_missing():
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    b = _batch()
    with pytest.raises(ValueError, match=r"needs per-step inputs \['step_rewards', 'traj_index', 'anchor_obs'\]"):
        get_adv_estimator_fn("gigpo")(b["token_level_rewards"], b["response_mask"], index=b["index"])
