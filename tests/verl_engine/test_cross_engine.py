"""One config, two engines: the first iteration's step samples, advantages, update, library and distillation rows
agree.

The same run config (NumberLine, 2 tasks x 4 copies, forge with self-distillation), the same task seeds, the
same tiny model, from the same library version (evolved once beforehand, so that steps get experiences; the
embedded engine rolls out and evolves with its trainer's own experience system, verl with its workers' copies and
its driver's library):

* the distributed engine's rollout (verl's AgentLoopManagerTQ running our ForgeAgentLoop, generating through the
  CPU backend's HF rollout server) samples at temperature 1, so the G copies of a task differ;
* the embedded engine's rollout (TrajectoryCollector) replays those responses: copy j of a task answers with
  the j-th verl trajectory of that task, step by step (:class:`ReplayGenerator`), its prompts encoded by its
  own generator.

They must give the same prompt and response tokens, admissible and expert actions per (task, step), the same
observation clusters (equal ids for clusters the library knew, the same partition for new ones), the same
advantages (the local engine's ``compute_advantages`` against the verl trainer's ``compute_batch_advantages``),
the same policy loss and gradient norm after one update from the same weights (verl's FSDP2 actor against the
embedded engine's PolicyUpdater with the shared prompt prefix, its default), the same library after evolution
(entries, links and outcome counters), the same validation figures (from the same
steps, and from a validation of its own on each engine, with and without the library) and the same
distillation rows (which steps, the student's prompt tokens). The library goes in the system message (the default placement) here and after the
observation (``user_suffix``, the main job's choice) in the prompt-length test, whose prompts are compared too.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

SEEDS = [11, 23]
G = 4  # sampled copies: with 4 per task, some two of them answer differently (near certain)
OVERRIDES = [
    "env.env_name=gym_cards/NumberLine-v0", "env.gym_cards.target_max=3", "env.max_steps=3", f"env.rollout.n={G}",
    "env.history_length=0", f"data.train_batch_size={len(SEEDS)}", "data.val_batch_size=1",
    "trainer.engine=verl", "algorithm.adv_estimator=forge", "algorithm.gamma=0.9",
    "algorithm.forge.warmup_iterations=0",
    "algorithm.forge.min_library_size=0", "algorithm.forge.extractor=rule", "algorithm.forge.lesson_style=imperative",
    "algorithm.forge.use_distillation=true", "algorithm.forge.divergence_type=reverse_kl",
    "actor_rollout_ref.rollout.temperature=1.0", "actor_rollout_ref.rollout.response_length=12",
    "actor_rollout_ref.rollout.val_kwargs.temperature=0.0", "actor_rollout_ref.rollout.val_kwargs.n=2",
    "data.max_response_length=12", "data.max_prompt_length=1024", "actor_rollout_ref.rollout.prompt_length=1024",
    # verl's actor worker cuts a batch into micro-batches that must divide it; its trainer pads the rows to that
    # multiple, this test's rows are as the rollout left them
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.agent.num_workers=1", "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    "transfer_queue.backend.SimpleStorage.total_storage_size=10000",
]


def seed_of(uid: str) -> int:
    """The task seed in a task-group uid (both engines end it with ``seed<N>``)."""
    return int(uid.rsplit("seed", 1)[1])


class ReplayGenerator:
    """The embedded engine's generator, answering with the responses verl's trajectories gave: copy j of task seed
    s answers at each step with the response of the j-th verl trajectory of s (by trajectory uid) at that step.

    The environments active at a call are ``envs.active`` (the collector asks for exactly those, in order); each
    one's step is ``envs.step_count``. Prompts are encoded by the engine's own HFGenerator and responses decoded as
    it decodes them, so the prompt tokens and actions are the embedded engine's own. Log-probs are not replayed
    (zeros): nothing compared here reads them."""

    def __init__(self, envs, hf, trajectories: dict[int, list[list[dict]]]):
        self.envs, self.hf, self.trajectories = envs, hf, trajectories
        self.prompt_length = hf.prompt_length

    def generate(self, messages, sampling):
        from agent_system.multi_turn_rollout.protocols import GenerationOutput

        active = np.flatnonzero(self.envs.active)
        assert len(active) == len(messages)
        outputs = []
        for i, conversation in zip(active, messages):
            seed = seed_of(self.envs.uids[i])
            copy = [seed_of(uid) for uid in self.envs.uids[:i]].count(seed)
            row = self.trajectories[seed][copy][int(self.envs.step_count[i])]
            ids = list(row["response_ids"])
            text = self.hf.response_prefix + self.hf.tokenizer.decode(ids, skip_special_tokens=True)
            outputs.append(GenerationOutput(text, self.hf.encode_prompt(conversation), ids, [0.0] * len(ids)))
        return outputs


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
    from recipe.forge.hf.generation import HFGenerator
    from recipe.forge.hf.model_loading import load_tokenizer
    from recipe.forge.hf.tiny import answering_llama, save_tiny_model_dir
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


def with_values(cfg, values: dict):
    """A copy of ``cfg`` with the dotted keys of ``values`` set."""
    from omegaconf import OmegaConf

    cfg = cfg.copy()
    for key, value in values.items():
        OmegaConf.update(cfg, key, value)
    return cfg


def placed(snapshot, injection: str):
    """``snapshot`` with its experiences placed by ``injection`` (the library's own setting, which both engines'
    providers read)."""
    return dataclasses.replace(snapshot, config={**snapshot.config, "injection": injection})


def verl_update(cfg, meta, advantages: torch.Tensor) -> dict:
    """One update of verl's actor on the stored rows ``meta`` with ``advantages`` ((bs, R) padded), as verl's trainer
    runs it: our CPU actor worker (verl's FSDP2 engine and PPO loss, in a Ray actor of its own), its old-log-prob
    pass written back as ``old_log_probs``, the advantages stored, then ``update_actor`` over one mini-batch of every
    row (no shuffle), with the KL loss where the config has it. Returns verl's reduced ``actor/*`` metrics."""
    import socket

    import ray
    import transfer_queue as tq
    from tensordict import TensorDict
    from verl.utils.metric import reduce_metrics
    from verl.utils.py_functional import rename_dict
    from verl.workers.utils.padding import response_from_nested, response_to_nested

    from recipe.forge.engines.verl.cpu.workers import CpuActorRolloutRefWorker

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {"VERL_PLATFORM": "cpu", "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "TRANSFER_QUEUE_ENABLE": "1"}
    actor = ray.remote(CpuActorRolloutRefWorker).options(num_cpus=0, runtime_env={"env_vars": env}).remote(
        config=cfg.actor_rollout_ref, role="actor")
    ray.get(actor.init_model.remote())
    temperature = float(cfg.actor_rollout_ref.rollout.temperature)
    meta.extra_info.update({"calculate_entropy": False, "compute_loss": False, "temperature": temperature})
    ray.get(actor.compute_log_prob.remote(meta))
    data = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=["log_probs", "response_mask"])
    mask = data["response_mask"]
    old = response_from_nested(data.pop("log_probs"), mask)
    # the reference policy is the initial one, whose log-probs these are (verl's reference pass would repeat them)
    fields = TensorDict({"old_log_probs": old, "ref_log_prob": old, "advantages": response_to_nested(advantages, mask)},
                        batch_size=len(meta))
    meta = tq.kv_batch_put(keys=meta.keys, partition_id=meta.partition_id, fields=fields)
    meta.extra_info.update({"calculate_entropy": False, "distillation_use_topk": False, "distillation_only": False,
                            "global_batch_size": len(meta), "mini_batch_size": len(meta), "epochs": 1, "seed": 0,
                            "dataloader_kwargs": {"shuffle": False}, "temperature": temperature})
    output = ray.get(actor.update_actor.remote(meta))
    return reduce_metrics(rename_dict(output["metrics"], "actor/"))


def verl_validation(cfg, manager, tokenizer, verl_rollout, library_dir) -> dict[str, float]:
    """The forge trainer's validation (ForgeSteps.validate, which ForgeTrainer._validate runs around verl's own
    ``_validate``) on the stack of ``manager``, the driver's library loaded from ``library_dir``: each pass submits
    the held-out tasks as verl's ``_validate`` does (the ``val`` partition, ``validate`` set, ``val_kwargs.n``
    copies) and samples them through the ValidationRowTap the trainer wraps verl's replay buffer in."""
    from verl.trainer.ppo.utils import create_rl_dataset

    from recipe.forge.engines.verl.forge_steps import ForgeSteps
    from recipe.forge.engines.verl.validation_dump import ValidationRowTap

    forge = ForgeSteps(cfg)
    forge.library.system.load(library_dir)
    dataset = create_rl_dataset(cfg.data.val_files, cfg.data, tokenizer, None, is_train=False)
    rows = [dataset[i] for i in range(len(dataset))]

    def run_pass() -> dict[str, float]:
        verl_rollout.submit_tasks(manager, rows, global_steps=1, validate=True,
                                  wrap=lambda buffer: ValidationRowTap(buffer, forge.keep_validation_batch))
        return {}

    return forge.validate(0, 1, run_pass)


def verl_first_iteration(state, snapshot, verl_rollout, cfg, update: bool = False, validate_with=None):
    """verl's rollout of SEEDS from ``snapshot`` under ``cfg`` (its rollout temperature), its advantages, with
    ``update`` the metrics of one update of verl's actor on them (:func:`verl_update`), and with ``validate_with``
    (a saved library folder) the validation figures from that library (:func:`verl_validation`)."""
    import ray
    import transfer_queue as tq
    from tensordict import TensorDict
    from verl.trainer.ppo.utils import create_rl_dataset

    from recipe.forge.engines.verl.cpu.hf_rollout import HFRolloutServer, server_name
    from recipe.forge.engines.verl.library_channel import get_or_create_broker, publish
    from recipe.forge.engines.verl.main import prepare_verl_config, task_rows
    from recipe.forge.run_config import load_run_config
    from recipe.forge.engines.verl.scripted_client import ServerActorClient
    from recipe.forge.engines.verl.trainer import compute_batch_advantages

    cfg = prepare_verl_config(load_run_config(cfg))
    task_rows(cfg.env.env_name, np.array(SEEDS), "train").to_parquet(cfg.data.train_files)
    tokenizer = state["tokenizer"]
    with verl_rollout.agent_loop_stack(cfg, ServerActorClient(cfg, server_name(0))) as manager:
        server = ray.remote(HFRolloutServer).options(name=server_name(0), num_cpus=0).remote(state["model_dir"], 12)
        ray.get(server.set_global_steps.remote(1))  # loaded; the handle keeps the actor alive
        publish(get_or_create_broker(), "test", 1, 1, snapshot)
        dataset = create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, None, is_train=True)
        rows = [dataset[i] for i in range(len(SEEDS))]
        meta, uids = verl_rollout.submit_tasks(manager, rows, global_steps=1)
        seed_of_uid = {uid: row["extra_info"]["seed"] for uid, row in zip(uids, rows)}
        data = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id,
                               select_fields=["uid", "prompts", "responses", "response_mask", "extra_fields"])
        row_uids = data.pop("uid").tolist()
        extra = [getattr(e, "data", e) for e in data.pop("extra_fields").tolist()]
        mask = TensorDict({"m": data["response_mask"]}, batch_size=len(meta)).to_padded_tensor()["m"]
        real = np.array([not tag.get("is_padding", False) for tag in meta.tags])
        computed = compute_batch_advantages("forge", np.array(row_uids, dtype=object), mask, extra, real, cfg.algorithm)
        prompts = [p.tolist() for p in data["prompts"].unbind()]
        responses = [r.tolist() for r in data["responses"].unbind()]
        update_metrics = verl_update(cfg, meta, computed["advantages"]) if update else None
        validation = (verl_validation(cfg, manager, tokenizer, verl_rollout, validate_with)
                      if validate_with is not None else None)
    keep = np.flatnonzero(real)
    trajectories = defaultdict(lambda: defaultdict(list))  # seed -> traj_uid -> rows
    for i in keep:
        step = {**extra[i], "response_ids": responses[i][: int(mask[i].sum())]}
        trajectories[int(seed_of_uid[row_uids[i]])][extra[i]["traj_uid"]].append(step)
    return {
        "keys": [(int(seed_of_uid[row_uids[i]]), int(extra[i]["step"])) for i in keep],
        "prompt_ids": [prompts[i] for i in keep],  # nested (ragged) rows: no padding to strip
        "response_ids": [responses[i][: int(mask[i].sum())] for i in keep],
        "cluster_id": [extra[i]["cluster_id"] for i in keep],
        "admissible": [tuple(extra[i]["admissible_actions"]) for i in keep],
        "expert": [extra[i]["expert_action"] for i in keep],
        "advantage": [float(computed["advantages"][i, 0]) for i in keep],
        "dropped": [extra[i]["experiences_dropped"] for i in keep],
        "student": [extra[i].get("student_prompt_ids") for i in keep],
        "rows": [extra[i] for i in keep],
        "update": update_metrics,
        "validation": validation,
        # per task seed, its copies' steps in order (copies by trajectory uid): what the embedded engine replays
        "script": {seed: [sorted(steps, key=lambda row: row["step"]) for _, steps in sorted(copies.items())]
                   for seed, copies in trajectories.items()},
    }


