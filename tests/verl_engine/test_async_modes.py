"""verl's async trainer modes for SLEA-RL, piece by piece without a training run: the mode key and the trainer
registered for each mode, what run_verl sets and refuses for them, the hf server's partial rollouts, the
object_store checkpoint engine, and the separate_async actor's saved old weights on a CPU.
(tests/verl_engine/test_cpu_end_to_end.py trains in both modes; test_versions_and_ledger.py covers the versions.)"""

from __future__ import annotations

import asyncio

import pytest
import torch
from omegaconf import OmegaConf

from agent_system.config_checks import ConfigError


@pytest.fixture(scope="module")
def plugin():
    import recipe.forge.engines.verl.plugin  # noqa: F401


# ----------------------------------------------------------------------------------------- the mode key
def test_the_mode_is_verls_own_key_and_each_mode_has_a_registered_forge_trainer(run_config_factory, plugin):
    from verl.trainer.ppo.v1 import (PPOTrainerColocateAsync, PPOTrainerSeparateAsync, PPOTrainerSync,
                                     get_trainer_cls)

    from recipe.forge.engines.verl.trainer import ForgeTrainerLogic
    from recipe.forge.run_config import load_run_config

    verl_classes = {"sync": PPOTrainerSync, "colocate_async": PPOTrainerColocateAsync,
                    "separate_async": PPOTrainerSeparateAsync}
    for mode, verl_class in verl_classes.items():
        run = load_run_config(run_config_factory([*SEPARATE, f"trainer.v1.trainer_mode={mode}"]))
        assert run.verl.mode == mode and run.verl.is_async == (mode != "sync")
        trainer = get_trainer_cls(run.verl.registered_mode)  # what verl's TaskRunner picks
        # one SLEA-RL logic over verl's mode class, which reports verl's own mode to verl's branches
        assert trainer.__mro__[1:3] == (ForgeTrainerLogic, verl_class) and trainer.verl_mode == mode
    # a prepared config (the registered name written in) reads back as the same mode
    run = load_run_config(run_config_factory(["trainer.engine=verl", "trainer.v1.trainer_mode=forge_colocate_async"]))
    assert run.verl.mode == "colocate_async"
    with pytest.raises(ConfigError, match="trainer.v1.trainer_mode"):
        load_run_config(run_config_factory(["trainer.engine=verl", "trainer.v1.trainer_mode=fully_async"]))


def test_async_modes_turn_the_rollout_correction_on_and_keep_a_choice_the_run_made(run_config_factory):
    from recipe.forge.engines.verl.async_mode import apply_async_settings

    cfg = run_config_factory(["trainer.engine=verl", "actor_rollout_ref.rollout.calculate_log_probs=false"])
    assert apply_async_settings(cfg, "sync") == [] and cfg.algorithm.rollout_correction.rollout_is is None
    changes = apply_async_settings(cfg, "colocate_async")
    assert cfg.actor_rollout_ref.rollout.calculate_log_probs is True
    assert cfg.algorithm.rollout_correction.rollout_is == "token" and len(changes) == 2
    for chosen in ("algorithm.rollout_correction.rollout_is=sequence", "algorithm.rollout_correction.bypass_mode=true"):
        cfg = run_config_factory(["trainer.engine=verl", chosen])
        before = OmegaConf.to_container(cfg.algorithm.rollout_correction)
        apply_async_settings(cfg, "separate_async")
        assert OmegaConf.to_container(cfg.algorithm.rollout_correction) == before


