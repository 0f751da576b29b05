"""verl's V1 PPO trainers with SLEA-RL's step-level parts, one logic (:class:`ForgeTrainerLogic`) over verl's
three trainer modes, registered in verl's trainer registry as ``forge`` (sync), ``forge_colocate_async`` and
``forge_separate_async``. The run picks the mode by verl's own key, ``trainer.v1.trainer_mode`` = ``sync``,
``colocate_async`` or ``separate_async`` (run_verl writes the registered name; settings.py). verl's mode class
decides where generation runs, when weights sync and how its replay buffer samples; compared with it:

* advantage step: rows are per-step samples of the ``forge_agent`` loop. Their token-level score is rebuilt
  from extra_fields (episode return minus the step's invalid-action penalty; verl's own reward_score is the
  last step's), and ``forge`` / ``gigpo`` group steps by (uid, cluster) / (uid, anchor) with discounted step
  returns, through the step-sample core both engines share (recipe/forge/step_samples.py), then verl's rollout
  correction (on in the async modes: async_mode.py). Every other estimator in verl's registry runs verl's own
  step on the rebuilt scores;
* after each iteration, on the driver: episode and version metrics of the trained steps (versions.py), library
  evolution from the iteration's trajectories (each once, in a defined order: evolution_ledger.py), publication
  of the new library version to the agent-loop workers, forge/* metrics (in the async modes also the task groups
  verl's staleness bound dropped: stale_groups.py), and a library checkpoint every
  ``algorithm.forge.library_save_freq`` iterations (and with every trainer checkpoint); the driver's SLEA-RL state
  is a ForgeSteps (recipe/forge/engines/verl/forge_steps.py), the advantage step :func:`advantage_step`, both
  usable without verl's trainer;
* a Ray process that dies (rollout server, agent-loop worker, FSDP rank) ends the run with one error naming it
  and the iteration (recipe/forge/engines/verl/worker_faults.py);
* optional self-distillation (algorithm.forge.use_distillation): see recipe/forge/engines/verl/distill.py;
* validation runs with the library evolved from the iteration before it (published on the validation channel at
  validation start), as on the embedded engine, and with ``trainer.rollout_data_dir`` its steps are dumped in
  the embedded engine's format (recipe/forge/engines/verl/validation_dump.py).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import ray
import torch
import transfer_queue as tq
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl import DataProto
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
from verl.workers.utils.padding import response_from_nested, response_to_nested

from recipe.forge.distillation import library_distillation_weight
from recipe.forge.engines.verl.distill import distillation_advantage
from recipe.forge.engines.verl.distribution import layout_metrics
from recipe.forge.engines.verl.forge_steps import ForgeSteps
from recipe.forge.engines.verl.image_rows import image_metrics
from recipe.forge.engines.verl.metrics_file import MetricsFileTee, metrics_file_tracker
from recipe.forge.engines.verl.rollout_load import RolloutLoad
from recipe.forge.engines.verl.rollout_logprobs import has_rollout_log_probs, rollout_correction_runs
from recipe.forge.engines.verl.row_codec import samples_from_rows
from recipe.forge.engines.verl.modes import REGISTERED_MODES
from recipe.forge.engines.verl.stale_groups import StaleGroups, count_stale_groups
from recipe.forge.engines.verl.validation_dump import ValidationRowTap
from recipe.forge.engines.verl.worker_faults import worker_died
from recipe.forge.step_samples import (STEP_ESTIMATORS, samples_advantage, section_value, step_inputs,
                                       token_level_scores)

logger = logging.getLogger(__name__)


STUDENT_TAG = "forge_student_of"  # tag of a distillation row: the key of the row it is the student view of


@dataclass
class BatchRows:
    """What the advantage and library steps read of a TransferQueue batch, each per row (bs,)."""

    uid: np.ndarray
    response_mask: Any  # nested (bs, ragged) tensor
    extra: list[dict]
    real: np.ndarray  # bool: a step of an episode (not verl's padding, not a distillation row)
    student: np.ndarray  # bool: a distillation row


def read_rows(batch: KVBatchMeta) -> BatchRows:
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["uid", "response_mask", "extra_fields"])
    # pop (not []) returns the NonTensorStack, whose tolist() gives the per-row python objects
    uid = np.array(data.pop("uid").tolist(), dtype=object)
    extra = [getattr(e, "data", e) for e in data.pop("extra_fields").tolist()]
    student = np.array([STUDENT_TAG in tag for tag in batch.tags], dtype=bool)
    padding = np.array([bool(tag.get("is_padding", False)) for tag in batch.tags], dtype=bool)
    return BatchRows(uid, data["response_mask"], extra, ~padding & ~student, student)


def compute_batch_advantages(
    estimator: str,
    uid: np.ndarray,
    response_mask: torch.Tensor,
    extra_fields: list[dict],
    real: np.ndarray,
    algorithm: Any,
) -> dict[str, Any]:
    """Token-level scores, and for step-level estimators advantages, returns and step-group keys, of a batch.

    A step whose generation was empty (response mask all 0) is a step of its episode: its reward and its transition
    count in the step values of the steps of its group (step_samples.step_inputs), but it is no training sample and
    stays out of every group mean.

    Args:
        response_mask: (bs, response_len) padded.
        extra_fields: (bs,) per-row dicts; rows with ``real`` False (padding, distillation rows) get zeros.

    Returns:
        {"rm_scores": (bs, L)} plus, for forge / gigpo, {"advantages", "returns": (bs, L), "group_keys": (bs,)
        int64: the step-group code each trained row was grouped by within its task group, -1 elsewhere}.
    """
    idx = np.flatnonzero(real)
    samples = samples_from_rows([extra_fields[i] for i in idx])
    samples = replace(samples, uid=np.asarray(uid[idx], dtype=object))  # verl's task groups
    coef = float(section_value(algorithm, "invalid_action_penalty_coef"))
    mask = response_mask[idx]
    scores = torch.zeros(response_mask.shape, dtype=torch.float32)
    scores[idx] = token_level_scores(samples, mask, coef)
    out: dict[str, Any] = {"rm_scores": scores}
    if estimator in STEP_ESTIMATORS:
        trained = (mask.sum(-1) > 0).numpy()
        rows = idx[trained]
        inputs = step_inputs(samples, estimator, algorithm).take(trained)
        adv, _ = samples_advantage(estimator, scores[rows], response_mask[rows], samples.take(trained), inputs,
                                   algorithm)
        advantages = torch.zeros(response_mask.shape, dtype=torch.float32)
        advantages[rows] = adv.to(torch.float32)
        out["advantages"] = advantages
        out["returns"] = advantages.clone()
        group_keys = np.full(len(real), -1, dtype=np.int64)
        group_keys[rows] = inputs.group_keys
        out["group_keys"] = group_keys
    return out


def logprob_gap_max(rollout_log_probs: torch.Tensor, old_log_probs: torch.Tensor, response_mask: torch.Tensor) -> float:
    """max |rollout log-prob - actor log-prob| over the response tokens; all (bs, response_len)."""
    gap = (rollout_log_probs.float() - old_log_probs.float()).abs() * response_mask.float()
    return float(gap.max()) if gap.numel() else 0.0


def advantage_step(batch: KVBatchMeta, forge: ForgeSteps, config: Any, metrics: dict) -> KVBatchMeta:
    """SLEA-RL's advantage step on a TransferQueue batch of ``forge_agent`` step rows (after verl's old-log-prob
    pass); returns the batch as stored. ``config``: verl's config (its rollout keys: log-probs, correction).

    Stores every row's ``rm_scores`` rebuilt from its extra_fields (:func:`compute_batch_advantages`). For the
    step-level estimators also its ``advantages`` and ``returns`` (a distillation row's: its distillation term),
    then verl's rollout correction; for the others verl's own advantage step is still to run on these scores.
    With the rollout's log-probs in the rows it logs forge/rollout_actor_logprob_diff_max into ``metrics``.
    """
    algorithm = forge.run.algorithm
    estimator = str(algorithm.adv_estimator)
    step_level = estimator in STEP_ESTIMATORS
    if step_level and algorithm.use_kl_in_reward:
        raise ValueError(f"algorithm.use_kl_in_reward is not supported with the {estimator!r} estimator")
    rows = read_rows(batch)
    padded_mask = TensorDict({"m": rows.response_mask}, batch_size=len(batch)).to_padded_tensor()["m"]
    computed = compute_batch_advantages(estimator, rows.uid, padded_mask, rows.extra, rows.real, algorithm)
    if step_level:
        computed.pop("group_keys")  # no tensor: the step groups of the rows (tests read them)
        if forge.distill:
            _add_distillation_advantages(batch, rows, computed, forge, metrics)
    fields = TensorDict(
        {name: response_to_nested(value, rows.response_mask) for name, value in computed.items()}, batch_size=len(batch)
    )
    batch = tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)
    _log_rollout_actor_gap(batch, rows, config, metrics)
    return _apply_rollout_correction(batch, config, metrics) if step_level else batch


def _log_rollout_actor_gap(batch: KVBatchMeta, rows: BatchRows, config: Any, metrics: dict) -> None:
    """forge/rollout_actor_logprob_diff_max: the rollout server's and the actor's log-probs of the same tokens."""
    if not has_rollout_log_probs(config):
        return
    keys = [batch.keys[i] for i in np.flatnonzero(rows.real)]
    data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id,
                           select_fields=["rollout_log_probs", "old_log_probs", "response_mask"]).to_padded_tensor()
    metrics["forge/rollout_actor_logprob_diff_max"] = logprob_gap_max(
        data["rollout_log_probs"], data["old_log_probs"], data["response_mask"]
    )


def _apply_rollout_correction(batch: KVBatchMeta, config: Any, metrics: dict) -> KVBatchMeta:
    """verl's rollout correction (IS weights, rejection mask, rollout_corr/* metrics) for the step-level
    estimators, whose advantages do not go through verl's own advantage step; same conditions as verl's."""
    if not rollout_correction_runs(config):
        return batch
    names = ["old_log_probs", "rollout_log_probs", "response_mask"]
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=names)
    nested_mask = data["response_mask"]
    proto, correction_metrics = compute_rollout_correction_and_add_to_batch(
        DataProto(batch=data.to_padded_tensor()), config.algorithm.rollout_correction
    )
    metrics.update(correction_metrics)
    out = {"response_mask": response_to_nested(proto.batch["response_mask"], nested_mask)}
    if "rollout_is_weights" in proto.batch:
        out["rollout_is_weights"] = response_to_nested(proto.batch["rollout_is_weights"], nested_mask)
    return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict(out, batch_size=len(batch)))


def _add_distillation_advantages(batch: KVBatchMeta, rows: BatchRows, computed: dict, forge: ForgeSteps,
                                 metrics: dict) -> None:
    """The advantage of every distillation row: ``-w (log pi(a_t | plain) - log pi(a_t | with library))`` per
    response token (the sampled-token estimate of the reverse KL from the student to the teacher), with ``w``
    ramped by the library's fill ratio up to ``max_distill_weight``."""
    weight = library_distillation_weight(len(forge.library.system.library), forge.run.algorithm.forge)
    students = np.flatnonzero(rows.student)
    metrics["forge/distill_weight"] = weight
    metrics["forge/distill_rows"] = float(len(students))
    if not len(students):
        return
    position = {key: i for i, key in enumerate(batch.keys)}
    teachers = [position[batch.tags[i][STUDENT_TAG]] for i in students]
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["old_log_probs", "response_mask"])
    padded = data.to_padded_tensor()
    student_lp, teacher_lp = padded["old_log_probs"][students], padded["old_log_probs"][teachers]
    mask = padded["response_mask"][students]
    term = distillation_advantage(student_lp, teacher_lp, mask, weight)
    computed["advantages"][students] = term
    computed["returns"][students] = term
    metrics["forge/distill_logprob_gap"] = float(((student_lp - teacher_lp) * mask).sum() / mask.sum().clamp(min=1))


