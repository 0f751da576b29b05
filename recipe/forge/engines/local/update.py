"""One policy (and critic) update over a StepBatch with verl's losses.

Policy loss: ``verl.trainer.ppo.core_algos.get_policy_loss_fn(loss_mode)`` (vanilla PPO-clip, GSPO,
clip-cov, ...), configured by a verl ``ActorConfig``; KL loss: ``kl_penalty`` + ``agg_loss``; entropy bonus:
``agg_loss`` over token entropies; critic: ``compute_value_loss``. Mini-batches of samples, each split into
micro-batches whose gradients accumulate; ``global_batch_info`` tells verl's aggregation the mini-batch's
token and sample counts, so the accumulated gradient equals the gradient of the mini-batch's token-mean.

The loop is flat: ``UpdateTargets`` slices the inputs into mini-batches (their ``MiniBatchNorm`` totals) and
micro-batches (``MicroBatch``); ``PolicyUpdater.policy_loss`` and ``critic_loss`` give a micro-batch's share of
its mini-batch's losses; ``MetricsAccumulator`` averages the metrics.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from recipe.forge.distillation import distillation_loss, distilled_step
from recipe.forge.engines.local.batch import StepBatch
from recipe.forge.hf.sequences import (PackedSequences, entropy_from_logits, forward_inputs, pack,
                                                  response_logits, token_logprobs)
from recipe.forge.hf.vision_inputs import PromptImages


# Losses whose per-token value is the advantage times a function of the ratio: a row with zero advantage
# contributes exactly zero gradient, so it can be skipped (the token count still covers it).
ADVANTAGE_LINEAR_LOSSES = ("vanilla", "gspo", "gpg")
SUMMED_METRICS = ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "critic/vf_loss", "distill/loss")


@dataclass
class DistillationInputs:
    """Rows whose rollout prompt carried experiences: the student sees ``plain`` (no experiences), the
    teacher sees ``privileged`` (the rollout prompt); both end with the same response tokens."""

    rows: torch.Tensor  # (m,) row indices into the StepBatch
    plain: PackedSequences
    privileged: PackedSequences
    weight: float
    divergence: str
    temperature: float

    @classmethod
    def of_batch(cls, batch: StepBatch, encode: Callable[[list], tuple[list[int], PromptImages | None]],
                 pad_token_id: int, weight: float, divergence: str, temperature: float) -> "DistillationInputs | None":
        """The rows of ``batch`` that are distillation rows (``distilled_step``), the student's prompt encoded by
        ``encode`` (the generator's ``HFGenerator.encode``: the ids and, for a vision-language policy, the
        images); None when there is none or ``weight`` is 0. The teacher's prompts are the batch's rows, with
        their images where the batch carries images (a vision-language policy's batch), and so are the student's."""
        rows = [i for i, r in enumerate(batch.records) if distilled_step(r.messages, r.plain_messages)]
        if not rows or weight == 0.0:
            return None
        records = [batch.records[i] for i in rows]
        responses = [r.response_ids for r in records]
        students = [encode(r.plain_messages) for r in records]
        student_images, teacher_images = None, None
        if batch.packed.images is not None:
            student_images = [images for _, images in students]
            teacher_images = [batch.packed.images[i] for i in rows]
        plain = pack([ids for ids, _ in students], responses, pad_token_id, images=student_images)
        privileged = pack([r.prompt_ids for r in records], responses, pad_token_id, images=teacher_images)
        return cls(torch.as_tensor(rows), plain, privileged, weight, divergence, temperature)


class ValueModel(nn.Module):
    """Critic: a transformer backbone with a scalar head per position (verl's token-classification critic)."""

    def __init__(self, backbone: nn.Module, hidden_size: int):
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, packed: PackedSequences, share_prefix: bool = False) -> torch.Tensor:
        """Values of the states before each response token: (bs, R) float32."""
        hidden = self.backbone(**forward_inputs(self.backbone, packed, share_prefix)).last_hidden_state
        r = packed.responses.shape[1]
        return self.value_head(hidden[:, -(r + 1):-1, :]).squeeze(-1).float()


def _chunks(rows: np.ndarray, size: int) -> list[np.ndarray]:
    return [rows[i:i + size] for i in range(0, len(rows), size)]


@dataclass
class MiniBatchNorm:
    """A mini-batch's totals, which its micro-batches' losses are normalised by so that they sum to the
    mini-batch's loss (verl's ``global_batch_info``)."""

    batch_num_tokens: float  # response tokens in the mini-batch (at least 1)
    global_batch_size: int  # samples in the mini-batch
    distill_tokens: torch.Tensor | None  # 0-dim: response tokens of its distillation rows; None without any

    def agg_kwargs(self) -> dict:
        """Keyword arguments of verl's ``agg_loss`` (one data-parallel rank)."""
        return {"dp_size": 1, "batch_num_tokens": self.batch_num_tokens, "global_batch_size": self.global_batch_size}


@dataclass
class MicroBatch:
    """What one micro-batch's losses read, on the update's device: m rows, R response columns."""

    rows: torch.Tensor  # (m,) row indices into the StepBatch
    packed: PackedSequences  # (m, P + R)
    advantages: torch.Tensor  # (m, R)
    old_log_probs: torch.Tensor  # (m, R)
    ref_log_probs: torch.Tensor | None  # (m, R), with the KL loss
    returns: torch.Tensor | None  # (m, R), with a critic
    old_values: torch.Tensor | None  # (m, R), with a critic
    distill: DistillationInputs | None
    distill_rows: torch.Tensor  # (k,) indices into ``distill.rows`` of the micro-batch's distillation rows


@dataclass
class UpdateTargets:
    """An update's inputs, row-aligned with its StepBatch (n rows, R response columns), sliced into mini- and
    micro-batches."""

    batch: StepBatch
    advantages: torch.Tensor  # (n, R)
    old_log_probs: torch.Tensor  # (n, R)
    ref_log_probs: torch.Tensor | None  # (n, R), with the KL loss
    returns: torch.Tensor | None  # (n, R), with a critic
    old_values: torch.Tensor | None  # (n, R), with a critic
    distill: DistillationInputs | None

    def __post_init__(self):
        # (n,): a row's index into distill.rows, -1 for a row without distillation.
        self.distill_of_row = torch.full((len(self.batch),), -1, dtype=torch.long)
        if self.distill is not None:
            self.distill_of_row[self.distill.rows] = torch.arange(len(self.distill.rows))

    def rows_to_train(self, skip_zero_advantage: bool) -> np.ndarray:
        """(n,) bool: the rows that get a forward pass (every row, or those with a non-zero advantage)."""
        if skip_zero_advantage:
            return (self.advantages.abs().sum(-1) > 0).numpy()
        return np.ones(len(self.batch), dtype=bool)

    def mini_batch_norm(self, rows: np.ndarray) -> MiniBatchNorm:
        """The totals of the mini-batch made of ``rows`` ((b,) indices), skipped rows included."""
        distill_rows = self.distill_of_row[rows]
        distill_rows = distill_rows[distill_rows >= 0]
        distill_tokens = None
        if len(distill_rows):
            distill_tokens = self.distill.plain.response_mask[distill_rows].sum().clamp(min=1.0)
        return MiniBatchNorm(float(self.batch.response_mask[rows].sum().clamp(min=1.0)), len(rows), distill_tokens)

    def micro_batch(self, rows: np.ndarray, device: torch.device) -> MicroBatch:
        """The micro-batch of ``rows`` ((m,) indices) on ``device``."""
        idx = torch.as_tensor(rows)
        distill_rows = self.distill_of_row[idx]

        def take(values: torch.Tensor | None) -> torch.Tensor | None:
            return None if values is None else values[idx].to(device)

        return MicroBatch(idx, self.batch.packed.select(idx).to(device), take(self.advantages),
                          take(self.old_log_probs), take(self.ref_log_probs), take(self.returns),
                          take(self.old_values), self.distill, distill_rows[distill_rows >= 0])


class MetricsAccumulator:
    """Averages an update's metrics over its micro- and mini-batches.

    The loss terms in ``SUMMED_METRICS`` of a mini-batch's micro-batches are shares of the mini-batch's loss:
    they are summed per mini-batch, and the mini-batch losses averaged. Every other micro-batch metric (clip
    fractions, ...) is averaged over micro-batches, and ``actor/grad_norm`` over mini-batches.
    """

    def __init__(self):
        self._values: dict[str, list[float]] = {}
        self._mini_batch_losses: dict[str, float] = {}

    def add_micro_batch(self, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            if key in SUMMED_METRICS:
                self._mini_batch_losses[key] = self._mini_batch_losses.get(key, 0.0) + float(value)
            else:
                self._values.setdefault(key, []).append(float(value))

    def end_mini_batch(self, grad_norm: torch.Tensor | float) -> None:
        for key, value in self._mini_batch_losses.items():
            self._values.setdefault(key, []).append(value)
        self._mini_batch_losses = {}
        self._values.setdefault("actor/grad_norm", []).append(float(grad_norm))

    def averages(self) -> dict[str, float]:
        return {key: float(np.mean(values)) for key, values in self._values.items()}


class PolicyUpdater:
    """Runs PPO-family epochs over a StepBatch for the policy (and the critic when one is given)."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, actor, temperature: float = 1.0,
                 share_prompt_prefix: bool = True,
                 autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                 critic: ValueModel | None = None, critic_optimizer: torch.optim.Optimizer | None = None,
                 cliprange_value: float = 0.5, rng: np.random.Generator | None = None, progress: bool = False):
        """``actor``: verl's actor config as it is (FSDPActorConfig: the policy loss and its settings, epochs,
        mini- and micro-batch sizes, grad_clip); ``temperature``: the rollout's, which the log-probs are taken at;
        ``share_prompt_prefix``: run a micro-batch's shared prompt tokens once (sequences.forward_inputs);
        ``cliprange_value``: the critic's value clip (verl's ``critic.cliprange_value``); ``progress``: a progress
        bar over the update's micro-batches (the longest phase of an iteration on a CPU)."""
        from verl.trainer.ppo.core_algos import get_policy_loss_fn

        self.model = model
        self.optimizer = optimizer
        # verl's policy losses read each mini-batch's totals from the config's global_batch_info, which the update
        # writes: a copy of its own, so the run config's actor stays as it was read
        self.actor = dataclasses.replace(actor, global_batch_info={})
        self.temperature = temperature
        self.share_prompt_prefix = share_prompt_prefix
        self.autocast = autocast
        self.critic = critic
        self.critic_optimizer = critic_optimizer
        self.cliprange_value = cliprange_value
        self.policy_loss_fn = get_policy_loss_fn(actor.policy_loss.loss_mode)
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.progress = progress
        self.device = next(model.parameters()).device

    @property
    def mini_batch_rows(self) -> int:
        """Step samples per optimizer step: ``ppo_mini_batch_size`` counts tasks and, as in verl, is multiplied by
        the ``rollout_n`` copies of each task (a row is one step sample on both engines)."""
        return self.actor.ppo_mini_batch_size * self.actor.rollout_n

    @property
    def micro_batch_rows(self) -> int:
        """Step samples per forward/backward pass (``ppo_micro_batch_size_per_gpu``, else the deprecated
        ``ppo_micro_batch_size``; verl's ActorConfig refuses both set or neither)."""
        a = self.actor
        return a.ppo_micro_batch_size_per_gpu if a.ppo_micro_batch_size_per_gpu is not None else a.ppo_micro_batch_size

    # ------------------------------------------------------------------ no-grad passes
    @torch.no_grad()
    def log_probs(self, model: nn.Module, packed: PackedSequences, with_sum_pi_squared: bool = False):
        """(n, R) log-probs of the response tokens (and (n, R) sum of p^2 when asked), micro-batched."""
        outs, sums = [], []
        rows = np.arange(packed.input_ids.shape[0])
        for chunk in _chunks(rows, self.micro_batch_rows):
            sub = packed.select(torch.as_tensor(chunk)).to(self.device)
            with self.autocast():
                logits = response_logits(model, sub, self.share_prompt_prefix)
            outs.append(token_logprobs(logits, sub.responses, self.temperature).cpu())
            if with_sum_pi_squared:
                probs = torch.softmax(logits.float() / self.temperature, dim=-1)
                sums.append((probs * probs).sum(-1).cpu())
        logp = torch.cat(outs) * packed.response_mask
        return (logp, torch.cat(sums) * packed.response_mask) if with_sum_pi_squared else logp

    @torch.no_grad()
    def values(self, packed: PackedSequences) -> torch.Tensor:
        rows = np.arange(packed.input_ids.shape[0])
        outs = []
        for chunk in _chunks(rows, self.micro_batch_rows):
            with self.autocast():
                outs.append(self.critic(packed.select(torch.as_tensor(chunk)).to(self.device),
                                        self.share_prompt_prefix).cpu())
        return torch.cat(outs) * packed.response_mask

    # ------------------------------------------------------------------ update
    def update(
        self,
        batch: StepBatch,
        advantages: torch.Tensor,
        old_log_probs: torch.Tensor,
        ref_log_probs: torch.Tensor | None = None,
        returns: torch.Tensor | None = None,
        old_values: torch.Tensor | None = None,
        distill: DistillationInputs | None = None,
    ) -> dict[str, float]:
        """PPO epochs over mini-batches; returns averaged metrics (actor/*, critic/*, distill/*).

        Args:
            batch: the n step samples, responses (n, R).
            advantages, old_log_probs: (n, R).
            ref_log_probs: (n, R), needed with the KL loss.
            returns, old_values: (n, R), needed with a critic.
            distill: the rows trained toward their privileged (experience-carrying) prompt, if any.
        """
        a = self.actor
        if a.use_kl_loss and ref_log_probs is None:
            raise ValueError("use_kl_loss is set but update() got no ref_log_probs")
        if self.critic is not None and (returns is None or old_values is None):
            raise ValueError("the updater has a critic but update() got no returns or old_values")
        targets = UpdateTargets(batch, advantages, old_log_probs, ref_log_probs, returns, old_values, distill)
        trained = targets.rows_to_train(self._skips_zero_advantage_rows(distill))
        metrics = MetricsAccumulator()
        self.model.train()
        with tqdm(desc="update", unit="micro-batch", total=0, leave=False, disable=not self.progress) as bar:
            for _ in range(a.ppo_epochs):
                order = self.rng.permutation(len(batch)) if a.shuffle else np.arange(len(batch))
                minis = [(mini, _chunks(mini[trained[mini]], self.micro_batch_rows))
                         for mini in _chunks(order, self.mini_batch_rows)]
                bar.total += sum(len(micros) for _, micros in minis)
                bar.refresh()
                for mini, micros in minis:
                    self._zero_grad()
                    norm = targets.mini_batch_norm(mini)
                    for rows in micros:
                        metrics.add_micro_batch(self._backward(targets.micro_batch(rows, self.device), norm))
                        bar.update()
                    metrics.end_mini_batch(self._step())
        return metrics.averages()

    def _skips_zero_advantage_rows(self, distill: DistillationInputs | None) -> bool:
        """Whether rows with zero advantage add nothing to the loss's gradient (so can be skipped)."""
        a = self.actor
        return (a.policy_loss.loss_mode in ADVANTAGE_LINEAR_LOSSES and not a.use_kl_loss and a.entropy_coeff == 0.0
                and distill is None and self.critic is None)

    def _zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        if self.critic_optimizer is not None:
            self.critic_optimizer.zero_grad(set_to_none=True)

    def _backward(self, micro: MicroBatch, norm: MiniBatchNorm) -> dict[str, float]:
        """Accumulate the micro-batch's share of the mini-batch gradients (policy, then critic); its metrics."""
        loss, metrics = self.policy_loss(micro, norm)
        loss.backward()
        if self.critic is not None:
            vf_loss, vf_metrics = self.critic_loss(micro, norm)
            vf_loss.backward()
            metrics.update(vf_metrics)
        return metrics

    def _step(self) -> torch.Tensor:
        """Clip and apply the accumulated gradients; the policy's pre-clip gradient norm (a 0-dim tensor).
        A non-finite policy gradient skips the policy's step."""
        grad_clip = self.actor.grad_clip
        grad_norm = torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad],
                                                   grad_clip)
        if torch.isfinite(grad_norm):
            self.optimizer.step()
        if self.critic is not None:
            torch.nn.utils.clip_grad_norm_(self.critic.parameters(), grad_clip)
            self.critic_optimizer.step()
        return grad_norm

    def policy_loss(self, micro: MicroBatch, norm: MiniBatchNorm) -> tuple[torch.Tensor, dict[str, float]]:
        """The micro-batch's share of its mini-batch's policy loss, and the micro-batch's metrics.

        The loss is verl's policy loss, minus ``entropy_coeff`` times the entropy, plus ``kl_loss_coef`` times
        the KL to the reference, plus the distillation weight times the distillation loss, each aggregated
        over the micro-batch's (m, R) tokens but normalised by the mini-batch's totals (``norm``): the
        micro-batches' losses sum to the mini-batch's loss, so do their gradients.
        """
        from verl.trainer.ppo.core_algos import agg_loss, kl_penalty

        a = self.actor
        mask = micro.packed.response_mask
        # verl's policy losses read the mini-batch totals from the actor config; a frozen dataclass field
        # holding a dict, so the dict is updated in place.
        a.global_batch_info.clear()
        a.global_batch_info.update(norm.agg_kwargs())
        with self.autocast():
            logits = response_logits(self.model, micro.packed, self.share_prompt_prefix)
        logp = token_logprobs(logits, micro.packed.responses, self.temperature)
        pg_loss, pg_metrics = self.policy_loss_fn(micro.old_log_probs, logp, micro.advantages, mask,
                                                  a.loss_agg_mode, a, None)
        loss = pg_loss
        metrics = {"actor/pg_loss": pg_loss.item(), **pg_metrics}
        if a.entropy_coeff != 0.0:
            entropy = agg_loss(entropy_from_logits(logits, self.temperature), mask, a.loss_agg_mode,
                               **norm.agg_kwargs())
            loss = loss - a.entropy_coeff * entropy
            metrics["actor/entropy"] = entropy.item()
        if a.use_kl_loss:
            kl = agg_loss(kl_penalty(logp, micro.ref_log_probs, a.kl_loss_type), mask, a.loss_agg_mode,
                          **norm.agg_kwargs())
            loss = loss + a.kl_loss_coef * kl
            metrics["actor/kl_loss"] = kl.item()
        del logits  # (m, R, vocab): free it before the distillation's two forward passes
        if len(micro.distill_rows):
            share = (micro.distill.plain.response_mask[micro.distill_rows].sum() / norm.distill_tokens).item()
            d_loss = self._distill_loss(micro.distill, micro.distill_rows) * share
            loss = loss + micro.distill.weight * d_loss
            metrics["distill/loss"] = d_loss.item()
        return loss, metrics

    def critic_loss(self, micro: MicroBatch, norm: MiniBatchNorm) -> tuple[torch.Tensor, dict[str, float]]:
        """The micro-batch's share of its mini-batch's clipped value loss (verl's), and its metrics."""
        from verl.trainer.ppo.core_algos import compute_value_loss

        with self.autocast():
            vpreds = self.critic(micro.packed, self.share_prompt_prefix)
        vf_loss, vf_clipfrac = compute_value_loss(
            vpreds, micro.returns, micro.old_values, micro.packed.response_mask, self.cliprange_value,
            self.actor.loss_agg_mode, batch_num_tokens=norm.batch_num_tokens, global_batch_size=norm.global_batch_size)
        return vf_loss, {"critic/vf_loss": vf_loss.item(), "critic/vf_clipfrac": vf_clipfrac.item()}

    def _distill_loss(self, distill: DistillationInputs, rows: torch.Tensor) -> torch.Tensor:
        """Token-mean divergence of the student (plain prompt) from the detached teacher (with experiences)."""
        plain = distill.plain.select(rows).to(self.device)
        with torch.no_grad(), self.autocast():
            teacher = response_logits(self.model, distill.privileged.select(rows).to(self.device),
                                      self.share_prompt_prefix)
        with self.autocast():
            student = response_logits(self.model, plain, self.share_prompt_prefix)
        return distillation_loss(student, teacher, plain.response_mask, distill.divergence,
                                 distill.temperature)
