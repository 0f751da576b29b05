"""Validation passes shared by the embedded trainer and prompt-only mode: held-out tasks with the library and,
for SLEA-RL, the same tasks without it, so the library's contribution shows in the metrics."""

from __future__ import annotations

from typing import Any

from agent_system.multi_turn_rollout.protocols import SamplingParams


def validation_metrics(collector, envs, generator, sampling: SamplingParams, experience=None,
                       tokenizer: Any = None) -> dict[str, float]:
    """``val/*`` metrics (with the library when ``experience`` is given) and ``val_no_library/*`` (only then)."""
    runs = [("val", None)]
    if experience is not None:
        from recipe.forge.experience import ExperienceSystem

        # A read-only copy: validation observations must not found clusters in the training index.
        view = ExperienceSystem.from_snapshot(experience.snapshot(), tokenizer=tokenizer)
        runs = [("val", view.provider), ("val_no_library", None)]
    metrics: dict[str, float] = {}
    for prefix, provider in runs:
        batch = collector.collect(envs, generator, sampling, experience_provider=provider, dynamic_sampling=False)
        metrics.update({f"{prefix}/{k}": v for k, v in batch.metrics.items()})
    return metrics
