"""verl's learning-rate schedule on the embedded engine: the same warm-up and decay, stepped once per iteration.

verl's FSDP engine (``_build_lr_scheduler``) warms up for ``optim.lr_warmup_steps`` iterations, or, when that is
<= 0 or null, for ``int(optim.lr_warmup_steps_ratio x total iterations)``; then holds the lr (``lr_scheduler_type:
constant``) or decays it along a cosine to ``min_lr_ratio x lr`` (``cosine``, ``num_cycles``). It steps the
scheduler once per training iteration, after the actor update. The schedule functions are verl's own.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch


def warmup_iterations(optim: Any, total_iterations: int) -> int:
    """Warm-up length with verl's rule (``optim``: verl's OptimizerConfig)."""
    steps = optim.lr_warmup_steps
    if steps is None or steps <= 0:
        return int(optim.lr_warmup_steps_ratio * total_iterations)
    return int(steps)


def build_lr_scheduler(optimizer: torch.optim.Optimizer, optim: Any, total_iterations: int,
                       done: int = 0) -> torch.optim.lr_scheduler.LambdaLR:
    """verl's scheduler for ``optimizer``, advanced past ``done`` iterations already trained (a resumed run)."""
    from verl.utils.torch_functional import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup

    warmup = warmup_iterations(optim, total_iterations)
    kind = getattr(optim, "lr_scheduler_type", "constant")
    if kind == "constant":
        scheduler = get_constant_schedule_with_warmup(optimizer, num_warmup_steps=warmup)
    elif kind == "cosine":
        scheduler = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=warmup,
                                                    num_training_steps=total_iterations,
                                                    min_lr_ratio=optim.min_lr_ratio, num_cycles=optim.num_cycles,
                                                    zero_indexed_step=optim.zero_indexed_step)
    else:
        raise ValueError(f"lr_scheduler_type={kind!r} is not one of verl's: constant, cosine")
    with warnings.catch_warnings():  # fast-forwarding a resumed run's schedule: no optimizer step belongs here
        warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step()` before")
        for _ in range(done):
            scheduler.step()
    return scheduler
