"""Per-entry episode outcomes: how the training episodes shown a lesson ended, against the episodes that visited
the lesson's clusters without being shown it.

Every library entry carries four counters (``OUTCOME_FIELDS``), counted by :func:`count_outcomes` once per
training iteration in ``ExperienceSystem.evolve``, from that iteration's trajectories, after ``absorb`` has filed
every step under one of the driver's clusters (a worker-local or missing cluster id replaced, on every engine)
and linked each injected entry to its step's cluster, and before the library evolves. For each entry ``e`` in the
library at that moment and each episode ``t`` of the iteration that ended without a fault
(``failure_reason`` None; a crashed worker says nothing about a lesson):

* ``t`` was **shown** ``e`` when at least one of its steps has ``e``'s id in ``experience_ids``:
  ``shown_episodes`` += 1, and ``shown_successes`` += 1 when ``t.success`` (the environment's own success flag);
* otherwise ``t`` visited ``e``'s clusters **without being shown** it when at least one of its steps'
  ``cluster_id`` is among ``e``'s linked cluster ids (as they stand after ``absorb``):
  ``unshown_episodes`` += 1, and ``unshown_successes`` += 1 when ``t.success``;
* otherwise ``t`` counts nothing for ``e``.

An episode counts at most once per entry, however many of its steps were shown the entry or visited its
clusters. So ``shown_successes <= shown_episodes`` and ``unshown_successes <= unshown_episodes``. Episodes of
warm-up iterations (the gates closed: no step is shown anything) count in the not-shown group of the entries
whose clusters they visit. Entries this iteration's evolution adds were shown to no episode yet and start at 0.
Validation passes never reach ``evolve`` and count nothing. A novelty merge of a candidate into an entry keeps
the entry's counters as they are (a candidate was shown to no episode; entries never merge into each other),
and a pruned entry's counters go with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from agent_system.multi_turn_rollout.protocols import TrajectoryRecord

if TYPE_CHECKING:
    from recipe.forge.experience.library import ExperienceLibrary

OUTCOME_FIELDS = ("shown_episodes", "shown_successes", "unshown_episodes", "unshown_successes")


def episode_exposure(library: "ExperienceLibrary", trajectory: TrajectoryRecord) -> tuple[set[int], set[int]]:
    """(ids of the library's entries ``trajectory`` was shown, ids of the other entries linked to a cluster one
    of its steps visited)."""
    shown = {int(raw) for step in trajectory.steps for raw in step.experience_ids} & library.entries.keys()
    linked: set[int] = set()
    for cid in {step.cluster_id for step in trajectory.steps if step.cluster_id is not None}:
        linked |= library.by_cluster.get(cid, set())
    return shown, linked - shown


def count_outcomes(library: "ExperienceLibrary", trajectories: Sequence[TrajectoryRecord]) -> None:
    """Add one iteration's episodes to the outcome counters of the library's entries (module docstring)."""
    for trajectory in trajectories:
        if trajectory.failure_reason is not None:
            continue
        won = int(bool(trajectory.success))
        shown, unshown = episode_exposure(library, trajectory)
        for entry_id in shown:
            entry = library.entries[entry_id]
            entry.shown_episodes += 1
            entry.shown_successes += won
        for entry_id in unshown:
            entry = library.entries[entry_id]
            entry.unshown_episodes += 1
            entry.unshown_successes += won
