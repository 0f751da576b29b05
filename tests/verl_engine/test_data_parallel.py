"""Data parallelism does not change the mathematics: one update of verl's actor on the same rows from the same
weights, at world size 1 and 2, gives the same losses, gradient norm and updated policy.

The rows come from verl's own agent-loop manager (AgentLoopManagerTQ, two agent-loop workers, the scripted LLM
client) running the forge agent loop on Sokoban, 2 tasks x 2 copies; their forge advantages are the trainer's
(compute_batch_advantages). Each world is verl's RayWorkerGroup of our CPU actor worker (verl's FSDP2 engine and
PPO loss on gloo) over a RayResourcePool of N processes, called as verl's trainer calls it (the KVBatchMeta
dispatched over the data-parallel ranks): the old-log-prob pass, then ``update_actor`` over one mini-batch of
every row, then a log-prob pass of the updated policy. verl normalises the token-mean loss by the global token
count times dp and FSDP averages the gradients over the ranks (core_algos.agg_loss), and its dp reduction of the
loss metric is the mean over ranks of per-rank sums (Metric.aggregate_dp), so every figure compared here is the
same quantity at both world sizes; what differs is float summation order (gloo all-reduce, two half-batches).

The two agent-loop workers: verl's V1 manager hands each worker a chunk of prompts and runs the G copies of a
prompt in one worker; the rows record their worker (``agent_worker``) and the test checks both things.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

TASKS, G = 2, 2
LOSS_ATOL = 1e-5  # fp32; the two worlds sum the same terms in another order
GRAD_NORM_RTOL = 1e-4
LOGPROB_ATOL = 1e-4


def world(cfg, ranks: int):
    """verl's RayWorkerGroup of ``ranks`` CPU actor workers (verl's FSDP2 engine on gloo), initialised."""
    import ray
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    from recipe.forge.engines.verl.cpu.workers import CpuActorRolloutRefWorker

    pool = RayResourcePool(process_on_nodes=[ranks], use_gpu=False, max_colocate_count=1)
    group = RayWorkerGroup(resource_pool=pool, device_name="cpu",
                           ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(CpuActorRolloutRefWorker),
                                                                  config=cfg.actor_rollout_ref, role="actor"))
    group.init_model()
    return group


def log_probs(group, meta, temperature: float):
    """The actor's log-probs of the rows' response tokens ((bs, R) padded), through the dispatched pass."""
    import transfer_queue as tq
    from verl.workers.utils.padding import response_from_nested

    meta.extra_info.update({"calculate_entropy": False, "compute_loss": False, "temperature": temperature})
    group.compute_log_prob(meta)
    data = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=["log_probs", "response_mask"])
    return response_from_nested(data.pop("log_probs"), data["response_mask"]), data["response_mask"]


def padded(nested):
    from tensordict import TensorDict

    return TensorDict({"m": nested}, batch_size=[nested.size(0)]).to_padded_tensor()["m"]


def update(cfg, meta, advantages, ranks: int) -> dict:
    """One update at world size ``ranks`` as verl's trainer runs it; returns verl's reduced actor/* metrics, the old
    log-probs and the updated policy's log-probs."""
    import ray
    import transfer_queue as tq
    from tensordict import TensorDict
    from verl.utils.metric import reduce_metrics
    from verl.utils.py_functional import rename_dict
    from verl.workers.utils.padding import response_to_nested

    group = world(cfg, ranks)
    try:
        temperature = float(cfg.actor_rollout_ref.rollout.temperature)
        old, mask = log_probs(group, meta, temperature)
        fields = TensorDict({"old_log_probs": old, "ref_log_prob": old, "advantages": response_to_nested(advantages, mask)},
                            batch_size=len(meta))
        tq.kv_batch_put(keys=meta.keys, partition_id=meta.partition_id, fields=fields)
        meta.extra_info.update({"calculate_entropy": False, "distillation_use_topk": False, "distillation_only": False,
                                "global_batch_size": len(meta), "mini_batch_size": len(meta), "epochs": 1, "seed": 0,
                                "dataloader_kwargs": {"shuffle": False}, "temperature": temperature})
        output = group.update_actor(meta)
        metrics = reduce_metrics(rename_dict(output["metrics"], "actor/"))
        new, _ = log_probs(group, meta, temperature)
        return {"metrics": metrics, "old": padded(old), "new": padded(new), "mask": padded(mask).bool()}
    finally:
        for worker in group.workers:
            ray.kill(worker)


@pytest.fixture(scope="module")
def fixed_batch(run_config_factory, tmp_path_factory, verl_rollout):
    """The rows of one rollout (2 agent-loop workers) with their forge advantages, and both worlds' updates."""
    import transfer_queue as tq
    from tensordict import TensorDict
    from transformers import AutoTokenizer
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.utils import create_rl_dataset

    from recipe.forge.hf.tiny import save_tiny_model_dir
    from recipe.forge.engines.verl.cpu.settings import use_cpu_platform_in_this_process
    from recipe.forge.engines.verl.forge_steps import ForgeSteps
    from recipe.forge.engines.verl.main import prepare_verl_config
    from recipe.forge.engines.verl.scripted_client import ScriptedLLMClient
    from recipe.forge.engines.verl.trainer import compute_batch_advantages
    from recipe.forge.run_config import load_run_config

    out = tmp_path_factory.mktemp("data_parallel")
    model_dir = save_tiny_model_dir(out / "tiny")
    cfg = run_config_factory([
        "trainer.engine=verl", "trainer.device=cpu", "algorithm.adv_estimator=forge", "algorithm.gamma=0.9",
        "algorithm.forge.step_value=return",  # turn-dependent step values: a random model still gives advantages
        "algorithm.forge.warmup_iterations=0", "algorithm.forge.min_library_size=0",
        f"algorithm.forge.checkpoint_dir={out / 'library'}", f"actor_rollout_ref.model.path={model_dir}",
        "env.env_name=sokoban", "env.max_steps=2", f"env.rollout.n={G}", f"data.train_batch_size={TASKS}",
        "data.max_prompt_length=2048", "data.max_response_length=32", "actor_rollout_ref.rollout.prompt_length=2048",
        "actor_rollout_ref.rollout.response_length=32", "actor_rollout_ref.rollout.agent.num_workers=2",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={TASKS}", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1", "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.optim.lr=1e-3", "trainer.n_gpus_per_node=2",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        "transfer_queue.backend.SimpleStorage.total_storage_size=10000", f"trainer.default_local_dir={out}",
    ])
    cfg = prepare_verl_config(load_run_config(cfg))
    use_cpu_platform_in_this_process()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # logical CPUs for TransferQueue, the two agent-loop workers and the actor workers' placement bundles
    with verl_rollout.agent_loop_stack(cfg, ScriptedLLMClient(cfg), num_cpus=8, env_vars={"VERL_PLATFORM": "cpu"}) as manager:
        ForgeSteps(cfg).begin_iteration(0)  # the driver publishes its library (version 0) to the workers
        dataset = create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, None, is_train=True)
        meta, _ = verl_rollout.submit_tasks(manager, [dataset[i] for i in range(TASKS)], global_steps=1)
        data = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id,
                               select_fields=["uid", "response_mask", "extra_fields"])
        uid = np.array(data.pop("uid").tolist(), dtype=object)
        extra = [getattr(e, "data", e) for e in data.pop("extra_fields").tolist()]
        mask = TensorDict({"m": data["response_mask"]}, batch_size=len(meta)).to_padded_tensor()["m"]
        real = np.ones(len(meta), dtype=bool)
        advantages = compute_batch_advantages("forge", uid, mask, extra, real, cfg.algorithm)["advantages"]
        even = len(meta) // 2 * 2  # an even batch: the two ranks get equal halves, as verl's padding makes them
        kept = KVBatchMeta(partition_id=meta.partition_id, keys=meta.keys[:even], tags=meta.tags[:even])
        yield {
            "rows": extra,
            "advantages": advantages[:even],
            "one": update(cfg, KVBatchMeta(partition_id=kept.partition_id, keys=list(kept.keys), tags=list(kept.tags)),
                          advantages[:even], ranks=1),
            "two": update(cfg, KVBatchMeta(partition_id=kept.partition_id, keys=list(kept.keys), tags=list(kept.tags)),
                          advantages[:even], ranks=2),
        }


def test_world_size_two_updates_as_world_size_one(fixed_batch):
    one, two = fixed_batch["one"], fixed_batch["two"]
    assert fixed_batch["advantages"].abs().max() > 0, "all advantages zero: the update would compare nothing"
    mask = one["mask"]
    # the same policy's log-probs, computed on one rank and on two
    assert (one["old"] - two["old"])[mask].abs().max() < LOGPROB_ATOL
    m1, m2 = one["metrics"], two["metrics"]
    print({key: (m1[key], m2[key]) for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm")},
          "old |diff|", float((one["old"] - two["old"])[mask].abs().max()),
          "new |diff|", float((one["new"] - two["new"])[mask].abs().max()))  # the figures, with pytest -rP
    assert m1["actor/grad_norm"] > 0
    assert m2["actor/grad_norm"] == pytest.approx(m1["actor/grad_norm"], rel=GRAD_NORM_RTOL)
    for key in ("actor/pg_loss", "actor/kl_loss"):
        assert m2[key] == pytest.approx(m1[key], abs=LOSS_ATOL), key
    # the same update was applied: the updated policies agree, and they moved
    assert (one["new"] - two["new"])[mask].abs().max() < LOGPROB_ATOL
    assert (one["new"] - one["old"])[mask].abs().max() > 100 * LOGPROB_ATOL


def test_two_agent_loop_workers_each_run_whole_task_groups(fixed_batch):
    from recipe.forge.engines.verl.distribution import distribution_metrics

    rows = fixed_batch["rows"]
    metrics = distribution_metrics(rows)
    assert metrics["forge/agent_workers_seen"] == 2  # verl chunked the 2 prompts over the 2 workers
    assert metrics["forge/task_groups_split"] == 0  # and ran the G copies of each in one of them
    assert metrics["forge/library_versions_seen"] == 1 and rows[0]["library_version"] == 0  # both used version 0
    copies = {}
    for row in rows:
        copies.setdefault(row["uid"], set()).add(row["traj_uid"])
    assert len(copies) == TASKS and all(len(c) == G for c in copies.values())
