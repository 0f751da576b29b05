"""Step-level retrieval: which library entries a step sees, by retrieval mode, with the paper's fallback.

Modes (``retrieval_mode``), each returning at most ``top_k_golden`` golden and ``top_k_warning`` warning entries:

* ``observation`` (default, the paper's step-level retrieval): the entries linked to the step's observation
  cluster, best score first (TopK(E+_c, k+) U TopK(E-_c, k-)). If the cluster has no linked entries yet, the
  fallback ranks the whole library by similarity between the observation and each entry's source observation,
  keeps those with similarity >= ``threshold``, and takes the top-k of each zone (most similar first, then
  score). ``ExperienceSystem.provide`` links what the fallback showed a step to its cluster at once, so the
  next visit of the cluster finds those entries directly.
* ``clustered``: the cluster's linked entries only (no fallback): an ablation.
* ``task``: task-level retrieval (the paper's ablation): entries whose source task has similarity >=
  ``threshold`` with the episode's task, most similar first, then score.
* ``hybrid``: ``observation`` results, topped up with ``task`` results when a zone has fewer than its top-k.

A retired entry (``ExperienceEntry.retired``: its showing went with worse outcomes, or the habit it asks for is
kept without it; retirement.py) is never retrieved, in any mode.

Similarity is :func:`sequence_similarity` through the library's sub-linear indexes, or, with an embedder, the
cosine between sentence embeddings (a dense scan over the library, which capacity bounds). Either compares the
bounded keys of the observation and task (``ExperienceLibrary.key``, bounds.py), as the entries store them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from recipe.forge.experience.library import GOLDEN, WARNING, Embed, ExperienceEntry, ExperienceLibrary

RETRIEVAL_MODES = ("observation", "task", "hybrid", "clustered")


@dataclass
class Retrieved:
    entries: list[ExperienceEntry]  # golden first, then warning, each best first
    fallback: bool  # found by the whole-library fallback (ExperienceSystem.provide links them to the cluster)


class EmbeddingSearch:
    """Cosine search over the entries' source observations or tasks; vectors cached per entry."""

    def __init__(self, embed: Embed):
        self.embed = embed

    def search(self, entries: Sequence[ExperienceEntry], field: str, query: str, threshold: float):
        if not entries:
            return []
        vectors = self.embed([getattr(e, field) for e in entries])  # the embedder caches per text
        sims = vectors @ self.embed([query])[0]
        keep = np.flatnonzero(sims >= threshold)
        return [(entries[i], float(sims[i])) for i in keep]


class Retriever:
    def __init__(
        self,
        library: ExperienceLibrary,
        mode: str = "observation",
        top_k_golden: int = 2,
        top_k_warning: int = 1,
        threshold: float = 0.85,
        embed: Embed | None = None,
    ):
        if mode not in RETRIEVAL_MODES:
            raise ValueError(f"retrieval_mode={mode!r} is not one of {list(RETRIEVAL_MODES)}")
        if top_k_golden < 0 or top_k_warning < 0:
            raise ValueError(f"top-k must be >= 0, got golden={top_k_golden} warning={top_k_warning}")
        self.library = library
        self.mode = mode
        self.k = {GOLDEN: int(top_k_golden), WARNING: int(top_k_warning)}
        self.threshold = float(threshold)
        self.dense = EmbeddingSearch(embed) if embed is not None else None

    def retrieve(self, obs: str, task: str, cluster_id: int | None) -> Retrieved:
        obs, task = self.library.key(obs), self.library.key(task)
        if self.mode == "task":
            return Retrieved(self._join(self._by_similarity(task, "task")), False)
        linked = self._from_cluster(cluster_id)
        fallback = self.mode in ("observation", "hybrid") and not any(linked.values())
        if fallback:
            linked = self._by_similarity(obs, "key")
        if self.mode == "hybrid":
            by_task = self._by_similarity(task, "task")
            for zone, entries in linked.items():
                have = {e.entry_id for e in entries}
                entries.extend([e for e in by_task[zone] if e.entry_id not in have][: self.k[zone] - len(entries)])
        return Retrieved(self._join(linked), fallback)

    def _from_cluster(self, cluster_id: int | None) -> dict[str, list[ExperienceEntry]]:
        if cluster_id is None:
            return {GOLDEN: [], WARNING: []}
        return {zone: self.library.top_for_cluster(cluster_id, zone, k) for zone, k in self.k.items()}

    def _by_similarity(self, query: str, field: str) -> dict[str, list[ExperienceEntry]]:
        """Top-k per zone among entries whose ``field`` ("key" or "task") has sim >= threshold with ``query``."""
        if self.dense is not None:
            hits = self.dense.search(list(self.library.all_entries()), field, query, self.threshold)
        elif field == "key":
            hits = self.library.search_keys(query, self.threshold)
        else:
            hits = self.library.search_tasks(query, self.threshold)
        hits.sort(key=lambda hit: (-hit[1], tuple(-x for x in hit[0].rank_key())))
        out: dict[str, list[ExperienceEntry]] = {GOLDEN: [], WARNING: []}
        for entry, _ in hits:
            zone = out[entry.zone]
            if len(zone) < self.k[entry.zone] and entry.shown:
                zone.append(entry)
        return out

    @staticmethod
    def _join(by_zone: dict[str, list[ExperienceEntry]]) -> list[ExperienceEntry]:
        return by_zone[GOLDEN] + by_zone[WARNING]


def gates_open(iteration: int, library_size: int, warmup_iterations: int, min_library_size: int) -> bool:
    """Injection starts once ``warmup_iterations`` iterations are done (iterations count from 0) and the
    library holds more than ``min_library_size`` entries (the paper's |E| > C_min)."""
    return iteration >= warmup_iterations and library_size > min_library_size
