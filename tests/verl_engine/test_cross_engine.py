"""One config, two engines: the first iteration's step samples and advantages agree.

The same run config (NumberLine, 2 tasks x 2 copies, forge with the library injected after the observation, as
the main job does), the same task seeds, the
same tiny model and greedy decoding, from the same library version (evolved once beforehand, so that steps get
experiences): the embedded engine's rollout (TrajectoryCollector + HFGenerator) and the distributed engine's
(verl's AgentLoopManagerTQ running our ForgeAgentLoop, generating through the CPU backend's HF rollout server)
must give the same prompt and response tokens, admissible and expert actions per (task, step), the same
observation clusters (equal ids for
clusters the library knew, the same partition for new ones), and the same advantages (the local engine's
``compute_advantages`` against the verl trainer's ``compute_batch_advantages``).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

SEEDS = [11, 23]
G = 2
OVERRIDES = [
    "env.env_name=gym_cards/NumberLine-v0", "env.gym_cards.target_max=3", "env.max_steps=3", f"env.rollout.n={G}",
    "env.history_length=0", f"data.train_batch_size={len(SEEDS)}", "data.val_batch_size=1",
    "trainer.engine=verl", "algorithm.adv_estimator=forge", "algorithm.gamma=0.9",
    "algorithm.forge.warmup_iterations=0",
    "algorithm.forge.min_library_size=0", "algorithm.forge.extractor=rule",
    "algorithm.forge.injection=user_suffix", "algorithm.forge.lesson_style=imperative",  # the main job's choices
    "actor_rollout_ref.rollout.temperature=0", "actor_rollout_ref.rollout.response_length=12",
    "data.max_response_length=12", "data.max_prompt_length=1024", "actor_rollout_ref.rollout.prompt_length=1024",
    "actor_rollout_ref.rollout.agent.num_workers=1", "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    "transfer_queue.backend.SimpleStorage.total_storage_size=10000",
]


def by_task_step(keys, values):
    """{(seed, step): [value, ...]} (the G copies of a task give G values)."""
    table = defaultdict(list)
    for key, value in zip(keys, values):
        table[key].append(value)
    return table


@pytest.fixture(scope="module")
def library_v1(run_config_factory, tmp_path_factory):
    """The library after one sampled local rollout on other seeds (the starting point of both engines)."""
    from agent_system.environments import make_envs
    from agent_system.multi_turn_rollout.protocols import SamplingParams
    from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
    from recipe.forge.engines.local.generation import HFGenerator
    from recipe.forge.engines.local.model_loading import load_tokenizer
    from recipe.forge.engines.local.tiny import answering_llama, save_tiny_model_dir
    from recipe.forge.experience import ExperienceSystem

    out = tmp_path_factory.mktemp("cross_engine")
    model_dir = save_tiny_model_dir(out / "model")
    cfg = run_config_factory([*OVERRIDES, f"actor_rollout_ref.model.path={model_dir}",
                              f"algorithm.forge.checkpoint_dir={out / 'library'}", f"trainer.default_local_dir={out}"])
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    system = ExperienceSystem.from_config(cfg.algorithm.forge, tokenizer=tokenizer)
    envs, _ = make_envs(cfg)
    generator = HFGenerator(answering_llama(tokenizer), tokenizer, generator=torch.Generator().manual_seed(3))
    system.begin_iteration(0)
    warmup = TrajectoryCollector().collect(envs, generator, SamplingParams(max_new_tokens=12), system.provider,
                                           seeds=[5, 7])
    system.evolve(warmup.trajectories, 0)
    assert len(system.library) > 0
    system.begin_iteration(1)
    return {"cfg": cfg, "system": system, "model_dir": model_dir, "tokenizer": tokenizer, "out": out}


def with_prompt_length(cfg, prompt_length: int):
    """``cfg`` with ``prompt_length`` as verl's rollout.prompt_length and data.max_prompt_length."""
    from omegaconf import OmegaConf

    cfg = cfg.copy()
    OmegaConf.update(cfg, "actor_rollout_ref.rollout.prompt_length", prompt_length)
    OmegaConf.update(cfg, "data.max_prompt_length", prompt_length)
    return cfg


