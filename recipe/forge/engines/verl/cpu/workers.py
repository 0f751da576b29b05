"""verl's actor/rollout/reference and critic workers with a gloo process group, for the CPU platform.

verl initialises its process group with the backend string ``"cpu:gloo,<device>:<backend>"``; with the CPU
platform that reads ``"cpu:gloo,cpu:gloo"``, which torch rejects ("Duplicate device type cpu"). verl skips its
own initialisation when a process group exists, so these workers bring up a plain gloo group first (from the
rank, world size and master address Ray's worker group puts in their environment) and are verl's workers
otherwise.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch.distributed
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker


def init_gloo_process_group() -> None:
    """Join the worker group's gloo process group (idempotent)."""
    if torch.distributed.is_initialized():
        return
    torch.distributed.init_process_group(
        backend="gloo",
        rank=int(os.environ.get("RANK", 0)),
        world_size=int(os.environ.get("WORLD_SIZE", 1)),
        timeout=timedelta(minutes=30),
        init_method=os.environ.get("DIST_INIT_METHOD") or None,
    )


class CpuActorRolloutRefWorker(ActorRolloutRefWorker):
    def __init__(self, *args, **kwargs):
        init_gloo_process_group()
        super().__init__(*args, **kwargs)


class CpuTrainingWorker(TrainingWorker):
    def __init__(self, *args, **kwargs):
        init_gloo_process_group()
        super().__init__(*args, **kwargs)


CPU_WORKERS = {ActorRolloutRefWorker: CpuActorRolloutRefWorker, TrainingWorker: CpuTrainingWorker}
