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


def _samples():
    """Two episodes of one task group, two steps each; step returns (gamma 1, no penalty) 0.5 / 1.0 and 0 / 0."""
    from recipe.forge.step_samples import StepSamples

    objects = lambda *values: np.array(values, dtype=object)  # noqa: E731
    return StepSamples(uid=objects("a", "a", "a", "a"), traj_uid=objects("t1", "t1", "t2", "t2"),
                       step_index=np.array([0, 1, 0, 1]), step_reward=np.array([-0.5, 1.0, 0.0, 0.0]),
                       is_action_valid=np.ones(4, dtype=bool), anchor_obs=objects("s", "m", "s", "m"),
                       next_anchor_obs=objects("m", None, "m", "m"), cluster_id=objects(3, 4, 3, 4),
                       episode_return=np.array([0.5, 0.5, 0.0, 0.0]), success=np.array([True, True, False, False]))


def _tensors():
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([0.5, 0.5, 0.0, 0.0])
    return rewards, torch.ones(4, 3)


def test_registered_forge_reads_config_and_non_tensor_batch():
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    samples = _samples()
    rewards, mask = _tensors()
    config = ForgeAlgoConfig(gamma=1.0, invalid_action_penalty_coef=0.0,
                             forge=ForgeConfig(step_advantage_w=0.5, mode="mean_std_norm", step_value="return"))
    non_tensor = {name: value for name, value in vars(samples).items() if name != "uid"}
    adv, _ = get_adv_estimator_fn("forge")(rewards, mask, index=samples.uid, config=config, non_tensor_batch=non_tensor)
    expected, _ = compute_forge_advantage(rewards, [0.5, 1.0, 0.0, 0.0], mask, samples.uid, samples.traj_uid,
                                          [3, 4, 3, 4], step_advantage_w=0.5, mode="mean_std_norm")
    assert torch.allclose(adv, expected)


def test_registered_gigpo_reads_keyword_step_data():
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    samples = _samples()
    rewards, mask = _tensors()
    config = ForgeAlgoConfig(gamma=1.0, invalid_action_penalty_coef=0.0, gigpo=GiGPOConfig(step_advantage_w=2.0))
    adv, _ = get_adv_estimator_fn("gigpo")(rewards, mask, index=samples.uid, config=config, step_samples=samples)
    expected, _ = compute_gigpo_advantage(rewards, [0.5, 1.0, 0.0, 0.0], mask, samples.anchor_obs, samples.uid,
                                          samples.traj_uid, step_advantage_w=2.0)
    assert torch.allclose(adv, expected)


def test_registered_estimator_without_step_data_names_what_is_missing():
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    rewards, mask = _tensors()
    with pytest.raises(ValueError, match=r"'gigpo' needs the batch's steps .*missing \['traj_uid'"):
        get_adv_estimator_fn("gigpo")(rewards, mask, index=np.array(["a"] * 4, dtype=object))