def trainer_library(state, cfg):
    """The embedded trainer's own experience system for ``cfg`` (ExperienceSystem.from_algorithm, as LocalTrainer
    builds it), resumed from ``state["system"]``'s library as a run resumes from a checkpoint: a training system,
    not a snapshot view, so that what its provider does during the rollout stays in the library it evolves."""
    import uuid

    from recipe.forge.experience import ExperienceSystem
    from recipe.forge.run_config import validate_algorithm

    folder = state["system"].save(state["out"] / f"library_{uuid.uuid4().hex}")
    system = ExperienceSystem.from_algorithm(validate_algorithm(cfg.algorithm), tokenizer=state["tokenizer"])
    return system.load(folder)


def canonical(trajectories):
    """``trajectories`` in a canonical order (the task's first observation, then the copy's actions): the engines
    name task groups differently, and evolution reads the trajectories in order."""
    return sorted(trajectories, key=lambda t: (t.steps[0].anchor_obs, [step.action for step in t.steps]))


def driver_library(state, cfg, rows) -> list[tuple]:
    """:func:`library_entries` of verl's driver (LibraryDriver.end_iteration) evolved from ``rows``, its system
    the trainer's own resumed from ``state["system"]`` (:func:`trainer_library`), the rows in canonical order."""
    from recipe.forge.engines.verl.library_driver import LibraryDriver
    from recipe.forge.engines.verl.row_codec import trajectories_from_rows
    from recipe.forge.run_config import validate_algorithm

    system = trainer_library(state, cfg)
    rank = {t.traj_uid: i for i, t in enumerate(canonical(trajectories_from_rows(rows)))}
    LibraryDriver(system, validate_algorithm(cfg.algorithm).forge).end_iteration(sorted(rows, key=lambda r: (rank[r["traj_uid"]], r["step"])), 1)
    return library_entries(system)


