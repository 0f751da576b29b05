"""The embedded SLEA-RL trainer: one process, CPU or one GPU.

One iteration (docs/architecture.md, "One iteration"):

1. rollout of B tasks x G environments through the TrajectoryCollector with the batched HF generator; the
   experience system clusters every step and (after warm-up) injects experiences;
2. step samples -> tensors; reference log-probs (KL loss), critic values (GAE), advantages;
3. PPO-family update with verl's losses (+ self-distillation against the library-as-teacher context), skipped
   with ``trainer.local.freeze_policy`` (the library alone on a frozen policy);
4. library evolution from the batch's trajectories; metrics; validation and checkpoints on schedule.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agent_system.config_checks import ConfigError
from agent_system.multi_turn_rollout.prompt_fit import PromptBudget
from agent_system.multi_turn_rollout.protocols import SamplingParams
from recipe.forge.distillation import library_distillation_weight
from recipe.forge.runs.fit_loop import fit
from recipe.forge.engines.local.advantages import NEEDS_SUM_PI_SQUARED, compute_advantages
from recipe.forge.engines.local.batch import StepBatch, build_step_batch
from recipe.forge.runs.checkpoint import resume_from_checkpoint, save_checkpoint
from recipe.forge.hf.generation import HFGenerator
from recipe.forge.engines.local.lr_schedule import build_lr_scheduler
from recipe.forge.hf.model_loading import Policy, PolicyConfig, build_policy
from recipe.forge.runs.rollout_dump import decoded_prompt, rollout_dump, shown_entries
from recipe.forge.engines.local.timing import PhaseTimer, TimedProvider
from recipe.forge.engines.local.update import DistillationInputs, PolicyUpdater, ValueModel
from recipe.forge.hf.compute import resolve_compute_dtype, resolve_device, seed_everything
from recipe.forge.runs.validation import validation_metrics
from recipe.forge.experience.metrics import reward_metrics
from recipe.forge.run_config import RunConfig


@dataclass
class Components:
    """Pre-built pieces a caller (tests, benchmarks) may pass instead of loading them from the config."""

    policy: Policy | None = None
    critic_backbone: torch.nn.Module | None = None


def adamw(parameters, optim) -> torch.optim.AdamW:
    """AdamW with verl's optimizer config (``optim``: verl's OptimizerConfig: lr, betas, weight_decay)."""
    return torch.optim.AdamW(parameters, lr=optim.lr, betas=tuple(optim.betas), weight_decay=optim.weight_decay)


class LocalTrainer:
    """The embedded engine: ``LocalTrainer(load_run_config(cfg)).fit()`` (recipe/forge/runs/fit_loop.py)."""

    def __init__(self, run: RunConfig, components: Components | None = None):
        from agent_system.environments import make_envs
        from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector

        self.run = run
        self.algorithm = run.algorithm
        policy, local = run.policy, run.local
        components = components or Components()
        if local.num_threads:
            torch.set_num_threads(local.num_threads)
        seed_everything(run.seed)
        self.device = resolve_device(local.device)
        self.compute_dtype = resolve_compute_dtype(local.compute_dtype, self.device)
        if local.compute_dtype == "auto":
            print(f"trainer.local.compute_dtype=auto: {self.compute_dtype} on {self.device.type}", flush=True)
        self.output_dir = Path(run.trainer.output_dir)

        self.policy = components.policy or build_policy(PolicyConfig(
            path=policy.model_path, lora_rank=policy.lora_rank, lora_alpha=policy.lora_alpha,
            target_modules=policy.target_modules, enable_gradient_checkpointing=policy.gradient_checkpointing,
            use_reference=policy.actor.use_kl_loss))
        if policy.actor.use_kl_loss and not self.policy.has_reference:
            raise ConfigError("actor_rollout_ref.actor.use_kl_loss=true needs a reference policy, but the given "
                              "policy was built without one (use_reference=False)")
        self.policy.model.to(self.device)
        if self.policy._reference is not None:
            self.policy._reference.to(self.device)
        self.tokenizer = self.policy.tokenizer
        self.sample_rng = torch.Generator().manual_seed(run.seed)
        self.shuffle_rng = np.random.default_rng(run.seed)
        self.generator = HFGenerator(self.policy.model, self.tokenizer, local.generation_batch_size,
                                     self.sample_rng, autocast=self.autocast,
                                     response_prefix=local.response_prefix,
                                     share_prompt_prefix=local.share_prompt_prefix,
                                     processor=self.policy.processor)
        self.train_envs, self.val_envs = make_envs(run, val_copies=run.rollout.val_copies)
        self.collector = TrajectoryCollector(dynamic_sampling=policy.filter_groups.enable,
                                             max_num_gen_batches=max(0, policy.filter_groups.max_num_gen_batches),
                                             progress=local.progress,  # verl: <= 0 means no limit
                                             prompt_budget=PromptBudget(run.rollout.prompt_length,
                                                                        self.generator.prompt_length))

        self.experience = None
        if self.algorithm.adv_estimator == "forge":
            from recipe.forge.experience import ExperienceSystem

            llm = self._policy_llm if self.algorithm.forge.extractor == "llm" else None
            self.experience = ExperienceSystem.from_algorithm(self.algorithm, tokenizer=self.tokenizer, llm=llm)

        self.optimizer = adamw(self.policy.trainable_parameters(), policy.actor.optim)
        self.critic, self.critic_optimizer = None, None
        if policy.use_critic:
            self.critic = ValueModel(self._critic_backbone(components),
                                     self.policy.model.config.get_text_config().hidden_size)
            self.critic.to(self.device)
            self.critic_optimizer = adamw(self.critic.parameters(), policy.critic_optim)
        self._build_lr_schedulers(done=0)
        # gradient checkpointing drops the KV cache the shared prompt tokens are handed on through, so the
        # update's passes share the prefix only without it (generation, in evaluation mode, shares it either way)
        self.updater = PolicyUpdater(
            self.policy.model, self.optimizer, policy.actor, temperature=run.rollout.temperature,
            share_prompt_prefix=local.share_prompt_prefix and not policy.gradient_checkpointing,
            autocast=self.autocast, critic=self.critic, critic_optimizer=self.critic_optimizer,
            cliprange_value=policy.cliprange_value, rng=self.shuffle_rng, progress=local.progress,
        )
        self.iteration = 0  # iterations done: what a validation pass now runs after, and its dump's file name
        self.dump = rollout_dump(run.trainer.rollout_data_dir, decoded_prompt(self.tokenizer.decode))

    # ------------------------------------------------------------------ helpers
    def _build_lr_schedulers(self, done: int) -> None:
        """verl's lr schedules (lr_schedule.py) for the actor and the critic, ``done`` iterations in."""
        policy, total = self.run.policy, self.run.trainer.total_iterations
        self.lr_scheduler = build_lr_scheduler(self.optimizer, policy.actor.optim, total, done)
        self.critic_lr_scheduler = None
        if self.critic_optimizer is not None:
            self.critic_lr_scheduler = build_lr_scheduler(self.critic_optimizer, policy.critic_optim, total, done)

    def autocast(self):
        if self.compute_dtype == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _critic_backbone(self, components: Components) -> torch.nn.Module:
        if components.critic_backbone is not None:
            return components.critic_backbone
        from transformers import AutoModel, AutoModelForImageTextToText

        from recipe.forge.hf.model_paths import resolve_model_path
        from recipe.forge.hf.model_paths import reads_images

        path = self.run.policy.critic_model_path or self.run.policy.model_path
        if reads_images(path):
            # AutoModel would not map a vision-language folder's saved names (model.layers.*) onto the bare model's
            # modules (language_model.layers.*) and would start the language model from random weights
            return AutoModelForImageTextToText.from_pretrained(resolve_model_path(path)).base_model
        return AutoModel.from_pretrained(resolve_model_path(path))

    def _policy_llm(self, prompt: str) -> str:
        """The LLM extractor's model: the policy itself, greedy."""
        out = self.generator.generate([[{"role": "user", "content": prompt}]],
                                      SamplingParams(temperature=0.0, do_sample=False, max_new_tokens=256, stop=()))
        return out[0].text

    def _rng_handles(self) -> dict[str, Any]:
        return {"sampler": self.sample_rng, "shuffle": self.shuffle_rng, "env_tasks": self.train_envs.task_rng}

    # ------------------------------------------------------------------ one iteration
    def train_iteration(self, iteration: int) -> dict[str, float]:
        local = self.run.local
        timer = PhaseTimer()
        provider = None
        if self.experience is not None:
            self.experience.begin_iteration(iteration)
            provider = TimedProvider(self.experience.provider, timer, "forge_retrieval")
        with timer.phase("gen"):
            self.generator.tokens_generated = 0
            self.generator.policy_version = iteration  # the weights after ``iteration`` updates
            rollout = self.collector.collect(self.train_envs, self.generator, self.run.rollout.sampling(),
                                             experience_provider=provider)
            generated = self.generator.tokens_generated
        timer.exclude("gen", "forge_retrieval")
        with timer.phase("prepare"):
            batch = build_step_batch(rollout, self.tokenizer.pad_token_id, self.algorithm.invalid_action_penalty_coef,
                                     self.generator.image_prompts)
        if local.freeze_policy:  # the library alone (or the frozen policy itself): no update
            return self._finish_iteration(iteration, rollout, batch, generated, timer, {}, None)
        with timer.phase("prepare"):
            old_log_probs = batch.old_log_probs
            needs_pi2 = self.algorithm.adv_estimator in NEEDS_SUM_PI_SQUARED
            sum_pi_squared = None
            if local.recompute_old_log_probs or needs_pi2:
                result = self.updater.log_probs(self.policy.model, batch.packed, with_sum_pi_squared=needs_pi2)
                old_log_probs, sum_pi_squared = result if needs_pi2 else (result, None)
            ref_log_probs = None
            if self.run.policy.actor.use_kl_loss:
                with self.policy.reference_context():
                    ref_log_probs = self.updater.log_probs(self.policy.reference_model(), batch.packed)
            values = self.updater.values(batch.packed) if self.critic is not None else None
        with timer.phase("adv"):
            advantages, returns = compute_advantages(batch, self.algorithm, values=values,
                                                     sum_pi_squared=sum_pi_squared)
        distill = self._distillation_inputs(batch)
        with timer.phase("update_actor"):
            update_metrics = self.updater.update(batch, advantages, old_log_probs, ref_log_probs,
                                                 returns=returns, old_values=values, distill=distill)
        update_metrics.update(self._step_lr_schedulers())
        return self._finish_iteration(iteration, rollout, batch, generated, timer, update_metrics, distill)

    def _finish_iteration(self, iteration: int, rollout, batch: StepBatch, generated: int, timer: PhaseTimer,
                          update_metrics: dict[str, float], distill: DistillationInputs | None) -> dict[str, float]:
        """Library evolution, the iteration's metrics and the rollout dump, after the update (or instead of it,
        with ``trainer.local.freeze_policy``)."""
        metrics: dict[str, float] = dict(rollout.metrics)
        metrics.update(update_metrics)
        library = self.experience.library if self.experience is not None else None
        shown = shown_entries(rollout.trajectories, library) if self.dump is not None else {}
        if self.experience is not None:
            with timer.phase("forge_evolution"):
                metrics.update(self.experience.evolve(rollout.trajectories, iteration))
        metrics.update(self._batch_metrics(batch, rollout, generated))
        if self.dump is not None:  # after evolve: steps carry the driver's cluster ids; entries as they were shown
            self.dump.write(rollout.trajectories, iteration + 1, shown)
        if distill is not None:
            metrics["distill/weight"] = distill.weight
            metrics["distill/rows"] = float(len(distill.rows))
        metrics.update(timer.metrics())
        return metrics

    def _step_lr_schedulers(self) -> dict[str, float]:
        """One scheduler step per iteration, after the update, as verl does; logs the next iteration's lr."""
        self.lr_scheduler.step()
        metrics = {"actor/lr": self.lr_scheduler.get_last_lr()[0]}
        if self.critic_lr_scheduler is not None:
            self.critic_lr_scheduler.step()
            metrics["critic/lr"] = self.critic_lr_scheduler.get_last_lr()[0]
        return metrics

    def _batch_metrics(self, batch: StepBatch, rollout, generated: int) -> dict[str, float]:
        mask = batch.response_mask
        return {
            **reward_metrics(rollout.trajectories, self.algorithm.forge.success_threshold),
            "tokens/response_mean": float(mask.sum(-1).mean()),
            "tokens/prompt_mean": float(batch.packed.attention_mask[:, :batch.packed.prompt_length].sum(-1).float().mean()),
            "tokens/generated": float(generated),
            "batch/num_samples": float(len(batch)),
        }

    def _distillation_inputs(self, batch: StepBatch) -> DistillationInputs | None:
        forge = self.algorithm.forge
        if self.experience is None or not forge.use_distillation:
            return None
        weight = library_distillation_weight(len(self.experience.library), forge)
        return DistillationInputs.of_batch(batch, self.generator.encode, self.tokenizer.pad_token_id, weight,
                                           forge.divergence_type, forge.distill_temperature)

    # ------------------------------------------------------------------ validation
    def validate(self) -> dict[str, float]:
        """Held-out seeds at the validation temperature, with the library (forge) and without it; dumped as
        iteration ``self.iteration`` with ``trainer.rollout_data_dir``."""
        self.generator.policy_version = self.iteration
        return validation_metrics(self.collector, self.val_envs, self.generator, self.run.rollout.sampling(True),
                                  self.experience, self.tokenizer, self.dump, self.iteration)

    # ------------------------------------------------------------------ checkpoints
    def save(self, iteration: int) -> Path:
        return save_checkpoint(self.output_dir, iteration, policy=self.policy, optimizer=self.optimizer,
                               rng=self._rng_handles(), critic=self.critic, critic_optimizer=self.critic_optimizer,
                               experience=self.experience)

    def resume(self) -> int:
        """Iterations already done according to the resume mode (0 when starting fresh)."""
        t = self.run.trainer
        done = resume_from_checkpoint(self.output_dir, t.resume_mode, t.resume_from_path, policy=self.policy,
                                      optimizer=self.optimizer, rng=self._rng_handles(), critic=self.critic,
                                      critic_optimizer=self.critic_optimizer, experience=self.experience)
        if done:
            self._build_lr_schedulers(done=done)
        return done

    # ------------------------------------------------------------------ loop
    def fit(self, plan=None) -> list[dict[str, float]]:
        """Train to ``trainer.total_training_steps`` iterations (fit_loop.fit) from ``plan`` (recipe/forge/runs/run_start.py;
        None: decided there); returns the logged metrics."""
        return fit(self, self.run, "SLEA-RL iterations", plan)
