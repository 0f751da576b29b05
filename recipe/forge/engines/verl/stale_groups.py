"""What verl's staleness bound drops, counted as ``forge/stale_*`` metrics.

In the async modes verl's replay buffer (``ReplayBufferAsync``) drops a finished task group when it was dispatched
more than ``trainer.v1.sampler.max_off_policy_threshold`` policy versions ago (strategy ``drop``; ``wait`` holds
sampling back instead and drops nothing). The dropped group's rows are cleared from TransferQueue inside verl's
sampling, so they never reach the trainer: no advantage, step group, lesson or outcome count is made from them,
which is what SLEA-RL wants. verl reports how many groups it dropped (``training/off_policy/evicted_samples``);
SLEA-RL's rows are steps, so :class:`StaleGroups` also counts the episodes and steps those groups held, per
iteration:

* ``forge/stale_groups_dropped``: task groups dropped for staleness;
* ``forge/stale_episodes_dropped``: their episodes (the G copies of each, as far as they were stored);
* ``forge/stale_steps_dropped``: their steps (training rows).

This is the one place that reaches past the replay buffer's public interface: verl selects its buffer class
itself (its documented extension, ``trainer.v1.sampler.custom_sampler``, replaces the class and with it verl's own
group filtering), so :func:`count_stale_groups` gives verl's own async buffer the subclass
:class:`StaleCountingReplayBuffer`, whose ``_evict_terminal_groups`` (verl's method, by that name) counts the stale
groups' rows before verl clears them. tests/verl_engine/test_stale_groups.py checks the method still exists with
that signature, so an upgrade that moves it fails there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync

TRAIN_PARTITION = "train"


@dataclass
class StaleGroups:
    """Counts of what the staleness bound dropped since the last :meth:`metrics`."""

    groups: int = 0
    episodes: int = 0
    steps: int = 0

    def count(self, partition: Mapping[str, dict], stale_uids: set[str]) -> None:
        """Count the stale groups ``stale_uids`` and their rows in ``partition`` (TransferQueue's keys
        ``{uid}_{session}_{index}`` -> tags: one row per step of the session's episode)."""
        rows = [key for key in partition if key.split("_")[0] in stale_uids]
        self.groups += len(stale_uids)
        self.episodes += len({key.rsplit("_", 1)[0] for key in rows})
        self.steps += len(rows)

    def metrics(self) -> dict[str, float]:
        """The counts as forge/stale_* metrics; the counts start again from 0."""
        out = {"forge/stale_groups_dropped": float(self.groups), "forge/stale_episodes_dropped": float(self.episodes),
               "forge/stale_steps_dropped": float(self.steps)}
        self.groups = self.episodes = self.steps = 0
        return out


class StaleCountingReplayBuffer(ReplayBufferAsync):
    """verl's async replay buffer, counting the stale groups it drops into ``stale_groups``."""

    stale_groups: StaleGroups

    def _evict_terminal_groups(self, global_steps: int, partition_id: str, eviction_reasons: tuple) -> tuple:
        stale_uids = eviction_reasons[0]
        if stale_uids and partition_id == TRAIN_PARTITION:
            self.stale_groups.count(self.partitions[partition_id], set(stale_uids))
        return super()._evict_terminal_groups(global_steps, partition_id, eviction_reasons)


def count_stale_groups(buffer: Any, counter: StaleGroups) -> bool:
    """Make ``buffer`` count what the staleness bound drops into ``counter`` when it is verl's own async buffer
    (it becomes a :class:`StaleCountingReplayBuffer`, its state as it is); returns whether it counts (a
    synchronous buffer drops nothing for staleness; a custom one is left alone)."""
    if type(buffer) is not ReplayBufferAsync:
        return False
    buffer.__class__ = StaleCountingReplayBuffer
    buffer.stale_groups = counter
    return True