def local_first_iteration(state, snapshot, prompt_length: int = 1024):
    from agent_system.environments import make_envs
    from agent_system.multi_turn_rollout.prompt_fit import PromptBudget
    from agent_system.multi_turn_rollout.protocols import SamplingParams
    from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
    from recipe.forge.config_schema import validate_algorithm
    from recipe.forge.engines.local.advantages import compute_advantages
    from recipe.forge.engines.local.batch import build_step_batch
    from recipe.forge.engines.local.generation import HFGenerator
    from recipe.forge.experience import ExperienceSystem
    from transformers import AutoModelForCausalLM

    cfg, tokenizer = with_prompt_length(state["cfg"], prompt_length), state["tokenizer"]
    system = ExperienceSystem.from_snapshot(snapshot, tokenizer)  # the library both engines start from
    system.begin_iteration(1)
    envs, _ = make_envs(cfg)
    model = AutoModelForCausalLM.from_pretrained(state["model_dir"], dtype=torch.float32)
    greedy = SamplingParams(temperature=0.0, do_sample=False, max_new_tokens=12, stop=("</action>",))
    generator = HFGenerator(model, tokenizer)
    collector = TrajectoryCollector(prompt_budget=PromptBudget(prompt_length, generator.prompt_length))  # the trainer's
    rollout = collector.collect(envs, generator, greedy, system.provider, seeds=SEEDS)
    algorithm = validate_algorithm(cfg.algorithm)
    batch = build_step_batch(rollout, tokenizer.pad_token_id, algorithm.gamma, algorithm.invalid_action_penalty_coef)
    advantages, _ = compute_advantages(batch, algorithm)
    keys = [(int(r.uid.rsplit("seed", 1)[1]), r.step) for r in batch.records]
    return {
        "keys": keys,
        "prompt_ids": [list(r.prompt_ids) for r in batch.records],
        "response_ids": [list(r.response_ids) for r in batch.records],
        "cluster_id": [r.cluster_id for r in batch.records],
        "admissible": [tuple(r.admissible_actions) for r in batch.records],
        "expert": [r.expert_action for r in batch.records],
        "advantage": advantages[:, 0].tolist(),
        "experiences": sum(bool(r.experience_ids) for r in batch.records),
        "dropped": [r.experiences_dropped for r in batch.records],
        "bare_length": max(generator.prompt_length(r.plain_messages) for r in batch.records),
        "trajectories": rollout.trajectories,
    }


