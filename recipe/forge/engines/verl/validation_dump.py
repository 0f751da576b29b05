"""The verl engine's validation rows, kept for SLEA-RL's validation metrics and, with ``trainer.rollout_data_dir``,
written in the one dump format the embedded engine writes (recipe/forge/runs/rollout_dump.py), as
``<rollout_data_dir>/<pass>/<global step>.jsonl`` (``val``, and ``val_no_library`` for SLEA-RL).

verl's ``_validate`` samples each validation batch from its replay buffer (partition ``val``), reads what its
own metrics need and clears the batch from TransferQueue. :class:`ValidationRowTap` wraps the replay buffer and,
as each ``val`` batch is sampled, keeps its rows: the extra_fields the forge agent loop wrote from its
StepRecords, with the row's prompt ids. At the end of the pass the rows go back into TrajectoryRecords through
the row codec the library driver uses (``row_codec.trajectories_from_rows``) and out through the same line
writer as the embedded engine's, so both engines write the same fields. verl's own training dump
(``<dir>/<global step>.jsonl``, verl's fields) is left as verl writes it.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from agent_system.multi_turn_rollout.protocols import TrajectoryRecord
from recipe.forge.runs.rollout_dump import RolloutDump, shown_entries

VAL_PARTITION = "val"  # verl's TransferQueue partition of validation batches


def fetch_rows(batch: Any) -> list[dict]:
    """The rows of a sampled batch (a KVBatchMeta) from TransferQueue: each one's extra_fields plus its
    ``prompt_ids`` (the prompt without padding)."""
    import transfer_queue as tq

    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["prompts", "extra_fields"])
    extra = [getattr(e, "data", e) for e in data.pop("extra_fields").tolist()]
    prompts = [ids.tolist() for ids in data["prompts"].unbind()]
    return [{**row, "prompt_ids": ids} for row, ids in zip(extra, prompts)]


class ValidationRowTap:
    """verl's replay buffer, which also hands every batch it samples from the ``val`` partition to ``keep``."""

    def __init__(self, buffer: Any, keep: Callable[[Any], None]):
        self._buffer = buffer
        self._keep = keep

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Any, dict]:
        batch, metrics = self._buffer.sample(global_steps=global_steps, partition_id=partition_id,
                                             batch_size=batch_size)
        if partition_id == VAL_PARTITION:
            self._keep(batch)
        return batch, metrics

    def __getattr__(self, name: str) -> Any:  # everything else is the buffer's own
        return getattr(self._buffer, name)


def write_validation(dump: RolloutDump, trajectories: Sequence[TrajectoryRecord], global_steps: int,
                     library: Any | None, pass_name: str = "val"):
    """Write one validation pass as ``<pass_name>/<global_steps>.jsonl``; ``library``: the ExperienceLibrary the
    workers were published for the pass (None without one), for the shown entries."""
    return dump.write(trajectories, global_steps, shown_entries(trajectories, library), pass_name=pass_name)