class ForgeTrainerLogic:
    """SLEA-RL's part of the trainer, one logic over verl's V1 trainer modes: verl's mode class (sync,
    colocate_async or separate_async) follows this one in each registered trainer's bases (below), and decides
    where generation runs, when weights sync and how the replay buffer samples; this class adds step-level
    advantages, the library's evolution and publication, versions and forge metrics through verl's hooks."""

    verl_mode = "sync"  # the verl mode this trainer runs (each registered subclass sets its own)
    resumed_at = 0  # the step restored from a checkpoint (_load_checkpoint), 0 on a fresh start

    # verl's base class branches on its ``trainer_mode`` (replay buffer, checkpoint contents, prompt submission,
    # the mode's own section of trainer.v1). This trainer runs verl's mode ``verl_mode``, so it reports that mode
    # to those branches while being registered under its own name.
    @property
    def trainer_mode(self) -> str:
        return self.verl_mode

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        self.registered_mode = value

    def __init__(self, config):
        super().__init__(config)
        self.forge = ForgeSteps(config, llm_addresses=lambda: self.llm_server_manager.get_addresses(),
                                decode=lambda ids: self.tokenizer.decode(ids))
        self.estimator = str(self.forge.run.algorithm.adv_estimator)

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        from verl.utils.device import get_device_name

        if get_device_name() == "cpu":
            from recipe.forge.engines.verl.cpu.workers import CPU_WORKERS

            # verl maps the roles to ray.remote(ActorRolloutRefWorker / TrainingWorker); on the cpu platform the
            # same workers with a gloo process group take their place
            for role, remote_cls in self.role_worker_mapping.items():
                worker_cls = remote_cls.__ray_metadata__.modified_class.__mro__[1]  # under Ray's wrapper class
                if worker_cls in CPU_WORKERS:
                    self.role_worker_mapping[role] = ray.remote(CPU_WORKERS[worker_cls])

    def _build_replay_buffer(self):
        """verl's replay buffer, which hands each validation batch it samples to ForgeSteps.keep_validation_batch
        (verl clears a batch from TransferQueue right after reading it): SLEA-RL's validation metrics and dump
        are computed from those rows; in the async modes it also counts the task groups its staleness bound
        drops (stale_groups.py). verl builds it in its __init__, before ``self.forge`` exists."""
        buffer = super()._build_replay_buffer()
        self.stale_groups = StaleGroups()
        self.counts_stale_groups = count_stale_groups(buffer, self.stale_groups)
        return ValidationRowTap(buffer, lambda batch: self.forge.keep_validation_batch(batch))

    def fit(self, agent_loop_manager):
        """verl's fit; a Ray process of the run that dies ends it with a WorkerDiedError naming the process and
        the iteration (recipe/forge/engines/verl/worker_faults.py)."""
        try:
            return super().fit(agent_loop_manager)
        except Exception as exc:
            died = worker_died(exc, self.global_steps, self.run_actors(agent_loop_manager))
            if died is None:
                raise
            raise died from exc

    def run_actors(self, agent_loop_manager) -> list:
        """The Ray actors this run lives on: its rollout servers (separate_async's standalone ones too),
        agent-loop workers and training workers."""
        return [*self.rollout_servers(), *agent_loop_manager.agent_loop_workers, *self.actor_rollout_wg.workers]

    def on_init_end(self):
        super().on_init_end()
        self.forge.begin_iteration(self.global_steps)  # the next iteration to train (0 on a fresh start)
        self.rollout_load = RolloutLoad()
        self.rollout_load.metrics(self.rollout_servers())  # the clock of the first iteration starts here

    def rollout_servers(self) -> list:
        """The rollout servers of every server manager (separate_async's standalone ones too)."""
        return [handle for manager in self._rollout_server_managers() for handle in manager.server_handles]

    # ------------------------------------------------------------ metrics file
    # verl's fit builds its Tracking (self.logger) and then calls one of these two before it logs anything
    def on_validate_begin(self):
        super().on_validate_begin()
        self._tee_metrics_file()

    def on_train_begin(self):
        super().on_train_begin()
        self._tee_metrics_file()

    def _tee_metrics_file(self) -> None:
        """metrics.jsonl written by the embedded engine's rules (recipe/forge/engines/verl/metrics_file.py)."""
        if hasattr(self, "logger") and not isinstance(self.logger, MetricsFileTee):
            trainer = self.config.trainer
            self.logger = MetricsFileTee(self.logger, metrics_file_tracker(
                trainer.default_local_dir, self.resumed_at, bool(trainer.get("val_only", False)), trainer))

    # ------------------------------------------------------------ validation
    def _validate(self) -> dict[str, float]:
        """The embedded engine's validation rule, through verl's own validation: the held-out tasks
        (``val_kwargs.n`` copies each) with the library as it is after this iteration's evolution, logged as
        verl's ``val-core/*`` and SLEA-RL's ``val/*``; then, with a library, the same tasks without it, logged as
        ``val_no_library/*`` only (verl's figures of that pass would overwrite the first pass's)."""
        return self.forge.validate(max(self.global_steps - 1, 0), self.global_steps, super()._validate)

    def on_step_begin(self):
        super().on_step_begin()
        self.forge.begin_iteration(self.global_steps - 1)

    # ------------------------------------------------------------ advantage step
    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        batch = advantage_step(batch, self.forge, self.config, metrics)
        if self.estimator in STEP_ESTIMATORS:
            return batch
        return super()._compute_advantage(batch, metrics)

    # ------------------------------------------------------------ self-distillation
    def _compute_old_log_prob(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        batch = super()._compute_old_log_prob(batch, metrics)
        if self.forge.distill:
            batch = self._add_student_rows(batch)
        return batch

    def _add_student_rows(self, batch: KVBatchMeta) -> KVBatchMeta:
        """One distillation row per step that had experiences: the plain (student) prompt + the same response.

        Its old log-probs are the current policy's on the student's context, its rollout log-probs the same (its
        tokens were not sampled in that context, so no off-policy correction applies to it); it joins the batch
        after the step rows' own old-log-prob pass and before the reference pass, so verl treats it as any row.
        """
        from verl.utils.tensordict_utils import list_of_dict_to_tensordict

        rows = read_rows(batch)
        sources = [i for i in np.flatnonzero(rows.real) if rows.extra[i].get("student_prompt_ids")]
        if not sources:
            return batch
        source_keys = [batch.keys[i] for i in sources]
        full = tq.kv_batch_get(keys=source_keys, partition_id=batch.partition_id)
        columns = {name: (value.tolist() if not isinstance(value, torch.Tensor) else value) for name, value in full.items()}
        samples, tags = [], []
        for j, i in enumerate(sources):
            sample = {name: column[j] for name, column in columns.items()}
            prompt = torch.tensor(rows.extra[i]["student_prompt_ids"], dtype=torch.int64)
            sample["prompts"] = prompt
            sample["input_ids"] = torch.cat([prompt, sample["responses"]])
            sample["attention_mask"] = torch.ones_like(sample["input_ids"])
            sample["position_ids"] = torch.arange(sample["input_ids"].numel(), dtype=torch.int64)
            samples.append(sample)
            tags.append({**batch.tags[i], "prompt_len": prompt.numel(), "seq_len": int(sample["input_ids"].numel()),
                         STUDENT_TAG: batch.keys[i]})
        keys = [f"{key}_student" for key in source_keys]
        tq.kv_batch_put(keys=keys, partition_id=batch.partition_id, fields=list_of_dict_to_tensordict(samples), tags=tags)
        meta = self._balance_batch(KVBatchMeta(partition_id=batch.partition_id, keys=keys, tags=tags), {}, "forge_student_seqlen")
        meta.extra_info.update(
            {"calculate_entropy": True, "compute_loss": False, "temperature": self.config.actor_rollout_ref.rollout.temperature}
        )
        self.actor_rollout_wg.compute_log_prob(meta)
        out = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=["log_probs", "entropy", "response_mask"])
        old = response_from_nested(out.pop("log_probs"), out["response_mask"])
        fields = {"old_log_probs": old, "entropy": response_from_nested(out.pop("entropy"), out["response_mask"])}
        if has_rollout_log_probs(self.config):  # the step rows carry them: the student rows too, the same as old
            fields["rollout_log_probs"] = old.clone()
        tq.kv_batch_put(keys=meta.keys, partition_id=meta.partition_id, fields=TensorDict(fields, batch_size=len(meta)))
        return KVBatchMeta(partition_id=batch.partition_id, keys=list(batch.keys) + list(meta.keys),
                           tags=list(batch.tags) + list(meta.tags), extra_info=dict(batch.extra_info))

    # ------------------------------------------------------------- iteration end
    def step(self, metrics: dict, timing_raw: dict) -> KVBatchMeta:
        batch = super().step(metrics, timing_raw)
        rows = read_rows(batch)
        # the rows keep the clusters that drove their retrieval (the workers' ids), the advantage's step groups:
        # evolution reports those groups, then files the steps under the driver's own clusters. The policy being
        # trained is the weights after global_steps - 1 updates.
        metrics.update(self.forge.keep_iteration([rows.extra[i] for i in np.flatnonzero(rows.real)],
                                                 policy_version=self.global_steps - 1))
        if self.counts_stale_groups:
            metrics.update(self.stale_groups.metrics())
        metrics.update(layout_metrics(self))
        metrics.update(self.rollout_load.metrics(self.rollout_servers()))
        if self.processor is not None:  # a vision-language policy: what the actor's rows carried of their images
            real = [batch.keys[i] for i in np.flatnonzero(rows.real)]
            inputs = tq.kv_batch_get(keys=real, partition_id=batch.partition_id, select_fields=["multi_modal_inputs"])
            metrics.update(image_metrics([getattr(i, "data", i) for i in inputs.pop("multi_modal_inputs").tolist()],
                                         int(self.processor.image_processor.merge_size)))
        return batch

    def on_step_end(self):
        # After verl's weight sync the rollout servers are awake again: the LLM extractor (if configured) is
        # served by the updated policy.
        super().on_step_end()
        self._log_with_this_step(self.forge.end_iteration(self.global_steps - 1, self.timing_raw))

    def _log_with_this_step(self, metrics: dict) -> None:
        """Add ``metrics`` to this step's log: verl merges ``_pending_sync_metrics`` (where its on_step_end may
        leave the weight sync's own figures) into the step's metrics right after on_step_end."""
        self._pending_sync_metrics = {**(getattr(self, "_pending_sync_metrics", None) or {}), **metrics}

    def _save_checkpoint(self):
        super()._save_checkpoint()
        self.forge.checkpoint_saved(os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}"))

    def _load_checkpoint(self):
        from recipe.forge.runs.durable import CheckpointError
        from recipe.forge.runs.checkpoint import refuse_fresh_start

        if self.config.trainer.resume_mode == "auto":
            refuse_fresh_start(self.config.trainer.default_local_dir)  # verl would start over and overwrite them
        result = super()._load_checkpoint()
        if self.global_steps > 0 and self.forge.library.enabled:
            folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
            library = os.path.join(folder, "forge_library")
            if not os.path.exists(library):  # stopped between verl's save and the library's (on_step_end)
                raise CheckpointError(f"{folder} has no forge_library: the run stopped before the library joined "
                                      "this checkpoint; resume the previous one (trainer.resume_mode=resume_path)")
            self.forge.library.load(library)  # library and evolution ledger, checked before they replace them
        self.resumed_at = self.global_steps
        if self.resumed_at > 0 and not self.config.trainer.get("val_only", False):
            # the embedded engine's rule: validation before training only on a fresh start (the restored
            # step was validated, if due, before its checkpoint)
            self.config.trainer.val_before_train = False
        return result