def verl_first_iteration(state, snapshot, verl_rollout, prompt_length: int = 1024):
    import ray
    import transfer_queue as tq
    from tensordict import TensorDict
    from verl.trainer.ppo.utils import create_rl_dataset

    from recipe.forge.engines.verl.cpu.hf_rollout import HFRolloutServer, server_name
    from recipe.forge.engines.verl.library_channel import get_or_create_broker
    from recipe.forge.engines.verl.main import prepare_verl_config, task_rows
    from recipe.forge.run_config import load_run_config
    from recipe.forge.engines.verl.scripted_client import ServerActorClient
    from recipe.forge.engines.verl.trainer import compute_batch_advantages

    cfg = prepare_verl_config(load_run_config(with_prompt_length(state["cfg"], prompt_length)))
    task_rows(cfg.env.env_name, np.array(SEEDS), "train").to_parquet(cfg.data.train_files)
    tokenizer = state["tokenizer"]
    with verl_rollout.agent_loop_stack(cfg, ServerActorClient(cfg, server_name(0))) as manager:
        server = ray.remote(HFRolloutServer).options(name=server_name(0), num_cpus=0).remote(state["model_dir"], 12)
        ray.get(server.set_global_steps.remote(1))  # loaded; the handle keeps the actor alive
        ray.get(get_or_create_broker().publish.remote("test", 1, 1, snapshot))
        dataset = create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, None, is_train=True)
        rows = [dataset[i] for i in range(len(SEEDS))]
        meta, uids = verl_rollout.submit_tasks(manager, rows, global_steps=1)
        seed_of = {uid: row["extra_info"]["seed"] for uid, row in zip(uids, rows)}
        data = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id,
                               select_fields=["uid", "prompts", "responses", "response_mask", "extra_fields"])
        row_uids = data.pop("uid").tolist()
        extra = [getattr(e, "data", e) for e in data.pop("extra_fields").tolist()]
        mask = TensorDict({"m": data["response_mask"]}, batch_size=len(meta)).to_padded_tensor()["m"]
        real = np.array([not tag.get("is_padding", False) for tag in meta.tags])
        computed = compute_batch_advantages("forge", np.array(row_uids, dtype=object), mask, extra, real, cfg.algorithm)
        prompts = [p.tolist() for p in data["prompts"].unbind()]
        responses = [r.tolist() for r in data["responses"].unbind()]
    keep = np.flatnonzero(real)
    return {
        "keys": [(int(seed_of[row_uids[i]]), int(extra[i]["step"])) for i in keep],
        "prompt_ids": [prompts[i] for i in keep],  # nested (ragged) rows: no padding to strip
        "response_ids": [responses[i][: int(mask[i].sum())] for i in keep],
        "cluster_id": [extra[i]["cluster_id"] for i in keep],
        "admissible": [tuple(extra[i]["admissible_actions"]) for i in keep],
        "expert": [extra[i]["expert_action"] for i in keep],
        "advantage": [float(computed["advantages"][i, 0]) for i in keep],
        "dropped": [extra[i]["experiences_dropped"] for i in keep],
        "rows": [extra[i] for i in keep],
    }


def evolved_library(system, trajectories) -> list[tuple]:
    """The entries (zone, level, text, score, support, task) of a copy of ``system`` evolved once from
    ``trajectories``, taken in a canonical order (the task's first observation, then the copy's actions; the
    engines name task groups differently), sorted."""
    import copy

    def order(trajectory):
        return trajectory.steps[0].anchor_obs, [step.action for step in trajectory.steps]

    evolved = copy.deepcopy(system)
    evolved.evolve(sorted(copy.deepcopy(trajectories), key=order), 1)  # evolution files the steps' clusters in place
    return sorted((e.zone, e.level, e.text, round(e.score, 9), e.support, e.task)
                  for e in evolved.library.entries.values())


@pytest.fixture(scope="module")
def local_v1(library_v1):
    """The embedded engine's first iteration from the library (the prompt length roomy: nothing is trimmed)."""
    return local_first_iteration(library_v1, library_v1["system"].snapshot())


