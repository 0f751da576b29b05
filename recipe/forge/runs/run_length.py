"""How many iterations a run has, with verl's meaning of ``trainer.total_training_steps`` and ``total_epochs``.

verl counts ``total_training_steps`` when it is set, else ``total_epochs`` passes over the training dataset of
``len(dataset) // data.train_batch_size`` iterations each (its dataloader drops the last partial batch). The
verl engine writes that dataset itself (recipe/forge/engines/verl/main.py): ``train_batch_size x
total_training_steps`` task seeds, or ``TASKS_PER_EPOCH`` of them when ``total_training_steps`` is null. The
embedded engine draws task seeds without a dataset, so it counts an epoch as the same ``TASKS_PER_EPOCH``
tasks: both engines then run the same number of iterations for the same keys.
"""

from __future__ import annotations

TASKS_PER_EPOCH = 10_000  # training tasks (seeds) of one epoch when trainer.total_training_steps is null


def training_tasks(train_batch_size: int, total_training_steps: int | None) -> int:
    """Task seeds in one epoch of the training dataset."""
    return train_batch_size * total_training_steps if total_training_steps else TASKS_PER_EPOCH


def total_iterations(train_batch_size: int, total_training_steps: int | None, total_epochs: int) -> int:
    """``total_training_steps`` when set, else ``total_epochs`` x iterations per epoch (verl's rule)."""
    if total_training_steps:
        return total_training_steps
    return total_epochs * (training_tasks(train_batch_size, None) // train_batch_size)