@register_trainer(REGISTERED_MODES["sync"])
class ForgeTrainer(ForgeTrainerLogic, PPOTrainerSync):
    """verl's synchronous trainer with SLEA-RL's step-level parts (``trainer.v1.trainer_mode=sync``)."""

    verl_mode = "sync"


@register_trainer(REGISTERED_MODES["colocate_async"])
class ForgeColocateAsyncTrainer(ForgeTrainerLogic, PPOTrainerColocateAsync):
    """verl's colocate_async trainer (partial rollouts on the training devices) with SLEA-RL's step-level parts."""

    verl_mode = "colocate_async"


@register_trainer(REGISTERED_MODES["separate_async"])
class ForgeSeparateAsyncTrainer(ForgeTrainerLogic, PPOTrainerSeparateAsync):
    """verl's separate_async trainer (standalone rollout devices) with SLEA-RL's step-level parts."""

    verl_mode = "separate_async"

    def _setup(self):
        """verl's setup. With ``actor_rollout_ref.hybrid_engine=false`` (no rollout replica on the training
        devices) verl 0.9.1 logs a line with ``logger.info(..., flush=True)``, which the logging module refuses
        (TypeError) whenever INFO is enabled, verl's default; its module logger is held at WARNING meanwhile."""
        verl_logger = logging.getLogger(PPOTrainerSeparateAsync.__module__)
        level = verl_logger.level
        if not self._enable_hybrid_replicas:
            verl_logger.setLevel(max(level, logging.WARNING))
        try:
            super()._setup()
        finally:
            verl_logger.setLevel(level)


TRAINERS = {cls.verl_mode: cls for cls in (ForgeTrainer, ForgeColocateAsyncTrainer, ForgeSeparateAsyncTrainer)}