def local_first_iteration(state, cfg, script: dict | None = None):
    """The embedded engine's rollout of SEEDS under ``cfg`` with the embedded trainer's own library
    (:func:`trainer_library`): greedy, or replaying ``script`` (:class:`ReplayGenerator`); its advantages and
    distillation rows, and that library evolved from its trajectories. ``state["processor"]``, where present: the
    vision-language model's processor (the model then loads as one, and its prompts carry their images)."""
    from agent_system.environments import make_envs
    from agent_system.multi_turn_rollout.prompt_fit import PromptBudget
    from agent_system.multi_turn_rollout.protocols import SamplingParams
    from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
    from recipe.forge.run_config import validate_algorithm
    from recipe.forge.distillation import library_distillation_weight
    from recipe.forge.engines.local.advantages import compute_advantages
    from recipe.forge.engines.local.batch import build_step_batch
    from recipe.forge.hf.generation import HFGenerator
    from recipe.forge.engines.local.update import DistillationInputs
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    tokenizer, processor = state["tokenizer"], state.get("processor")  # processor: a vision-language model's
    prompt_length = int(cfg.actor_rollout_ref.rollout.prompt_length)
    system = trainer_library(state, cfg)  # the library both engines start from
    system.begin_iteration(1)
    envs, _ = make_envs(cfg)
    model_class = AutoModelForCausalLM if processor is None else AutoModelForImageTextToText
    model = model_class.from_pretrained(state["model_dir"], dtype=torch.float32)
    greedy = SamplingParams(temperature=0.0, do_sample=False, max_new_tokens=12, stop=("</action>",))
    hf = HFGenerator(model, tokenizer, processor=processor)
    generator = hf if script is None else ReplayGenerator(envs, hf, script)
    collector = TrajectoryCollector(prompt_budget=PromptBudget(prompt_length, hf.prompt_length))  # the trainer's
    rollout = collector.collect(envs, generator, greedy, system.provider, seeds=SEEDS)
    algorithm = validate_algorithm(cfg.algorithm)
    batch = build_step_batch(rollout, tokenizer.pad_token_id, algorithm.invalid_action_penalty_coef, hf.image_prompts)
    advantages, _ = compute_advantages(batch, algorithm)
    forge = algorithm.forge
    weight = library_distillation_weight(len(system.library), forge)
    distill = DistillationInputs.of_batch(batch, hf.encode, tokenizer.pad_token_id, weight,
                                          forge.divergence_type, forge.distill_temperature)
    update_metrics = local_update(state, cfg, batch, advantages) if script is not None else None
    student = [None] * len(batch)
    if distill is not None:
        plain, p = distill.plain, distill.plain.prompt_length
        for k, row in enumerate(distill.rows.tolist()):
            student[row] = plain.input_ids[k, :p][plain.attention_mask[k, :p].bool()].tolist()
    return {
        "keys": [(seed_of(r.uid), r.step) for r in batch.records],
        "prompt_ids": [list(r.prompt_ids) for r in batch.records],
        "response_ids": [list(r.response_ids) for r in batch.records],
        "cluster_id": [r.cluster_id for r in batch.records],
        "admissible": [tuple(r.admissible_actions) for r in batch.records],
        "expert": [r.expert_action for r in batch.records],
        "advantage": advantages[:, 0].tolist(),
        "experiences": sum(bool(r.experience_ids) for r in batch.records),
        "dropped": [r.experiences_dropped for r in batch.records],
        "student": student,
        "bare_length": max(hf.prompt_length(r.plain_messages) for r in batch.records),
        "trajectories": rollout.trajectories,
        "update": update_metrics,
        "library": evolved(system, rollout.trajectories),
    }


