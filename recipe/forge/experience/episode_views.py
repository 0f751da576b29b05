"""Experiences for each episode from its own read-only copy of one library, for evaluations.

A training rollout's episodes share one experience system: the clusters one episode's observations found and
the entries its retrieval fallback links to them change what the next episode is shown. That is right while
the library learns, but it makes an evaluation's figures depend on which episodes ran together and in which
order, i.e. on the evaluation's batch size. Here every episode (a ``traj_uid``) gets a copy of the same
snapshot on its first step and keeps it to its end: it is shown exactly what it would be shown running alone.

``open_gates``: the copies inject whatever the library holds (warm-up and minimum size as 0), so that a
checkpoint taken before the training run's gates opened is still evaluated with its library.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any, Sequence

from agent_system.multi_turn_rollout.protocols import StepExperience, StepQuery
from recipe.forge.experience.system import ExperienceSystem, LibrarySnapshot


class EpisodeViews:
    """An ``ExperienceProvider``: each episode retrieves from its own copy of ``system``'s library and index."""

    def __init__(self, system: ExperienceSystem, tokenizer: Any | None = None, open_gates: bool = True):
        snapshot = system.snapshot(with_search=True)
        if open_gates:
            snapshot = dataclasses.replace(snapshot, config={**snapshot.config, "warmup_iterations": 0,
                                                             "min_library_size": 0})
        self.snapshot: LibrarySnapshot = snapshot
        self.library = system.library  # what the shown entry ids refer to (the copies only add links)
        self.tokenizer = tokenizer
        self.embedder = system.embedder
        self._views: dict[str, ExperienceSystem] = {}

    def view(self, traj_uid: str) -> ExperienceSystem:
        """The episode's copy (made on its first step)."""
        if traj_uid not in self._views:
            self._views[traj_uid] = ExperienceSystem.from_snapshot(self.snapshot, tokenizer=self.tokenizer,
                                                                   embedder=self.embedder)
        return self._views[traj_uid]

    def provide(self, queries: Sequence[StepQuery]) -> list[StepExperience]:
        out: list[StepExperience | None] = [None] * len(queries)
        rows_of: dict[str, list[int]] = defaultdict(list)
        for row, query in enumerate(queries):
            rows_of[query.traj_uid].append(row)
        for traj_uid, rows in rows_of.items():
            for row, experience in zip(rows, self.view(traj_uid).provide([queries[r] for r in rows])):
                out[row] = experience
        return out

    def shown(self, queries: Sequence[StepQuery], experiences: Sequence[StepExperience]) -> None:
        """Each episode's copy learns what its own steps are shown."""
        for query, experience in zip(queries, experiences, strict=True):
            self.view(query.traj_uid).shown([experience])

    def forget(self) -> None:
        """Drop the copies of finished episodes (call between rollouts)."""
        self._views.clear()
