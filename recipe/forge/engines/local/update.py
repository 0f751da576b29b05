"""One policy (and critic) update over a StepBatch with verl's losses.

Policy loss: ``verl.trainer.ppo.core_algos.get_policy_loss_fn(loss_mode)`` (vanilla PPO-clip, GSPO,
clip-cov, ...), configured by a verl ``ActorConfig``; KL loss: ``kl_penalty`` + ``agg_loss``; entropy bonus:
``agg_loss`` over token entropies; critic: ``compute_value_loss``. Mini-batches of samples, each split into
micro-batches whose gradients accumulate; ``global_batch_info`` tells verl's aggregation the mini-batch's
token and sample counts, so the accumulated gradient equals the gradient of the mini-batch's token-mean.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn

from recipe.forge.distillation import distillation_loss
from recipe.forge.engines.local.batch import StepBatch
from recipe.forge.engines.local.sequences import PackedSequences, entropy_from_logits, response_logits, token_logprobs


# Losses whose per-token value is the advantage times a function of the ratio: a row with zero advantage
# contributes exactly zero gradient, so it can be skipped (the token count still covers it).
ADVANTAGE_LINEAR_LOSSES = ("vanilla", "gspo", "gpg")
SUMMED_METRICS = ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "critic/vf_loss", "distill/loss")


@dataclass
class LossSettings:
    loss_mode: str = "vanilla"
    loss_agg_mode: str = "token-mean"
    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None
    clip_ratio_high: float | None = None
    clip_ratio_c: float = 3.0
    entropy_coeff: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    mini_batch_size: int = 256
    micro_batch_size: int = 8
    ppo_epochs: int = 1
    shuffle: bool = False
    grad_clip: float = 1.0
    temperature: float = 1.0
    cliprange_value: float = 0.5
    policy_loss_extra: dict | None = None  # verl PolicyLossConfig fields (clip_cov_ratio, ...)


def verl_actor_config(settings: LossSettings):
    """A verl ActorConfig carrying what verl's policy-loss functions read."""
    from verl.workers.config import ActorConfig, PolicyLossConfig

    return ActorConfig(
        strategy="local",
        rollout_n=1,
        ppo_mini_batch_size=settings.mini_batch_size,
        ppo_micro_batch_size_per_gpu=settings.micro_batch_size,
        clip_ratio=settings.clip_ratio,
        clip_ratio_low=settings.clip_ratio_low if settings.clip_ratio_low is not None else settings.clip_ratio,
        clip_ratio_high=settings.clip_ratio_high if settings.clip_ratio_high is not None else settings.clip_ratio,
        clip_ratio_c=settings.clip_ratio_c,
        loss_agg_mode=settings.loss_agg_mode,
        policy_loss=PolicyLossConfig(loss_mode=settings.loss_mode, **(settings.policy_loss_extra or {})),
        entropy_coeff=settings.entropy_coeff,
        use_kl_loss=settings.use_kl_loss,
        kl_loss_coef=settings.kl_loss_coef,
        kl_loss_type=settings.kl_loss_type,
        ppo_epochs=settings.ppo_epochs,
        use_torch_compile=False,
    )


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


class ValueModel(nn.Module):
    """Critic: a transformer backbone with a scalar head per position (verl's token-classification critic)."""

    def __init__(self, backbone: nn.Module, hidden_size: int):
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, packed: PackedSequences) -> torch.Tensor:
        """Values of the states before each response token: (bs, R) float32."""
        hidden = self.backbone(input_ids=packed.input_ids, attention_mask=packed.attention_mask,
                               position_ids=packed.position_ids, use_cache=False).last_hidden_state
        p, r = packed.prompt_length, packed.responses.shape[1]
        return self.value_head(hidden[:, p - 1:p - 1 + r, :]).squeeze(-1).float()


def _chunks(rows: np.ndarray, size: int) -> list[np.ndarray]:
    return [rows[i:i + size] for i in range(0, len(rows), size)]


