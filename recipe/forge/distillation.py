"""Self-distillation with the experience library as privileged information (engine-agnostic, pure torch).

The teacher is the policy itself given the library's experiences in its context; the student is the same
policy on the plain prompt. Over the response tokens the student is pulled toward the teacher with

* ``kl``         KL(teacher || student)  (forward: mass-covering)
* ``reverse_kl`` KL(student || teacher)  (mode-seeking)
* ``jsd``        Jensen-Shannon divergence, 0.5 KL(t || m) + 0.5 KL(s || m), m = (t + s) / 2

computed on softmax(logits / T) and multiplied by T^2 (so gradient magnitudes do not shrink with T, as
in Hinton et al.). The teacher side is detached: only the student receives gradients.
The weight ramps linearly with the library's fill ratio up to ``max_distill_weight``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

DIVERGENCES = ("kl", "reverse_kl", "jsd")


def token_divergence(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, divergence: str = "jsd", temperature: float = 1.0
) -> torch.Tensor:
    """Per-token divergence between teacher and student distributions, times T^2.

    Args:
        student_logits: (bs, R, vocab), with gradients.
        teacher_logits: (bs, R, vocab); detached here.
        divergence: one of ``kl``, ``reverse_kl``, ``jsd``.
        temperature: T > 0.

    Returns:
        (bs, R) float32 divergences (>= 0).
    """
    if divergence not in DIVERGENCES:
        raise ValueError(f"divergence={divergence!r}; choose one of {DIVERGENCES}")
    if temperature <= 0:
        raise ValueError(f"temperature={temperature} must be > 0")
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"student logits {tuple(student_logits.shape)} and teacher logits "
                         f"{tuple(teacher_logits.shape)} differ in shape")
    log_s = F.log_softmax(student_logits.float() / temperature, dim=-1)
    log_t = F.log_softmax(teacher_logits.detach().float() / temperature, dim=-1)
    if divergence == "kl":
        value = (log_t.exp() * (log_t - log_s)).sum(-1)
    elif divergence == "reverse_kl":
        value = (log_s.exp() * (log_s - log_t)).sum(-1)
    else:
        log_m = torch.logsumexp(torch.stack([log_s, log_t]), dim=0) - math.log(2.0)
        value = 0.5 * (log_t.exp() * (log_t - log_m)).sum(-1) + 0.5 * (log_s.exp() * (log_s - log_m)).sum(-1)
    return value.clamp(min=0.0) * temperature**2


def distillation_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    response_mask: torch.Tensor,
    divergence: str = "jsd",
    temperature: float = 1.0,
) -> torch.Tensor:
    """Token-mean of :func:`token_divergence` over the response mask (bs, R); a scalar."""
    per_token = token_divergence(student_logits, teacher_logits, divergence, temperature)
    mask = response_mask.to(per_token.dtype)
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


def distilled_step(messages: list[dict], plain_messages: list[dict]) -> bool:
    """Whether a step is a distillation row, on both engines: its prompt carried experiences (the messages the
    policy was given differ from the plain prompt's)."""
    return messages != plain_messages


def distillation_weight(library_size: int, library_capacity: int, max_weight: float) -> float:
    """Linear ramp: 0 with an empty library, ``max_weight`` once it is full (``library_capacity`` entries)."""
    if library_capacity <= 0:
        return 0.0
    return float(max_weight) * min(1.0, max(0, library_size) / library_capacity)


def library_distillation_weight(library_size: int, forge) -> float:
    """The weight for a library of ``library_size`` entries under ``algorithm.forge``'s settings (``forge``), on
    both engines: its capacity is the golden plus the warning capacity per level, over the three levels."""
    capacity = 3 * (int(forge.golden_capacity_per_level) + int(forge.warning_capacity_per_level))
    return distillation_weight(library_size, capacity, float(forge.max_distill_weight))