def local_validation(state, cfg, system) -> dict[str, float]:
    """The embedded trainer's validation (LocalTrainer.validate: validation_metrics over its validation
    environments, ``val_kwargs.n`` copies of each held-out task, at the validation sampling) with ``system``."""
    from agent_system.environments import make_envs
    from agent_system.multi_turn_rollout.prompt_fit import PromptBudget
    from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
    from recipe.forge.hf.generation import HFGenerator
    from recipe.forge.runs.validation import validation_metrics
    from recipe.forge.run_config import load_run_config
    from transformers import AutoModelForCausalLM

    run = load_run_config(with_values(cfg, {"trainer.engine": "local"}))  # the embedded engine's sections
    _, val_envs = make_envs(run, val_copies=run.rollout.val_copies)
    model = AutoModelForCausalLM.from_pretrained(state["model_dir"], dtype=torch.float32)
    hf = HFGenerator(model, state["tokenizer"])
    collector = TrajectoryCollector(prompt_budget=PromptBudget(run.rollout.prompt_length, hf.prompt_length))
    return validation_metrics(collector, val_envs, hf, run.rollout.sampling(True), system, state["tokenizer"])


def local_update(state, cfg, batch, advantages: torch.Tensor) -> dict:
    """One update of the embedded engine's policy (PolicyUpdater, verl's actor config of ``cfg``) on ``batch`` from
    the model's initial weights: old log-probs recomputed, as verl does (and, for the KL loss, the reference's: the
    initial policy's), one mini-batch of every row. Without the
    distillation term, which the engines build differently by design (docs/distributed.md)."""
    from transformers import AutoModelForCausalLM

    from recipe.forge.engines.local.update import PolicyUpdater
    from recipe.forge.run_config import load_run_config

    actor = load_run_config(with_values(cfg, {"trainer.engine": "local"})).policy.actor
    assert actor.ppo_mini_batch_size * actor.rollout_n >= len(batch), "the update would take several mini-batches"
    model = AutoModelForCausalLM.from_pretrained(state["model_dir"], dtype=torch.float32)
    updater = PolicyUpdater(model, torch.optim.AdamW(model.parameters(), lr=actor.optim.lr), actor,
                            temperature=float(cfg.actor_rollout_ref.rollout.temperature), share_prompt_prefix=True)
    old = updater.log_probs(model, batch.packed)
    return updater.update(batch, advantages, old, ref_log_probs=old if actor.use_kl_loss else None)


