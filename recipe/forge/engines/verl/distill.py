"""Self-distillation on the verl engine: the policy given the library (teacher) guides the policy on the plain
prompt (student).

How it runs (algorithm.forge.use_distillation=True):

1. the agent loop generates with the library-augmented prompt and stores the row with it (the teacher's
   view, the prompt it sampled in); it keeps the plain prompt's ids in ``extra_fields["student_prompt_ids"]``;
2. after verl's old-log-prob pass (the teacher's log-probs), the trainer adds one student row per such step
   (the plain prompt + the same response) and runs the SAME actor's log-prob pass over them: the teacher is the
   current policy;
3. the advantage of every student row's response token is ``-w * (log pi_student(a_t) - log pi_teacher(a_t))``,
   with ``w`` ramped by the library's fill ratio up to ``max_distill_weight``
   (recipe.forge.distillation.distillation_weight). The tokens ``a_t`` were sampled in the teacher's context, so
   this is not the policy gradient of KL(student || teacher), which needs the student's samples; and the student
   rows join verl's PPO loss (its token-mean, KL loss, entropy bonus and clipping). docs/distributed.md
   ("How this differs from the embedded engine") says what the update is instead.

Exactness: verl's actor passes return the log-probs of the sampled tokens only, not full distributions. So on
this engine ``reverse_kl`` is a sampled-token (Monte Carlo) estimate and ``kl`` / ``jsd``, which need the
teacher's whole distribution, are not available; they are exact (full-vocabulary, with temperature T and the
T^2 factor) on the local engine (recipe/forge/distillation.py). Steps that had no experiences have no
student row: their teacher equals the student and the term would be 0.
"""

from __future__ import annotations

from typing import Any

import torch

from agent_system.config_checks import ConfigError

VERL_DIVERGENCES = ("reverse_kl",)


def check_distillation_config(algorithm: Any, env: Any) -> None:
    """Reject settings this engine cannot honour, naming the key."""
    forge = algorithm.forge
    if not bool(forge.use_distillation):
        return
    if forge.divergence_type not in VERL_DIVERGENCES:
        raise ConfigError(
            f"algorithm.forge.divergence_type={forge.divergence_type!r} needs full teacher distributions; the verl "
            f"engine has sampled-token log-probs only and supports {list(VERL_DIVERGENCES)} (kl and jsd run on "
            "trainer.engine=local)"
        )
    if float(forge.distill_temperature) != 1.0:
        raise ConfigError(
            f"algorithm.forge.distill_temperature={forge.distill_temperature} must be 1.0 on the verl engine: the "
            "log-probs come from verl's actor pass at the rollout temperature"
        )
    if env.image_mode_key() is not None:
        raise ConfigError("algorithm.forge.use_distillation on the verl engine supports text observations only")


def distillation_advantage(
    student_log_probs: torch.Tensor, teacher_log_probs: torch.Tensor, response_mask: torch.Tensor, weight: float
) -> torch.Tensor:
    """Per-token advantage term ``-weight * (log pi_s - log pi_t)`` on response tokens.

    Args:
        student_log_probs, teacher_log_probs, response_mask: (bs, response_len).

    Returns:
        (bs, response_len) float32, 0 outside the mask.
    """
    if student_log_probs.shape != teacher_log_probs.shape:
        raise ValueError(f"student {tuple(student_log_probs.shape)} and teacher {tuple(teacher_log_probs.shape)} differ")
    gap = (student_log_probs - teacher_log_probs).to(torch.float32)
    return -float(weight) * gap * response_mask.to(torch.float32)
