"""verl's synchronous V1 PPO trainer with SLEA-RL's step-level parts, registered as trainer mode ``forge``.

Select it with ``trainer.v1.trainer_mode=forge`` (run_verl does). Compared with verl's ``sync`` trainer:

* advantage step: rows are per-step samples of the ``forge_agent`` loop. Their token-level score is rebuilt
  from extra_fields (episode return minus the step's invalid-action penalty; verl's own reward_score is the
  last step's), and ``forge`` / ``gigpo`` group steps by (uid, cluster) / (uid, anchor) with discounted step
  returns through recipe/forge/core_forge.py. Every other estimator in verl's registry runs verl's own step
  on the rebuilt scores;
* after each iteration, on the driver: episode metrics, library evolution from the iteration's trajectories,
  publication of the new library version to the agent-loop workers, forge/* metrics, and a library checkpoint
  every ``algorithm.forge.library_save_freq`` iterations (and with every trainer checkpoint);
* optional self-distillation (algorithm.forge.use_distillation): see recipe/forge/engines/verl/distill.py.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import torch
import transfer_queue as tq
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.debug import marked_timer
from verl.workers.utils.padding import response_to_nested

from recipe.forge.distillation import distillation_weight
from recipe.forge.engines.verl import step_batch
from recipe.forge.engines.verl.distill import check_distillation_config, distillation_advantage
from recipe.forge.engines.verl.library_driver import LibraryDriver, RolloutServerLLM

logger = logging.getLogger(__name__)

TRAINER_MODE = "forge"
TEACHER_PARTITION = "forge_teacher"


def rows_to_step_data(batch: KVBatchMeta) -> tuple[np.ndarray, Any, list[dict], np.ndarray]:
    """Fetch (uid (bs,), nested response_mask, extra_fields list, real-row mask (bs,)) of a TQ batch."""
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["uid", "response_mask", "extra_fields"])
    # pop (not []) returns the NonTensorStack, whose tolist() gives the per-row python objects
    uid = np.array(data.pop("uid").tolist(), dtype=object)
    extra = [getattr(e, "data", e) for e in data.pop("extra_fields").tolist()]
    real = np.array([not tag.get("is_padding", False) for tag in batch.tags], dtype=bool)
    return uid, data["response_mask"], extra, real


def compute_batch_advantages(
    estimator: str,
    uid: np.ndarray,
    response_mask: torch.Tensor,
    extra_fields: list[dict],
    real: np.ndarray,
    algorithm: Any,
) -> dict[str, torch.Tensor]:
    """Token-level scores, and for step-level estimators advantages and returns, of a padded batch.

    Args:
        response_mask: (bs, response_len) padded.
        extra_fields: (bs,) per-row dicts; padding rows (``real`` False) are ignored and get zeros.

    Returns:
        {"rm_scores": (bs, L)} plus {"advantages", "returns": (bs, L)} for forge / gigpo.
    """
    idx = np.flatnonzero(real)
    steps = step_batch.step_arrays([extra_fields[i] for i in idx])
    coef = float(step_batch._get(algorithm, "invalid_action_penalty_coef"))
    mask = response_mask[idx]
    scores = torch.zeros(response_mask.shape, dtype=torch.float32)
    scores[idx] = step_batch.token_level_scores(steps, mask, coef)
    out = {"rm_scores": scores}
    if estimator in step_batch.STEP_ESTIMATORS:
        adv, _ = step_batch.compute_step_advantage(estimator, scores[idx], mask, uid[idx], steps, algorithm)
        advantages = torch.zeros(response_mask.shape, dtype=torch.float32)
        advantages[idx] = adv.to(torch.float32)
        out["advantages"] = advantages
        out["returns"] = advantages.clone()
    return out


@register_trainer(TRAINER_MODE)
class ForgeTrainer(PPOTrainerSync):
    """verl's sync trainer + step-level advantages, library evolution and forge metrics."""

    # verl's base class branches on ``trainer_mode == "sync"`` (replay buffer, checkpoint contents, prompt
    # submission). This trainer IS the synchronous trainer, so it reports "sync" to those branches while
    # being registered under its own name.
    @property
    def trainer_mode(self) -> str:
        return "sync"

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        self.registered_mode = value

    def __init__(self, config):
        super().__init__(config)
        self.init_forge_state(config)

    def init_forge_state(self, config) -> None:
        """SLEA-RL's driver state (library, distillation, per-batch caches); separate from verl's own set-up so
        the advantage and library steps can be exercised without actor workers."""
        self.config = config
        llm = None
        if str(config.algorithm.forge.extractor) == "llm":
            llm = RolloutServerLLM(lambda: self.llm_server_manager.get_addresses())
        self.library = LibraryDriver.from_trainer_config(config, llm=llm)
        self._iteration_rows: list[dict] = []
        self._checkpoint_folder: str | None = None  # set when verl saved a checkpoint this iteration
        self._driver_clusters: dict[str, int | None] = {}  # batch key -> cluster id after absorb
        self.distill = bool(config.algorithm.forge.use_distillation) and self.library.enabled
        if self.distill:
            from agent_system.environments.config import env_config_from_mapping
            from omegaconf import OmegaConf

            check_distillation_config(config.algorithm, env_config_from_mapping(OmegaConf.to_container(config.env)))
        self._teacher_log_probs: dict[str, torch.Tensor] = {}  # batch key -> (response_len,) teacher log-probs

    def on_init_end(self):
        super().on_init_end()
        self.library.begin_iteration(max(self.global_steps - 1, 0))

    def on_step_begin(self):
        super().on_step_begin()
        self.library.begin_iteration(self.global_steps - 1)

    # ------------------------------------------------------------ advantage step
    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        estimator = str(self.config.algorithm.adv_estimator)
        if estimator in step_batch.STEP_ESTIMATORS and self.config.algorithm.use_kl_in_reward:
            raise ValueError(f"algorithm.use_kl_in_reward is not supported with the {estimator!r} estimator")
        uid, nested_mask, extra, real = rows_to_step_data(batch)
        if self.library.enabled:
            # the workers' local cluster ids become the driver's clusters: the groups of the advantage
            # are the clusters that drive retrieval from the next version on
            real_idx = np.flatnonzero(real)
            clusters = self.library.absorb([extra[i] for i in real_idx])
            for i, cluster in zip(real_idx, clusters):
                extra[i] = {**extra[i], "cluster_id": cluster}
                self._driver_clusters[batch.keys[i]] = cluster
        padded_mask = TensorDict({"m": nested_mask}, batch_size=len(batch)).to_padded_tensor()["m"]
        computed = compute_batch_advantages(estimator, uid, padded_mask, extra, real, self.config.algorithm)
        fields = TensorDict(
            {name: response_to_nested(value, nested_mask) for name, value in computed.items()}, batch_size=len(batch)
        )
        batch = tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)
        if estimator not in step_batch.STEP_ESTIMATORS:
            batch = super()._compute_advantage(batch, metrics)
        if self.distill:
            batch = self._add_distillation_term(batch, metrics)
        return batch

    # ------------------------------------------------------------ self-distillation
    def _compute_old_log_prob(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        batch = super()._compute_old_log_prob(batch, metrics)
        if self.distill:
            self._compute_teacher_log_probs(batch)
        return batch

    def _compute_teacher_log_probs(self, batch: KVBatchMeta) -> None:
        """The actor's log-prob pass over (library-augmented prompt + the same response) of every row that had
        experiences; the result stays on the driver until the advantage step."""
        from verl.utils.tensordict_utils import list_of_dict_to_tensordict

        _, _, extra, real = rows_to_step_data(batch)
        rows = [i for i in np.flatnonzero(real) if extra[i].get("teacher_prompt_ids")]
        self._teacher_log_probs = {}
        if not rows:
            return
        keys = [batch.keys[i] for i in rows]
        full = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id)
        if any(len(m) for m in full.pop("multi_modal_inputs", [{}] * len(rows)).tolist() if isinstance(m, dict)):
            raise ValueError("self-distillation on the verl engine supports text observations only")
        samples, tags = [], []
        for j, i in enumerate(rows):
            sample = {name: full[name][j] for name in ("responses", "response_mask", "rollout_log_probs") if name in full}
            prompt = torch.tensor(extra[i]["teacher_prompt_ids"], dtype=torch.int64)
            sample["prompts"] = prompt
            sample["input_ids"] = torch.cat([prompt, sample["responses"]])
            sample["attention_mask"] = torch.ones_like(sample["input_ids"])
            sample["position_ids"] = torch.arange(sample["input_ids"].numel(), dtype=torch.int64)
            sample["loss_mask"] = sample["response_mask"]
            sample["multi_modal_inputs"] = {}
            samples.append(sample)
            tag = dict(batch.tags[i])
            tag.update(prompt_len=prompt.numel(), seq_len=int(sample["input_ids"].numel()))
            tags.append(tag)
        teacher_keys = [f"{key}_teacher" for key in keys]
        tq.kv_batch_put(keys=teacher_keys, partition_id=TEACHER_PARTITION, fields=list_of_dict_to_tensordict(samples), tags=tags)
        meta = self._balance_batch(KVBatchMeta(partition_id=TEACHER_PARTITION, keys=teacher_keys, tags=tags), {}, "forge_teacher_seqlen")
        meta.extra_info.update(
            {"calculate_entropy": False, "compute_loss": False, "temperature": self.config.actor_rollout_ref.rollout.temperature}
        )
        self.actor_rollout_wg.compute_log_prob(meta)
        out = tq.kv_batch_get(keys=teacher_keys, partition_id=TEACHER_PARTITION, select_fields=["log_probs", "response_mask"])
        log_probs = response_from_nested(out.pop("log_probs"), out["response_mask"])
        for key, values in zip(keys, log_probs.unbind()):
            self._teacher_log_probs[key] = values
        tq.kv_clear(keys=meta.keys, partition_id=TEACHER_PARTITION)

    def _add_distillation_term(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        """advantages (and returns) += -w (log pi_student - log pi_teacher) on the rows that had a teacher."""
        forge = self.config.algorithm.forge
        capacity = 3 * (int(forge.golden_capacity_per_level) + int(forge.warning_capacity_per_level))
        weight = distillation_weight(len(self.library.system.library), capacity, float(forge.max_distill_weight))
        metrics["forge/distill_weight"] = weight
        keys = [k for k in batch.keys if k in self._teacher_log_probs]
        if not keys or weight == 0.0:
            return batch
        data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=["old_log_probs", "advantages", "response_mask"])
        nested_mask = data["response_mask"]
        padded = data.to_padded_tensor()
        teacher = torch.nn.utils.rnn.pad_sequence([self._teacher_log_probs[k] for k in keys], batch_first=True)
        teacher = teacher[:, : padded["old_log_probs"].shape[1]]
        term = distillation_advantage(padded["old_log_probs"], teacher, padded["response_mask"], weight)
        advantages = padded["advantages"] + term
        metrics["forge/distill_logprob_gap"] = float(
            ((padded["old_log_probs"] - teacher) * padded["response_mask"]).sum() / padded["response_mask"].sum().clamp(min=1)
        )
        fields = TensorDict(
            {"advantages": response_to_nested(advantages, nested_mask), "returns": response_to_nested(advantages, nested_mask)},
            batch_size=len(keys),
        )
        tq.kv_batch_put(keys=keys, partition_id=batch.partition_id, fields=fields)
        self._teacher_log_probs = {}
        return batch

    # ------------------------------------------------------------- iteration end
    def step(self, metrics: dict, timing_raw: dict) -> KVBatchMeta:
        batch = super().step(metrics, timing_raw)
        _, _, extra, real = rows_to_step_data(batch)
        self._iteration_rows = [
            {**extra[i], "cluster_id": self._driver_clusters.get(batch.keys[i], extra[i].get("cluster_id"))}
            for i in np.flatnonzero(real)
        ]
        self._driver_clusters.clear()
        metrics.update(step_batch.episode_metrics(step_batch.step_arrays(self._iteration_rows)))
        return batch

    def on_step_end(self):
        # After verl's weight sync the rollout servers are awake again: the LLM extractor (if configured) is
        # served by the updated policy. The metrics reach this step's log through verl's pending-sync metrics.
        super().on_step_end()
        with marked_timer("forge_library", self.timing_raw, color="purple"):
            library_metrics = self.library.end_iteration(self._iteration_rows, self.global_steps - 1)
        self._iteration_rows = []
        self._pending_sync_metrics = {**(getattr(self, "_pending_sync_metrics", None) or {}), **library_metrics}
        if self._checkpoint_folder is not None:
            # verl saved its checkpoint before on_step_end; the library joins it once this iteration evolved it
            self.library.save(os.path.join(self._checkpoint_folder, "forge_library"))
            self._checkpoint_folder = None

    def _save_checkpoint(self):
        super()._save_checkpoint()
        self._checkpoint_folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")

    def _load_checkpoint(self):
        from recipe.forge.durable import CheckpointError
        from recipe.forge.engines.local.checkpoint import refuse_fresh_start

        if self.config.trainer.resume_mode == "auto":
            refuse_fresh_start(self.config.trainer.default_local_dir)  # verl would start over and overwrite them
        result = super()._load_checkpoint()
        if self.global_steps > 0 and self.library.enabled:
            folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
            library = os.path.join(folder, "forge_library")
            if not os.path.exists(library):  # stopped between verl's save and the library's (on_step_end)
                raise CheckpointError(f"{folder} has no forge_library: the run stopped before the library joined "
                                      "this checkpoint; resume the previous one (trainer.resume_mode=resume_path)")
            self.library.system.load(library)  # checked in full before it replaces the library
        return result