def replayed(trajectories):
    """(task seed, copy, trajectory) of the embedded engine's trajectories, the copy numbered as
    :class:`ReplayGenerator` numbers it (environment order within the task)."""
    seen = defaultdict(int)
    for trajectory in trajectories:
        seed = seed_of(trajectory.uid)
        yield seed, seen[seed], trajectory
        seen[seed] += 1


def by_key(run: dict, field: str) -> dict:
    """{(seed, step): sorted values of ``field``} of a run (the G copies of a task give G values)."""
    table = by_task_step(run["keys"], [repr(v) if not isinstance(v, float) else v for v in run[field]])
    return {key: sorted(values) for key, values in table.items()}


def library_entries(system) -> list[tuple]:
    """The entries of ``system``'s library as (zone, level, text, score, support, task, linked clusters, shown
    episodes and successes, unshown episodes and successes), sorted: compared by content, not id."""
    from recipe.forge.experience.outcomes import OUTCOME_FIELDS

    return sorted((e.zone, e.level, e.text, round(e.score, 9), e.support, e.task, len(e.cluster_ids),
                   *(getattr(e, name) for name in OUTCOME_FIELDS)) for e in system.library.entries.values())


def evolved(system, trajectories) -> list[tuple]:
    """:func:`library_entries` of ``system`` after it evolved from ``trajectories`` (copies, in canonical order:
    evolution files the steps' clusters in place)."""
    import copy

    system.evolve(canonical(copy.deepcopy(trajectories)), 1)
    return library_entries(system)


