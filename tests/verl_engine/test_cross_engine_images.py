"""One config, two engines, with images: the tiny random Qwen2.5-VL (tiny_vlm.py) on visual Sokoban (the room as
an image), greedy decoding, the same task seeds and the same library (evolved once beforehand from the embedded
engine's greedy rollout of other seeds, so that steps get experiences), give on both engines in the first iteration
the same prompt tokens (each image's pad tokens included), the same response tokens and the same advantages.

The distributed engine: verl's AgentLoopManagerTQ running our ForgeAgentLoop, whose images go through verl's
processor into the prompt and to the CPU backend's hf rollout server; the embedded engine: the TrajectoryCollector
with its HFGenerator and the model's processor. The helpers are the text comparison's (test_cross_engine.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.verl_engine.test_cross_engine import SEEDS, by_key, by_task_step, local_first_iteration, verl_first_iteration

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

G = 2
OVERRIDES = [
    "env.env_name=sokoban", "env.sokoban.mode=rgb_array", "env.max_steps=2", f"env.rollout.n={G}",
    "env.history_length=0", f"data.train_batch_size={len(SEEDS)}", "data.val_batch_size=1", "trainer.engine=verl",
    "algorithm.adv_estimator=forge", "algorithm.gamma=0.9", "algorithm.forge.warmup_iterations=0",
    "algorithm.forge.min_library_size=0", "algorithm.forge.extractor=rule",
    "actor_rollout_ref.rollout.temperature=0.0", "actor_rollout_ref.rollout.response_length=12",
    "data.max_response_length=12", "data.max_prompt_length=1024", "actor_rollout_ref.rollout.prompt_length=1024",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.agent.num_workers=1", "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    "transfer_queue.backend.SimpleStorage.total_storage_size=10000",
]


@pytest.fixture(scope="module")
def visual_library(run_config_factory, tiny_vlm_dir, tmp_path_factory):
    """The library after one greedy embedded-engine rollout of the tiny VLM on other seeds, and the run's state."""
    from agent_system.environments import make_envs
    from agent_system.multi_turn_rollout.protocols import SamplingParams
    from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
    from recipe.forge.hf.generation import HFGenerator
    from recipe.forge.hf.model_loading import PolicyConfig, build_policy
    from recipe.forge.experience import ExperienceSystem

    out = tmp_path_factory.mktemp("cross_engine_images")
    cfg = run_config_factory([*OVERRIDES, f"actor_rollout_ref.model.path={tiny_vlm_dir}",
                              f"algorithm.forge.checkpoint_dir={out / 'library'}", f"trainer.default_local_dir={out}"])
    policy = build_policy(PolicyConfig(path=str(tiny_vlm_dir), use_reference=False))
    system = ExperienceSystem.from_config(cfg.algorithm.forge, tokenizer=policy.tokenizer)
    envs, _ = make_envs(cfg)
    generator = HFGenerator(policy.model.eval(), policy.tokenizer, processor=policy.processor)
    system.begin_iteration(0)
    warmup = TrajectoryCollector().collect(envs, generator, SamplingParams(temperature=0.0, do_sample=False,
                                                                           max_new_tokens=12), system.provider, seeds=[5, 7])
    system.evolve(warmup.trajectories, 0)
    assert len(system.library) > 0
    system.begin_iteration(1)
    return {"cfg": cfg, "system": system, "model_dir": tiny_vlm_dir, "tokenizer": policy.tokenizer,
            "processor": policy.processor, "out": out}


def test_both_engines_give_the_same_first_iteration_with_images(visual_library, verl_rollout):
    snapshot = visual_library["system"].snapshot()
    cfg = visual_library["cfg"]
    local = local_first_iteration(visual_library, cfg)
    verl = verl_first_iteration(visual_library, snapshot, verl_rollout, cfg)
    assert sorted(local["keys"]) == sorted(verl["keys"]) and len(local["keys"]) > 0
    assert local["experiences"] > 0, "no step was given experiences: the comparison would not cover injection"

    pad = visual_library["processor"].tokenizer.convert_tokens_to_ids(visual_library["processor"].image_token)
    counts = sorted({ids.count(pad) for ids in verl["prompt_ids"]}), sorted({ids.count(pad) for ids in local["prompt_ids"]})
    assert counts[0] == counts[1] and len(counts[0]) == 1 and counts[0][0] > 0, counts  # every prompt holds its room
    for field in ("prompt_ids", "response_ids"):
        assert by_key(local, field) == by_key(verl, field), field
    a, b = by_task_step(local["keys"], local["advantage"]), by_task_step(verl["keys"], verl["advantage"])
    for key in a:
        np.testing.assert_allclose(sorted(a[key]), sorted(b[key]), rtol=1e-5, atol=1e-5, err_msg=str(key))
