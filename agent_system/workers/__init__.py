"""Pools that hold a batch of environments and step them: in-process for cheap environments, worker
processes (per-step timeout, restart on crash or hang) for heavy ones. Both have the same interface:

``reset(indices, seeds) -> list[StepResult]``, ``step(indices, actions) -> list[StepResult]``,
``call(method, indices) -> list`` (a method of each listed environment, e.g. ``expert_action``) and ``close()``.
An environment that raises, or whose worker dies or hangs, yields a failed result
(``info["failure_reason"]``) instead of an exception.
"""

from __future__ import annotations

import os

from agent_system.workers.in_process import InProcessEnvPool
from agent_system.workers.process_pool import ProcessEnvPool


def make_pool(spec, num_envs: int, resources, heavy: bool):
    """Pick the pool for ``num_envs`` environments built from ``spec``.

    ``resources`` is env.resources_per_worker. Heavy environments always use worker processes
    (num_workers 0 = min(num_envs, CPU count)); cheap ones run in-process unless num_workers > 0.
    """
    workers = int(resources.num_workers)
    if not heavy and workers == 0:
        return InProcessEnvPool(spec, num_envs)
    if workers == 0:
        workers = min(num_envs, os.cpu_count() or 1)
    return ProcessEnvPool(spec, num_envs, num_workers=min(workers, num_envs), step_timeout_s=float(resources.step_timeout_s))


__all__ = ["InProcessEnvPool", "ProcessEnvPool", "make_pool"]