@pytest.fixture(scope="module")
def verl_sampled(library_v1, verl_rollout):
    """verl's first iteration from the library, sampled (the prompt length roomy: nothing is trimmed), then a
    validation from the same library."""
    library_dir = library_v1["system"].save(library_v1["out"] / "library_v1")
    return verl_first_iteration(library_v1, library_v1["system"].snapshot(), verl_rollout, library_v1["cfg"],
                                update=True, validate_with=library_dir)


@pytest.fixture(scope="module")
def local_replayed(library_v1, verl_sampled):
    """The embedded engine's first iteration replaying verl's responses."""
    return local_first_iteration(library_v1, library_v1["cfg"], script=verl_sampled["script"])


def test_both_engines_give_the_same_first_iteration(library_v1, verl_sampled, local_replayed):
    from agent_system.multi_turn_rollout.protocols import RolloutBatch
    from recipe.forge.runs.validation import pass_metrics
    from recipe.forge.engines.verl.row_codec import trajectories_from_rows
    from recipe.forge.experience import ExperienceSystem
    from recipe.forge.experience.system import PROVISIONAL_BASE

    snapshot = library_v1["system"].snapshot()
    local, verl = local_replayed, verl_sampled
    assert snapshot.config["injection"] == "system"  # the default placement
    assert local["experiences"] > 0, "no step was given experiences: the comparison would not cover injection"
    assert sorted(local["keys"]) == sorted(verl["keys"])
    responses = by_key(verl, "response_ids")
    assert any(len(set(copies)) > 1 for copies in responses.values()), "the sampled copies do not differ"

    decode = library_v1["tokenizer"].decode
    for field in ("prompt_ids", "response_ids"):
        a, b = by_task_step(local["keys"], local[field]), by_task_step(verl["keys"], verl[field])
        for key in a:
            assert sorted(a[key]) == sorted(b[key]), (
                f"{field} differ at task seed {key[0]}, step {key[1]}:\nlocal {decode(a[key][0])!r}\nverl  {decode(b[key][0])!r}"
            )
    for field in ("admissible", "expert", "student"):
        assert by_key(local, field) == by_key(verl, field), field
    assert all(e in ("+", "-") for e in local["expert"])  # NumberLine's expert at every state acted on
    assert sum(s is not None for s in local["student"]) == local["experiences"] > 0  # distilled: steps with experiences
    a, b = by_task_step(local["keys"], local["advantage"]), by_task_step(verl["keys"], verl["advantage"])
    for key in a:
        np.testing.assert_allclose(sorted(a[key]), sorted(b[key]), rtol=1e-5, atol=1e-5, err_msg=str(key))

    # clusters, step by step along each replayed trajectory: ids the library knew are equal; observations new to it
    # make the same partition on both sides
    mapping = {}
    for seed, copy, trajectory in replayed(local["trajectories"]):
        for step, row in zip(trajectory.steps, verl["script"][seed][copy], strict=True):
            lid, vid = step.cluster_id, row["cluster_id"]
            if vid < PROVISIONAL_BASE:
                assert lid == vid, f"known cluster differs at task seed {seed}, copy {copy}, step {step.step}"
            assert mapping.setdefault(lid, vid) == vid, f"cluster partitions differ at task seed {seed}, step {step.step}"
    assert mapping and len(set(mapping.values())) == len(mapping)

    # evolution: the embedded trainer's own library, which its provider served the rollout from, evolves from its
    # trajectories; verl's driver from the rows decoded by the row codec; from the same library they must make the
    # same library (entries compared by content, links and outcome counters, not id), and evolution changes it:
    # the entries shown this iteration count their episodes, whether or not the sampled responses also give a
    # new lesson
    verl_library = driver_library(library_v1, library_v1["cfg"], verl["rows"])
    assert local["library"] == verl_library and local["library"] != library_entries(library_v1["system"])

    # the update, from the same weights and the same rows: verl's FSDP2 actor and the embedded engine's updater give
    # the same policy loss and gradient norm (one mini-batch of every row, ratio 1: the loss is minus the
    # token-mean advantage, the gradient its policy gradient). The two forwards differ in float rounding: their
    # log-probs of the same tokens on the same weights differ by up to 2e-4 here (the tiny model's logits are large),
    # the gradient norms by up to 7e-4 relative
    assert local["update"]["actor/pg_loss"] == pytest.approx(verl["update"]["actor/pg_loss"], rel=1e-6, abs=1e-9)
    assert local["update"]["actor/grad_norm"] == pytest.approx(verl["update"]["actor/grad_norm"], rel=2e-3)
    assert local["update"]["actor/grad_norm"] > 0 and local["update"]["actor/ppo_kl"] == verl["update"]["actor/ppo_kl"] == 0

    # validation figures: both engines report a pass with validation.pass_metrics from its steps (the embedded
    # engine from the collector's batch, verl's driver from the rows): the same steps give the same figures
    view = ExperienceSystem.from_snapshot(snapshot, library_v1["tokenizer"])
    figures = {name: pass_metrics("val", RolloutBatch([s for t in trajs for s in t.steps], trajs), view)
               for name, trajs in (("local", local["trajectories"]), ("verl", trajectories_from_rows(verl["rows"])))}
    assert figures["local"] == pytest.approx(figures["verl"])
    assert figures["local"]["val/num_trajectories"] == len(SEEDS) * G and "val/forge/lessons_checkable" in figures["local"]

    # validation itself, greedy on both engines from the same library: the embedded trainer's validation_metrics and
    # the forge trainer's passes through verl's validation submission give the same figures, with the library
    # and without it, for the same held-out tasks and copies
    local_val = local_validation(library_v1, library_v1["cfg"], library_v1["system"])
    verl_val = verl["validation"]
    assert sorted(local_val) == sorted(verl_val) and local_val == pytest.approx(verl_val)
    assert local_val["val/num_trajectories"] == local_val["val_no_library/num_trajectories"] == 1 * 2
    assert "val/forge/lessons_checkable" in local_val and "val_no_library/forge/lessons_checkable" not in local_val


