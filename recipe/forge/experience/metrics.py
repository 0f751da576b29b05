"""Metrics of the experience system computed from step records (hashed counting, no per-group loops)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from agent_system.multi_turn_rollout.protocols import StepRecord, TrajectoryRecord
from recipe.forge.experience.evolution import positive_ratio
from recipe.forge.experience.library import LEVELS, ExperienceEntry


def reward_metrics(trajectories: Sequence[TrajectoryRecord], success_threshold: float | None) -> dict[str, float]:
    """The seed's ``forge/reward_mean`` and ``forge/reward_std`` over one return per episode, and
    ``forge/positive_ratio``: the share of episodes above the success threshold (``algorithm.forge.
    success_threshold``; null = the batch median, by evolution's rule). Empty for no episodes."""
    if not trajectories:
        return {}
    returns = np.array([t.episode_reward for t in trajectories], dtype=np.float64)
    return {
        "forge/reward_mean": float(returns.mean()),
        "forge/reward_std": float(returns.std()),
        "forge/positive_ratio": positive_ratio(trajectories, success_threshold),
    }


def step_group_stats(records: Sequence[StepRecord], step_groups: str = "cluster") -> dict[str, float]:
    """Size distribution of the step groups the forge advantage used: the steps of one task uid in one cluster (the
    clusters the steps carry from their rollout, a distributed worker's own ids included), refined by
    ``algorithm.forge.step_groups`` as the advantage refines them (recipe/forge/step_samples.py
    ``step_group_keys``: by turn, or first visits only).

    Steps without a cluster id count as their own singleton group.
    """
    if not records:
        return {"forge/step_groups": 0.0, "forge/step_group_mean_size": 0.0, "forge/step_group_max_size": 0.0,
                "forge/step_group_singleton_share": 0.0}
    from recipe.forge.step_samples import StepSamples, object_array, step_group_keys  # imports torch

    states = object_array([r.cluster_id if r.cluster_id is not None else ("solo", i) for i, r in enumerate(records)])
    episodes = dict.fromkeys((r.traj_uid for r in records), 0.0)
    samples = StepSamples.from_records(records, episodes, dict.fromkeys(episodes, False))
    keys = step_group_keys(samples, states, step_groups)
    groups = Counter(zip((r.uid for r in records), keys.tolist()))
    sizes = np.fromiter(groups.values(), dtype=np.int64, count=len(groups))
    return {
        "forge/step_groups": float(sizes.size),
        "forge/step_group_mean_size": float(sizes.mean()),
        "forge/step_group_max_size": float(sizes.max()),
        "forge/step_group_singleton_share": float((sizes == 1).mean()),
    }


def injection_stats(records: Sequence[StepRecord]) -> dict[str, float]:
    """Share of steps that were given experiences, and experiences injected per step."""
    counts = np.fromiter((len(r.experience_ids) for r in records), dtype=np.int64, count=len(records))
    if counts.size == 0:
        return {"forge/retrieval_hit_rate": 0.0, "forge/experiences_per_step": 0.0}
    return {"forge/retrieval_hit_rate": float((counts > 0).mean()), "forge/experiences_per_step": float(counts.mean())}


def injected_level_stats(records: Sequence[StepRecord], entries: Mapping[int, ExperienceEntry]) -> dict[str, float]:
    """``forge/injected/<level>``: entries of each library level (principle, method, example, mistake, pattern,
    diagnostic) injected per step, over all ``records``; ids no longer in ``entries`` (pruned since) count under
    ``forge/injected/removed``. All zero for no steps."""
    counts = Counter({level: 0 for zone in LEVELS.values() for level in zone} | {"removed": 0})
    for record in records:
        for raw in record.experience_ids:
            entry = entries.get(int(raw))
            counts["removed" if entry is None else entry.level] += 1
    steps = max(len(records), 1)
    return {f"forge/injected/{level}": count / steps for level, count in counts.items()}


@dataclass
class RetrievalStats:
    """The provider's counters of an iteration, counted from the steps it evolves from (:meth:`from_records`), on
    every engine: what the steps were shown after the prompt-length rule, of the batch that trains."""

    queries: int = 0
    hits: int = 0  # steps that received a non-empty experience message
    injected: int = 0  # entries injected, summed over steps
    fallbacks: int = 0  # steps served by the whole-library fallback

    @classmethod
    def from_records(cls, records: Sequence[StepRecord]) -> "RetrievalStats":
        """The counters of the steps ``records``: one query each; its shown entries; whether the fallback
        served them."""
        counts = np.fromiter((len(r.experience_ids) for r in records), dtype=np.int64, count=len(records))
        return cls(queries=int(counts.size), hits=int((counts > 0).sum()), injected=int(counts.sum()),
                   fallbacks=sum(bool(r.experience_fallback) for r in records))

    def as_metrics(self) -> dict[str, float]:
        q = max(self.queries, 1)
        return {
            "forge/provider_queries": float(self.queries),
            "forge/provider_hit_rate": self.hits / q,
            "forge/provider_experiences_per_step": self.injected / q,
            "forge/provider_fallback_rate": self.fallbacks / q,
        }