SEPARATE = ["trainer.engine=verl", "trainer.v1.trainer_mode=separate_async", "actor_rollout_ref.rollout.nnodes=1",
            "actor_rollout_ref.rollout.n_gpus_per_node=1", "data.train_batch_size=4", "trainer.n_gpus_per_node=1",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2", "trainer.v1.separate_async.parameter_sync_step=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2"]


@pytest.mark.parametrize("change, message", [
    ("data.train_batch_size=6", "data.train_batch_size must be their product 4, got 6"),
    ("actor_rollout_ref.rollout.nnodes=0", "actor_rollout_ref.rollout.nnodes to at least 1"),
    ("trainer.device=cuda", "checkpoint_engine.backend=naive only serves colocated servers"),
    ("algorithm.forge.use_distillation=true", "parameter_sync_step=2"),
])
def test_separate_async_is_refused_before_ray_starts_where_it_cannot_run(run_config_factory, tmp_path, change, message):
    from recipe.forge.run_config import load_run_config

    extra = ["algorithm.forge.divergence_type=reverse_kl"] if "distillation" in change else []
    cfg = run_config_factory([*SEPARATE, f"trainer.default_local_dir={tmp_path}", change, *extra])
    with pytest.raises(ConfigError, match=message):
        load_run_config(cfg)


def test_separate_async_on_the_cpu_syncs_through_the_object_store_and_counts_the_rollout_gpus(run_config_factory):
    from recipe.forge.engines.verl.cpu.settings import apply_cpu_settings
    from recipe.forge.run_config import load_run_config

    load_run_config(run_config_factory(SEPARATE))  # valid on a CPU: naive is replaced there
    cfg = run_config_factory([*SEPARATE, "trainer.n_gpus_per_node=2"])
    changes = apply_cpu_settings(cfg)
    assert cfg.actor_rollout_ref.rollout.checkpoint_engine.backend == "object_store"
    assert any("checkpoint_engine.backend: 'naive' -> 'object_store'" in change for change in changes)
    assert cfg.ray_kwargs.ray_init.num_gpus == 2 + 1  # the trainer's two and the standalone rollout's one


# ---------------------------------------------------------------------------------- partial rollouts
@pytest.fixture(scope="module")
def random_model_dir(tmp_path_factory):
    from recipe.forge.hf.tiny import save_tiny_model_dir

    return save_tiny_model_dir(tmp_path_factory.mktemp("random"), taught=False)


LONG = 24  # tokens of the test's responses


@pytest.fixture(scope="module")
def long_prompt(random_model_dir):
    """A prompt whose greedy response under the random model runs the whole LONG tokens (no EOS on the way),
    and that response."""
    from transformers import AutoTokenizer

    from agent_system.multi_turn_rollout.protocols import SamplingParams
    from recipe.forge.engines.verl.cpu.hf_rollout import HFRolloutServer

    tokenizer = AutoTokenizer.from_pretrained(random_model_dir)
    server = HFRolloutServer(random_model_dir, response_length=LONG)
    greedy = SamplingParams(temperature=0, do_sample=False, max_new_tokens=LONG, stop=())
    for text in ("count", "go on", "tell a story", "numbers", "more", "again"):
        prompt = tokenizer(text, add_special_tokens=False).input_ids
        [full] = server.generator.generate_ids([prompt], greedy)
        if len(full.response_ids) == LONG:
            return prompt, full.response_ids
    pytest.fail("no prompt of the list runs LONG tokens under the random model")


def test_the_generator_stops_where_it_is_interrupted_and_says_so(random_model_dir, long_prompt):
    from recipe.forge.hf.generation import HFGenerator
    from recipe.forge.hf.model_loading import PolicyConfig, build_policy
    from agent_system.multi_turn_rollout.protocols import SamplingParams

    policy = build_policy(PolicyConfig(path=random_model_dir, dtype="fp32", use_reference=False))
    generator = HFGenerator(policy.model.eval(), policy.tokenizer)
    prompt, full = long_prompt
    greedy = SamplingParams(temperature=0, do_sample=False, max_new_tokens=LONG, stop=())
    asked = []

    def after_five():
        asked.append(1)
        return len(asked) > 5

    [cut] = generator.generate_ids([prompt], greedy, interrupted=after_five)
    assert cut.interrupted and cut.response_ids == full[:5]  # five decoding steps ran, then it stopped
    [whole] = generator.generate_ids([prompt], greedy, interrupted=lambda: False)
    assert not whole.interrupted and whole.response_ids == full
    [none] = generator.generate_ids([prompt], greedy, interrupted=lambda: True)
    assert none.interrupted and none.response_ids == []


def test_an_aborted_request_resumes_where_it_stopped_and_late_requests_wait_for_the_gate(random_model_dir, long_prompt):
    """verl's partial rollout on the hf server: abort stops the decoding batch after its token and answers with the
    tokens so far ("aborted"); a request that arrives while the gate is closed waits for resume_generation (or,
    with reject_request, is answered at once); resumed from prompt + those tokens (verl's client does so) the
    response ends as the uninterrupted one would."""
    from recipe.forge.engines.verl.cpu.hf_rollout import HFRolloutServer

    server = HFRolloutServer(random_model_dir, response_length=LONG, max_batch_size=1)
    prompt, full = long_prompt
    params = {"temperature": 0, "max_tokens": LONG}

    async def scenario():
        first = asyncio.create_task(server.generate(prompt, params, request_id="a"))
        while server.generator.tokens_generated < 3:  # decoding has begun
            await asyncio.sleep(0.001)
        await server.abort_all_requests()
        partial = await first
        late = asyncio.create_task(server.generate(prompt, params, request_id="b"))
        await asyncio.sleep(0.05)
        waited = not late.done()  # the closed gate holds it
        await server.resume_generation()
        late_output = await late
        resumed = await server.generate(prompt + partial.token_ids,
                                        {**params, "max_tokens": LONG - len(partial.token_ids)}, request_id="a")
        await server.abort_all_requests(reject_request=True)
        rejected = await server.generate(prompt, params, request_id="c")
        await server.resume_generation()
        return partial, waited, late_output, resumed, rejected

    partial, waited, late, resumed, rejected = asyncio.run(scenario())
    assert partial.stop_reason == "aborted" and 3 <= len(partial.token_ids) < LONG
    assert partial.token_ids == full[:len(partial.token_ids)]
    assert waited and late.stop_reason == "completed" and late.token_ids == full
    assert resumed.stop_reason == "completed" and partial.token_ids + resumed.token_ids == full
    assert rejected.stop_reason == "aborted" and rejected.token_ids == []


# ------------------------------------------------------------------------------- separate_async weights
def test_the_object_store_engine_hands_the_actors_weights_to_every_rollout_worker():
    import ray

    from recipe.forge.engines.verl.cpu.object_store_engine import ObjectStoreCheckpointEngine

    weights = {"a.weight": torch.arange(6.0).reshape(2, 3), "b.bias": torch.ones(4)}
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=1, include_dashboard=False)
    try:
        actors = [ObjectStoreCheckpointEngine(is_master=True), ObjectStoreCheckpointEngine(is_master=False)]
        rollouts = [ObjectStoreCheckpointEngine(), ObjectStoreCheckpointEngine()]
        actor_kwargs, rollout_kwargs = ObjectStoreCheckpointEngine.build_topology(
            2, 2, [engine.prepare() for engine in actors + rollouts])
        for group, kwargs in ((actors, actor_kwargs), (rollouts, rollout_kwargs)):
            for i, engine in enumerate(group):
                engine.init_process_group(**{key: values[i] for key, values in kwargs.items()})
        walked = []

        def generator():  # every actor rank walks its weights (an FSDP gather is a collective)
            walked.append(1)
            yield from weights.items()

        async def receive(engine):
            return {name: tensor async for name, tensor in engine.receive_weights(global_steps=3)}

        async def sync():
            results = await asyncio.gather(*[engine.send_weights(generator(), global_steps=3) for engine in actors],
                                           *[receive(engine) for engine in rollouts])
            return results[len(actors):]

        received = asyncio.run(sync())
        for engine in actors + rollouts:
            engine.finalize()
        assert len(walked) == 2
        for got in received:
            assert set(got) == set(weights) and all(torch.equal(got[name], weights[name]) for name in weights)
    finally:
        ray.shutdown()
    with pytest.raises(RuntimeError, match="actor rank 0"):
        ObjectStoreCheckpointEngine.build_topology(1, 1, [{"is_master": False}, {"is_master": False}])


def test_the_saved_old_weights_are_a_copy_on_a_cpu(tmp_path):
    """separate_async's decoupled correction computes a sync's later old log-probs with the weights saved at its
    start. verl saves them with ``tensor.cpu()``, which on a CPU is the parameter itself: after an update the saved
    state has moved with it and restoring it changes nothing. The CPU worker saves a copy (workers.copied)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from verl.utils.fsdp_utils import fsdp2_sharded_load_from_cpu, fsdp2_sharded_save_to_cpu

    from recipe.forge.engines.verl.cpu.workers import copied

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(4, 3))
        fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
        before = [p.full_tensor().clone() for p in model.parameters()]
        aliased, copy = fsdp2_sharded_save_to_cpu(model), copied(fsdp2_sharded_save_to_cpu(model))
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)  # an update
        fsdp2_sharded_load_from_cpu(model, *aliased)
        assert all(torch.equal(p.full_tensor(), b + 1) for p, b in zip(model.parameters(), before))  # verl's: no-op
        fsdp2_sharded_load_from_cpu(model, *copy)
        assert all(torch.equal(p.full_tensor(), b) for p, b in zip(model.parameters(), before))  # restored
    finally:
        dist.destroy_process_group()