def test_both_engines_fit_long_prompts_by_one_rule(library_v1, local_replayed, verl_rollout):
    """The library after the observation (user_suffix), greedy decoding on both engines, rollout.prompt_length
    set to the longest prompt without experiences: the steps with experiences drop entries to fit, on both engines
    alike (the same prompt tokens, the same entries dropped, the same distillation rows), and no prompt is
    left-truncated by verl."""
    limit = local_replayed["bare_length"]  # the longest prompt without experiences
    cfg = with_values(library_v1["cfg"], {"actor_rollout_ref.rollout.prompt_length": limit, "data.max_prompt_length": limit,
                                          "actor_rollout_ref.rollout.temperature": 0.0,
                                          "algorithm.forge.injection": "user_suffix"})
    snapshot = placed(library_v1["system"].snapshot(), "user_suffix")
    local = local_first_iteration(library_v1, cfg)
    verl = verl_first_iteration(library_v1, snapshot, verl_rollout, cfg)
    assert sum(local["dropped"]) > 0, "no step had to drop an entry: the limit does not exercise the rule"
    assert sorted(local["keys"]) == sorted(verl["keys"])
    for field in ("prompt_ids", "response_ids", "dropped", "student"):
        assert by_key(local, field) == by_key(verl, field), field
    assert max(len(ids) for ids in verl["prompt_ids"]) <= limit
    # what the steps showed after the rule is what both libraries linked and counted: the embedded trainer's own
    # library (whose provider served the rollout) and verl's driver (from the rows) evolve alike
    assert local["library"] == driver_library(library_v1, cfg, verl["rows"])
