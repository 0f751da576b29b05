"""ObservationIndex: the observation clusters that drive both step-level retrieval and the step advantage groups.

An anchor observation ``o`` joins the cluster whose prototype is most similar, if ``sim(o, prototype) >=
threshold`` (ties: the older cluster); otherwise it founds a new cluster with itself as prototype. Within one
iteration an observation seen before keeps the cluster it got then, even where a cluster founded since is more
similar: one state's visits of an iteration share one step group and one set of experiences, whatever their turn
(otherwise the visits before and after that founding would split into two groups by time). ``sim`` is
:func:`recipe.forge.experience.similarity.sequence_similarity`; candidate prototypes come from the sub-linear
:class:`NearDuplicateIndex`. In exact mode (``exact=True``) clusters are identical anchors, GiGPO's grouping.

Observations are compared, and prototypes stored, as their :func:`~recipe.forge.experience.bounds.bounded_key`
of at most ``max_key_chars`` characters: an observation that short (every environment's: a few KB) is its own
key and clusters exactly as by the raw text; a longer one is its start plus its length and a digest of the
whole, so one step's clustering work and a prototype's size are bounded whatever the observation's size. In
exact mode two long observations share a cluster when their keys are equal, i.e. when they are equal (up to a
128-bit digest collision).

Cluster ids are never reused (an evicted cluster's id stays retired), so an id is a stable advantage-group key
across iterations. When the number of clusters exceeds ``max_clusters`` the least used cluster (fewest
assignments, then least recently used, then oldest) is evicted; ``on_evict`` callbacks let the library drop
its links to it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from recipe.forge.experience.bounds import MAX_KEY_CHARS, MIN_KEY_CHARS, bounded_key
from recipe.forge.experience.similarity import LSHParams, NearDuplicateIndex


@dataclass(slots=True)
class Cluster:
    """One observation cluster (slots: no per-instance dict)."""

    cluster_id: int
    prototype: str  # the bounded key of the observation that founded it
    uses: int  # observations assigned to it so far
    created_iter: int
    last_used_iter: int

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (what ``Cluster(**d)`` reads). ``dataclasses.asdict``, which copies
        recursively, took 0.43 of the 0.45 s a 10^5-cluster snapshot took; this takes 0.05 s."""
        return {name: getattr(self, name) for name in self.__slots__}


