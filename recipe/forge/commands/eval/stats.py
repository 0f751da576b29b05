"""Figures of an evaluation: N tasks x k samples, one success flag per episode.

* ``avg@k``: the mean success over all N x k episodes (= the mean over tasks of each task's success rate);
  its 95% interval is a percentile bootstrap over tasks (tasks resampled with their k samples, since the
  samples of one task are not independent), ``BOOTSTRAP_RESAMPLES`` resamples from a fixed seed.
* ``pass@k``: the fraction of tasks with at least one success in their k samples; its 95% interval is the
  Wilson score interval over the N tasks (independent Bernoulli outcomes).
* ``paired difference`` of two passes over the same episodes (same tasks, same sample streams): the mean of
  the per-task differences in success rate, with the same bootstrap over tasks.

Shapes: ``success`` is (N, k) with 0/1 entries, row i the k samples of task i.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

Z95 = 1.959963984540054  # the standard normal's 0.975 quantile
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
INTERVALS = {"avg@k": "95% percentile bootstrap over tasks", "pass@k": "95% Wilson score interval over tasks",
             "difference": "95% percentile bootstrap over tasks of the paired per-task differences"}


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion; (0, 1) when there are no trials."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap_mean_interval(per_task: np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES,
                            seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean of ``per_task`` (N,), resampling tasks."""
    per_task = np.asarray(per_task, dtype=np.float64)
    if per_task.size == 0:
        raise ValueError("no tasks to bootstrap over")
    draws = np.random.default_rng(seed).integers(0, per_task.size, size=(resamples, per_task.size))
    means = per_task[draws].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return float(low), float(high)


def check_success(success: np.ndarray) -> np.ndarray:
    success = np.asarray(success, dtype=np.float64)
    if success.ndim != 2 or success.size == 0:
        raise ValueError(f"success must be (tasks, samples) with at least one episode, got shape {success.shape}")
    if not np.isin(success, (0.0, 1.0)).all():
        raise ValueError("success entries must be 0 or 1")
    return success


def success_figures(success: np.ndarray) -> dict[str, Any]:
    """avg@k and pass@k of (N, k) ``success``, each with its interval (see the module docstring)."""
    success = check_success(success)
    tasks, samples = success.shape
    per_task = success.mean(axis=1)
    solved = int((success.max(axis=1) > 0).sum())
    return {
        "tasks": tasks, "samples": samples,
        "avg@k": float(per_task.mean()), "avg@k_interval": list(bootstrap_mean_interval(per_task)),
        "pass@k": solved / tasks, "pass@k_interval": list(wilson_interval(solved, tasks)),
    }


def paired_difference(first: np.ndarray, second: np.ndarray) -> dict[str, Any]:
    """avg@k of ``first`` minus that of ``second`` (both (N, k), the same episodes), its interval, and the
    tasks where the first pass did better / worse / the same."""
    first, second = check_success(first), check_success(second)
    if first.shape != second.shape:
        raise ValueError(f"paired passes need the same episodes, got shapes {first.shape} and {second.shape}")
    delta = first.mean(axis=1) - second.mean(axis=1)
    return {"difference": float(delta.mean()), "difference_interval": list(bootstrap_mean_interval(delta)),
            "tasks_better": int((delta > 0).sum()), "tasks_worse": int((delta < 0).sum()),
            "tasks_tied": int((delta == 0).sum())}
