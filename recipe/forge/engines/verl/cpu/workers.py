"""verl's actor/rollout/reference, separate_async actor and critic workers with a gloo process group, for the CPU
platform.

verl initialises its process group with the backend string ``"cpu:gloo,<device>:<backend>"``; with the CPU
platform that reads ``"cpu:gloo,cpu:gloo"``, which torch rejects ("Duplicate device type cpu"). verl skips its
own initialisation when a process group exists, so these workers bring up a plain gloo group first (from the
rank, world size and master address Ray's worker group puts in their environment) and are verl's workers
otherwise.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed
from verl.experimental.separation.engine_workers import DetachActorWorker
from verl.single_controller.base.decorator import Dispatch, register
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


class CpuDetachActorWorker(DetachActorWorker):
    """verl's actor worker of the separate_async mode, with a gloo process group. Before the local updates of a
    sync it keeps a copy of the weights (the old policy of the decoupled correction); verl takes that copy with
    ``tensor.cpu()``, which on a CPU returns the parameter itself, so the "copy" would follow every update and
    the old log-probs of a sync's later mini-batches would come from the updated weights. Here it is a copy."""

    def __init__(self, *args, **kwargs):
        init_gloo_process_group()
        super().__init__(*args, **kwargs)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_model_to_cpu(self, n):
        super().save_model_to_cpu(n)
        self.cpu_saved_models[n] = copied(self.cpu_saved_models[n])


def copied(state):
    """``state`` with every tensor in it (in dicts, tuples and lists) cloned; anything else as it is."""
    if isinstance(state, torch.Tensor):
        return state.detach().clone()
    if isinstance(state, dict):
        return {key: copied(value) for key, value in state.items()}
    if isinstance(state, (tuple, list)):
        return type(state)(copied(value) for value in state)
    return state


CPU_WORKERS = {ActorRolloutRefWorker: CpuActorRolloutRefWorker, TrainingWorker: CpuTrainingWorker,
               DetachActorWorker: CpuDetachActorWorker}