class ObservationIndex:
    def __init__(
        self,
        threshold: float = 0.85,
        max_clusters: int = 100_000,
        exact: bool = False,
        lsh: LSHParams | None = None,
        max_key_chars: int = MAX_KEY_CHARS,
    ):
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold={threshold} must be in [0, 1]")
        if max_clusters < 1:
            raise ValueError(f"max_clusters={max_clusters} must be >= 1")
        if max_key_chars < MIN_KEY_CHARS:
            raise ValueError(f"max_key_chars={max_key_chars} must be >= {MIN_KEY_CHARS}")
        self.max_key_chars = int(max_key_chars)
        self.threshold = 1.0 if exact else float(threshold)
        self.max_clusters = int(max_clusters)
        self.exact = bool(exact)
        self._search = NearDuplicateIndex(lsh, exact_only=self.exact)
        self.clusters: dict[int, Cluster] = {}
        self.next_id = 0
        self.evicted = 0
        self._heap: list[tuple[int, int, int]] = []  # lazy (uses, last_used_iter, id) entries
        self._assigned: dict[str, int] = {}  # this iteration's observation keys -> their clusters
        self._assigned_iteration: int | None = None
        self.on_evict: list[Callable[[int], None]] = []

    def __len__(self) -> int:
        return len(self.clusters)

    def __contains__(self, cluster_id: int) -> bool:
        return cluster_id in self.clusters

    def prototype(self, cluster_id: int) -> str:
        return self.clusters[cluster_id].prototype

    def key(self, obs: str) -> str:
        """What the index compares and stores for ``obs``: its bounded key (the module docstring)."""
        return bounded_key(obs, self.max_key_chars)

    def match(self, obs: str) -> tuple[int, float] | None:
        """(cluster id, similarity) of the cluster ``obs`` would join, without changing anything."""
        return self._search.best(self.key(obs), self.threshold)

    def similar_clusters(self, obs: str, threshold: float, limit: int | None = None) -> list[tuple[int, float]]:
        """Clusters whose prototype has ``sim >= threshold`` with ``obs``'s key, best first (read-only)."""
        return self._search.search(self.key(obs), threshold, limit)

    def assign(self, obs: str, iteration: int) -> int:
        """Cluster id of ``obs``, founding a cluster (its key the prototype) when none is similar enough, or the
        cluster ``obs`` got earlier in this ``iteration``; counts the use."""
        obs = self.key(obs)
        if iteration != self._assigned_iteration:
            self._assigned, self._assigned_iteration = {}, iteration
        cluster = self.clusters.get(self._assigned.get(obs, -1))
        if cluster is None:
            hit = self._search.best(obs, self.threshold)
            if hit is None:
                cluster = Cluster(self.next_id, obs, 0, iteration, iteration)
                self.next_id += 1
                self.clusters[cluster.cluster_id] = cluster
                self._search.add(cluster.cluster_id, obs)
            else:
                cluster = self.clusters[hit[0]]
            self._assigned[obs] = cluster.cluster_id
        cluster.uses += 1
        cluster.last_used_iter = iteration
        heapq.heappush(self._heap, (cluster.uses, cluster.last_used_iter, cluster.cluster_id))
        if len(self.clusters) > self.max_clusters:
            self._evict(len(self.clusters) - self.max_clusters, keep=cluster.cluster_id)
        return cluster.cluster_id

    def assign_batch(self, observations: Sequence[str], iteration: int) -> list[int]:
        """Assign in order (the result depends on order only through which observation founds a cluster)."""
        return [self.assign(obs, iteration) for obs in observations]

    def _evict(self, count: int, keep: int) -> None:
        if len(self._heap) > 4 * len(self.clusters) + 64:
            self._rebuild_heap()
        spared = []
        while count > 0 and self._heap:
            uses, last, cid = heapq.heappop(self._heap)
            cluster = self.clusters.get(cid)
            if cluster is None or cluster.uses != uses or cluster.last_used_iter != last:
                continue  # stale heap entry
            if cid == keep:
                spared.append((uses, last, cid))
                continue
            self._remove(cid)
            count -= 1
        for item in spared:
            heapq.heappush(self._heap, item)

    def _remove(self, cluster_id: int) -> None:
        del self.clusters[cluster_id]
        self._search.remove(cluster_id)
        self.evicted += 1
        for callback in self.on_evict:
            callback(cluster_id)

    def _rebuild_heap(self) -> None:
        self._heap = [(c.uses, c.last_used_iter, c.cluster_id) for c in self.clusters.values()]
        heapq.heapify(self._heap)

    def size_stats(self) -> dict[str, float]:
        """Cluster count and the distribution of assignments per cluster."""
        uses = np.fromiter((c.uses for c in self.clusters.values()), dtype=np.int64, count=len(self.clusters))
        if uses.size == 0:
            return {"count": 0, "mean_uses": 0.0, "max_uses": 0, "singleton_share": 0.0, "evicted": self.evicted}
        return {
            "count": int(uses.size),
            "mean_uses": float(uses.mean()),
            "max_uses": int(uses.max()),
            "singleton_share": float((uses == 1).mean()),
            "evicted": self.evicted,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "max_clusters": self.max_clusters,
            "exact": self.exact,
            "next_id": self.next_id,
            "evicted": self.evicted,
            "clusters": [c.to_dict() for c in self.clusters.values()],
        }

    def search_blob(self) -> dict[str, Any]:
        """The prototypes' near-duplicate search as plain data and numpy arrays
        (:meth:`NearDuplicateIndex.to_blob`). A snapshot ships it so that ``from_state`` can restore it instead of
        hashing every prototype again (most of a rebuild's time); its arrays travel as buffers."""
        return self._search.to_blob()

    @classmethod
    def from_state(cls, state: dict[str, Any], lsh: LSHParams | None = None,
                   search_blob: dict[str, Any] | None = None, max_clusters: int | None = None,
                   max_key_chars: int = MAX_KEY_CHARS) -> "ObservationIndex":
        """The index saved by ``state_dict``. ``search_blob`` (from ``search_blob()`` of the saved index) is used
        when it was built with the same LSH parameters and mode, else the search is rebuilt from the prototypes;
        a blob of another format (from another version of the code) is a ValueError. ``max_clusters``, when given,
        replaces the saved cap (it applies from the next new cluster on). Saved prototypes longer than
        ``max_key_chars`` (a file written before the size limits) become their keys."""
        cap = max_clusters if max_clusters is not None else state["max_clusters"]
        index = cls(state["threshold"], cap, state["exact"], lsh, max_key_chars)
        index.next_id = int(state["next_id"])
        index.evicted = int(state["evicted"])
        for raw in state["clusters"]:
            cluster = Cluster(**raw)
            cluster.prototype = index.key(cluster.prototype)
            index.clusters[cluster.cluster_id] = cluster
        search = NearDuplicateIndex.from_blob(search_blob) if search_blob is not None else None
        if search is not None and (search.params, search.exact_only) == (index._search.params, index.exact):
            if len(search) != len(index.clusters) or any(
                cid not in search or search.text(cid) != c.prototype for cid, c in index.clusters.items()
            ):
                raise ValueError("search_blob does not hold this state's cluster prototypes (a snapshot mixed up)")
            index._search = search
        else:
            for cluster in index.clusters.values():
                index._search.add(cluster.cluster_id, cluster.prototype)
        index._rebuild_heap()
        return index

    def cluster_ids(self) -> Iterable[int]:
        return self.clusters.keys()