def test_both_engines_give_the_same_first_iteration(library_v1, local_v1, verl_rollout):
    from agent_system.multi_turn_rollout.protocols import RolloutBatch
    from recipe.forge.engines.local.validation import pass_metrics
    from recipe.forge.engines.verl.row_codec import trajectories_from_rows
    from recipe.forge.experience import ExperienceSystem
    from recipe.forge.experience.system import PROVISIONAL_BASE

    snapshot = library_v1["system"].snapshot()
    local = local_v1
    verl = verl_first_iteration(library_v1, snapshot, verl_rollout)
    assert local["experiences"] > 0, "no step was given experiences: the comparison would not cover injection"
    assert sorted(local["keys"]) == sorted(verl["keys"])

    decode = library_v1["tokenizer"].decode
    for field in ("prompt_ids", "response_ids"):
        a, b = by_task_step(local["keys"], local[field]), by_task_step(verl["keys"], verl[field])
        for key in a:
            assert sorted(a[key]) == sorted(b[key]), (
                f"{field} differ at task seed {key[0]}, step {key[1]}:\nlocal {decode(a[key][0])!r}\nverl  {decode(b[key][0])!r}"
            )
    a, b = by_task_step(local["keys"], local["admissible"]), by_task_step(verl["keys"], verl["admissible"])
    assert {k: sorted(v) for k, v in a.items()} == {k: sorted(v) for k, v in b.items()}
    a, b = by_task_step(local["keys"], local["expert"]), by_task_step(verl["keys"], verl["expert"])
    assert {k: sorted(v) for k, v in a.items()} == {k: sorted(v) for k, v in b.items()}
    assert all(e in ("+", "-") for e in local["expert"])  # NumberLine's expert at every state acted on
    a, b = by_task_step(local["keys"], local["advantage"]), by_task_step(verl["keys"], verl["advantage"])
    for key in a:
        np.testing.assert_allclose(sorted(a[key]), sorted(b[key]), rtol=1e-5, atol=1e-5, err_msg=str(key))

    # clusters: ids the library knew are equal; observations new to it make the same partition on both sides
    pairs = set(zip(local["cluster_id"], verl["cluster_id"]))
    order_local = dict(zip(local["keys"], local["cluster_id"]))
    order_verl = dict(zip(verl["keys"], verl["cluster_id"]))
    mapping = {}
    for key in order_local:
        lid, vid = order_local[key], order_verl[key]
        if vid < PROVISIONAL_BASE:
            assert lid == vid, f"known cluster differs at {key}"
        assert mapping.setdefault(lid, vid) == vid, f"cluster partitions differ at {key}"
    assert len(set(mapping.values())) == len(mapping) and pairs

    # evolution: the embedded trainer evolves from its trajectories, verl's driver from the rows decoded by the row
    # codec; from the same library they must make the same library (entries compared by content, not id)
    local_library = evolved_library(library_v1["system"], local["trajectories"])
    verl_library = evolved_library(library_v1["system"], trajectories_from_rows(verl["rows"]))
    assert local_library == verl_library and len(local_library) > len(library_v1["system"].library)

    # validation figures: both engines report a pass with validation.pass_metrics from its steps (the embedded
    # engine from the collector's batch, verl's driver from the rows): the same steps give the same figures
    view = ExperienceSystem.from_snapshot(snapshot, library_v1["tokenizer"])
    figures = {name: pass_metrics("val", RolloutBatch([s for t in trajs for s in t.steps], trajs), view)
               for name, trajs in (("local", local["trajectories"]), ("verl", trajectories_from_rows(verl["rows"])))}
    assert figures["local"] == pytest.approx(figures["verl"])
    assert figures["local"]["val/num_trajectories"] == len(SEEDS) * G and "val/forge/lessons_checkable" in figures["local"]


def test_both_engines_fit_long_prompts_by_one_rule(library_v1, local_v1, verl_rollout):
    """rollout.prompt_length set to the longest prompt without experiences: the steps with experiences drop
    entries to fit, on both engines alike (the same prompt tokens, the same entries dropped), and no prompt is
    left-truncated by verl."""
    snapshot = library_v1["system"].snapshot()
    limit = local_v1["bare_length"]  # the longest prompt without experiences
    local = local_first_iteration(library_v1, snapshot, prompt_length=limit)
    verl = verl_first_iteration(library_v1, snapshot, verl_rollout, prompt_length=limit)
    assert sum(local["dropped"]) > 0, "no step had to drop an entry: the limit does not exercise the rule"
    assert sorted(local["keys"]) == sorted(verl["keys"])
    for field in ("prompt_ids", "dropped"):
        a, b = by_task_step(local["keys"], local[field]), by_task_step(verl["keys"], verl[field])
        assert {k: sorted(v) for k, v in a.items()} == {k: sorted(v) for k, v in b.items()}, field
    assert max(len(ids) for ids in verl["prompt_ids"]) <= limit