class PolicyUpdater:
    """Runs PPO-family epochs over a StepBatch for the policy (and the critic when one is given)."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, settings: LossSettings,
                 autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                 critic: ValueModel | None = None, critic_optimizer: torch.optim.Optimizer | None = None,
                 rng: np.random.Generator | None = None):
        from verl.trainer.ppo.core_algos import get_policy_loss_fn

        self.model = model
        self.optimizer = optimizer
        self.settings = settings
        self.autocast = autocast
        self.critic = critic
        self.critic_optimizer = critic_optimizer
        self.actor_config = verl_actor_config(settings)
        self.policy_loss_fn = get_policy_loss_fn(settings.loss_mode)
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.device = next(model.parameters()).device

    # ------------------------------------------------------------------ no-grad passes
    @torch.no_grad()
    def log_probs(self, model: nn.Module, packed: PackedSequences, with_sum_pi_squared: bool = False):
        """(n, R) log-probs of the response tokens (and (n, R) sum of p^2 when asked), micro-batched."""
        outs, sums = [], []
        rows = np.arange(packed.input_ids.shape[0])
        for chunk in _chunks(rows, self.settings.micro_batch_size):
            sub = packed.select(torch.as_tensor(chunk)).to(self.device)
            with self.autocast():
                logits = response_logits(model, sub)
            outs.append(token_logprobs(logits, sub.responses, self.settings.temperature).cpu())
            if with_sum_pi_squared:
                probs = torch.softmax(logits.float() / self.settings.temperature, dim=-1)
                sums.append((probs * probs).sum(-1).cpu())
        logp = torch.cat(outs) * packed.response_mask
        return (logp, torch.cat(sums) * packed.response_mask) if with_sum_pi_squared else logp

    @torch.no_grad()
    def values(self, packed: PackedSequences) -> torch.Tensor:
        rows = np.arange(packed.input_ids.shape[0])
        outs = []
        for chunk in _chunks(rows, self.settings.micro_batch_size):
            with self.autocast():
                outs.append(self.critic(packed.select(torch.as_tensor(chunk)).to(self.device)).cpu())
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
        """PPO epochs over mini-batches; returns averaged metrics (actor/*, critic/*, distill/*)."""
        from verl.trainer.ppo.core_algos import agg_loss, compute_value_loss, kl_penalty

        s = self.settings
        n = len(batch)
        mask = batch.response_mask
        totals: dict[str, list[float]] = {}
        distill_of_row = torch.full((n,), -1, dtype=torch.long)
        if distill is not None:
            distill_of_row[distill.rows] = torch.arange(len(distill.rows))
        skip_zero = (s.loss_mode in ADVANTAGE_LINEAR_LOSSES and not s.use_kl_loss and s.entropy_coeff == 0.0
                     and distill is None and self.critic is None)
        has_signal = (advantages.abs().sum(-1) > 0).numpy() if skip_zero else np.ones(n, dtype=bool)
        self.model.train()
        for _ in range(s.ppo_epochs):
            order = self.rng.permutation(n) if s.shuffle else np.arange(n)
            for mini in _chunks(order, s.mini_batch_size):
                self.optimizer.zero_grad(set_to_none=True)
                if self.critic_optimizer is not None:
                    self.critic_optimizer.zero_grad(set_to_none=True)
                mini_mask = mask[mini]
                batch_info = {"dp_size": 1, "batch_num_tokens": float(mini_mask.sum().clamp(min=1.0)),
                              "global_batch_size": len(mini)}
                # A frozen dataclass field holding a dict: update the dict in place.
                self.actor_config.global_batch_info.clear()
                self.actor_config.global_batch_info.update(batch_info)
                distill_rows = distill_of_row[mini]
                distill_tokens = None
                if distill is not None and (distill_rows >= 0).any():
                    distill_tokens = distill.plain.response_mask[distill_rows[distill_rows >= 0]].sum().clamp(min=1.0)
                mini_metrics: dict[str, float] = {}
                for micro in _chunks(mini[has_signal[mini]], s.micro_batch_size):
                    idx = torch.as_tensor(micro)
                    dev = self.device
                    packed = batch.packed.select(idx).to(dev)
                    m_mask = packed.response_mask
                    with self.autocast():
                        logits = response_logits(self.model, packed)
                    logp = token_logprobs(logits, packed.responses, s.temperature)
                    pg_loss, pg_metrics = self.policy_loss_fn(
                        old_log_probs[idx].to(dev), logp, advantages[idx].to(dev), m_mask, s.loss_agg_mode,
                        self.actor_config, None)
                    loss = pg_loss
                    metrics = {"actor/pg_loss": pg_loss.item(), **pg_metrics}
                    if s.entropy_coeff != 0.0:
                        entropy = agg_loss(entropy_from_logits(logits, s.temperature), m_mask, s.loss_agg_mode,
                                           **batch_info)
                        loss = loss - s.entropy_coeff * entropy
                        metrics["actor/entropy"] = entropy.item()
                    if s.use_kl_loss:
                        kld = kl_penalty(logp, ref_log_probs[idx].to(dev), s.kl_loss_type)
                        kl = agg_loss(kld, m_mask, s.loss_agg_mode, **batch_info)
                        loss = loss + s.kl_loss_coef * kl
                        metrics["actor/kl_loss"] = kl.item()
                    del logits
                    if distill_tokens is not None:
                        d_rows = distill_of_row[idx]
                        d_rows = d_rows[d_rows >= 0]
                        if len(d_rows):
                            d_loss = self._distill_loss(distill, d_rows) * (
                                distill.plain.response_mask[d_rows].sum() / distill_tokens).item()
                            loss = loss + distill.weight * d_loss
                            metrics["distill/loss"] = d_loss.item()
                    loss.backward()
                    if self.critic is not None:
                        with self.autocast():
                            vpreds = self.critic(packed)
                        vf_loss, vf_clipfrac = compute_value_loss(
                            vpreds, returns[idx].to(dev), old_values[idx].to(dev), m_mask, s.cliprange_value, s.loss_agg_mode,
                            batch_num_tokens=batch_info["batch_num_tokens"], global_batch_size=len(mini))
                        vf_loss.backward()
                        metrics.update({"critic/vf_loss": vf_loss.item(), "critic/vf_clipfrac": vf_clipfrac.item()})
                    for key, value in metrics.items():
                        # Loss terms of micro-batches are shares of the mini-batch loss: sum them.
                        if key in SUMMED_METRICS:
                            mini_metrics[key] = mini_metrics.get(key, 0.0) + float(value)
                        else:
                            totals.setdefault(key, []).append(float(value))
                for key, value in mini_metrics.items():
                    totals.setdefault(key, []).append(value)
                grad_norm = torch.nn.utils.clip_grad_norm_(
                    [p for p in self.model.parameters() if p.requires_grad], s.grad_clip)
                totals.setdefault("actor/grad_norm", []).append(float(grad_norm))
                if torch.isfinite(grad_norm):
                    self.optimizer.step()
                if self.critic is not None:
                    torch.nn.utils.clip_grad_norm_(self.critic.parameters(), s.grad_clip)
                    self.critic_optimizer.step()
        return {key: float(np.mean(values)) for key, values in totals.items()}

    def _distill_loss(self, distill: DistillationInputs, rows: torch.Tensor) -> torch.Tensor:
        """Token-mean divergence of the student (plain prompt) from the detached teacher (with experiences)."""
        plain = distill.plain.select(rows).to(self.device)
        with torch.no_grad(), self.autocast():
            teacher = response_logits(self.model, distill.privileged.select(rows).to(self.device))
        with self.autocast():
            student = response_logits(self.model, plain)
        return distillation_loss(student, teacher, plain.response_mask, distill.divergence,
                                 distill.temperature)
