"""ExperienceLibrary: the golden zone (from successes) and warning zone (from failures), three levels each.

Rules (SLEA-RL paper):

* capacity per level: ``golden_capacity`` for principle/method/example, ``warning_capacity`` for
  mistake/pattern/diagnostic;
* novelty: a candidate whose similarity to an entry of the same zone and level reaches ``novelty_threshold``
  is merged into the most similar one (score becomes the max of both, support adds up, cluster links join; the
  entry's retrieval and outcome counters stay as they are: a candidate was shown to no step);
* admission: a novel candidate enters a full level only if it ranks above the level's lowest entry, which it
  replaces: a higher score, or an equal score with more support, or equal score and support (it is new
  evidence, from this iteration) against an entry last updated in an earlier iteration. Under binary rewards
  every golden entry has the same score, and comparing scores alone would freeze a full level for good;
* pruning keeps each level within capacity, dropping the lowest by (score, support, last update); among full
  ties the newer entry goes.

Similarity between entry texts is :func:`sequence_similarity`, or the cosine of sentence embeddings when an
embedder is given. Entries also remember the observation (``key``) and task they were drawn from and the
observation clusters they are linked to; retrieval searches those.

Size limits (bounds.py), applied to every candidate before admission and to every entry a checkpoint holds: the
text is cut to ``max_lesson_chars`` characters; the key, task, task type and the advice's state and actions are
:func:`bounded_key` s of at most ``max_key_chars`` characters (texts that short are kept as they are), and the
key and task searches compare a query's bounded key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np
from rapidfuzz import fuzz, process

from recipe.forge.experience.bounds import MAX_KEY_CHARS, MAX_LESSON_CHARS, bounded_key, cut
from recipe.forge.experience.similarity import LSHParams, NearDuplicateIndex

GOLDEN = "golden"
WARNING = "warning"
LEVELS: dict[str, tuple[str, str, str]] = {
    GOLDEN: ("principle", "method", "example"),
    WARNING: ("mistake", "pattern", "diagnostic"),
}

Embed = Callable[[Sequence[str]], np.ndarray]  # texts -> (n, d) L2-normalised float32
# checkable habits a lesson can ask for: "valid_answer", answer with one admissible action in the required format
HABITS = ("valid_answer",)


def check_zone_level(zone: str, level: str) -> None:
    if zone not in LEVELS:
        raise ValueError(f"zone={zone!r} is not one of {list(LEVELS)}")
    if level not in LEVELS[zone]:
        raise ValueError(f"level={level!r} is not a level of the {zone} zone; choose one of {list(LEVELS[zone])}")


@dataclass(frozen=True)
class Advice:
    """What a lesson tells the agent at one state, in checkable form (kept beside the text, never rendered).

    At the observation ``state``: answer with one of ``do`` (empty: the lesson names no action to take) and with
    none of ``avoid``. ``expert`` is the environment's expert action at the step the lesson was drawn from (None
    where the environment has no expert); it is only read to measure lessons (lesson_quality.py), never shown.
    """

    state: str
    do: tuple[str, ...] = ()
    avoid: tuple[str, ...] = ()
    expert: str | None = None

    def bounded(self, max_chars: int) -> "Advice":
        """This advice with its state and actions made :func:`bounded_key` s of at most ``max_chars`` characters."""
        return Advice(bounded_key(self.state, max_chars), tuple(bounded_key(a, max_chars) for a in self.do),
                      tuple(bounded_key(a, max_chars) for a in self.avoid),
                      None if self.expert is None else bounded_key(self.expert, max_chars))

    def as_dict(self) -> dict[str, Any]:
        """Plain data (lists, as JSON reads them back), read by :meth:`from_dict`."""
        return {"state": self.state, "do": list(self.do), "avoid": list(self.avoid), "expert": self.expert}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "Advice":
        return cls(str(raw["state"]), tuple(raw["do"]), tuple(raw["avoid"]), raw["expert"])


@dataclass
class Candidate:
    """An extracted experience before admission (``advice``: what it says to do at one state, or None)."""

    text: str
    zone: str
    level: str
    score: float
    task: str = ""
    task_type: str | None = None
    key: str = ""  # the observation it was drawn from (retrieval matches observations against it)
    cluster_ids: list[int] = field(default_factory=list)
    support: int = 1
    advice: Advice | None = None
    habit: str | None = None  # the behaviour the lesson asks for, where it is checkable (HABITS)

    def __post_init__(self):
        check_zone_level(self.zone, self.level)
        if not self.text.strip():
            raise ValueError("a candidate's text must not be empty")


@dataclass
class ExperienceEntry:
    """A lesson in the library. ``retrieval_count``: the steps it was injected into. The outcome counters
    (recipe/forge/experience/outcomes.py, counted once per training iteration): ``shown_episodes`` /
    ``shown_successes``, the episodes with at least one step shown this entry and how many of them succeeded;
    ``unshown_episodes`` / ``unshown_successes``, the other episodes with at least one step at one of its linked
    clusters, and how many of those succeeded. A novelty merge keeps them as they are. ``habit``: the behaviour
    the lesson asks for where the steps show whether it is kept (:data:`HABITS`). ``retired``: why the entry is not
    shown any more (recipe/forge/experience/retirement.py: ``harm`` or ``habit kept``), None while it is shown."""

    entry_id: int
    text: str
    zone: str
    level: str
    score: float
    task: str
    task_type: str | None
    key: str
    cluster_ids: list[int]
    support: int = 1
    retrieval_count: int = 0
    created_iter: int = 0
    updated_iter: int = 0
    advice: Advice | None = None
    shown_episodes: int = 0
    shown_successes: int = 0
    unshown_episodes: int = 0
    unshown_successes: int = 0
    habit: str | None = None
    retired: str | None = None

    @property
    def shown(self) -> bool:
        """Retrieval may show the entry (it is not retired)."""
        return self.retired is None

    def rank_key(self) -> tuple:
        """Larger is better: score, then support, then recency, then the older entry."""
        return (self.score, self.support, self.updated_iter, -self.entry_id)


def within_bounds(item: Any, max_key_chars: int, max_lesson_chars: int) -> Any:
    """A copy of ``item`` (a Candidate or an ExperienceEntry) within the size limits: text cut to
    ``max_lesson_chars``, key, task, task type and advice made bounded keys of ``max_key_chars``; ``item`` itself
    when it is within them already."""
    bounded = dict(
        text=cut(item.text, max_lesson_chars), key=bounded_key(item.key, max_key_chars),
        task=bounded_key(item.task, max_key_chars),
        task_type=None if item.task_type is None else bounded_key(item.task_type, max_key_chars),
        advice=None if item.advice is None else item.advice.bounded(max_key_chars))
    if all(value == getattr(item, name) for name, value in bounded.items()):
        return item
    return dataclasses.replace(item, **bounded)


def admission_key(candidate: Candidate, iteration: int) -> tuple:
    """A candidate's (score, support, recency) at ``iteration``, comparable with ``ExperienceEntry.rank_key()[:3]``."""
    return (float(candidate.score), int(candidate.support), int(iteration))


class ExperienceLibrary:
    def __init__(
        self,
        golden_capacity: int = 100,
        warning_capacity: int = 50,
        novelty_threshold: float = 0.85,
        embed: Embed | None = None,
        lsh: LSHParams | None = None,
        max_key_chars: int = MAX_KEY_CHARS,
        max_lesson_chars: int = MAX_LESSON_CHARS,
    ):
        if golden_capacity < 0 or warning_capacity < 0:
            raise ValueError(f"capacities must be >= 0, got golden={golden_capacity} warning={warning_capacity}")
        self.max_key_chars = int(max_key_chars)
        self.max_lesson_chars = int(max_lesson_chars)
        self.capacity = {GOLDEN: int(golden_capacity), WARNING: int(warning_capacity)}
        self.novelty_threshold = float(novelty_threshold)
        self.embed = embed
        self.entries: dict[int, ExperienceEntry] = {}
        self.levels: dict[tuple[str, str], dict[int, None]] = {(z, l): {} for z in LEVELS for l in LEVELS[z]}
        self.by_cluster: dict[int, set[int]] = {}
        self.next_id = 0
        self.lsh = lsh
        self._keys = NearDuplicateIndex(lsh)
        self._tasks: NearDuplicateIndex | None = None  # built on the first task search (task / hybrid modes)
        self._vectors: dict[int, np.ndarray] = {}  # entry id -> embedding of its text (novelty check)

    def __len__(self) -> int:
        return len(self.entries)

    def size(self, zone: str | None = None) -> int:
        if zone is None:
            return len(self.entries)
        return sum(len(self.levels[(zone, level)]) for level in LEVELS[zone])

    def level_entries(self, zone: str, level: str) -> list[ExperienceEntry]:
        """Entries of one level, best first."""
        check_zone_level(zone, level)
        return sorted((self.entries[i] for i in self.levels[(zone, level)]), key=ExperienceEntry.rank_key, reverse=True)

    # admission -----------------------------------------------------------------------------------------------

    def admit(self, candidate: Candidate, iteration: int) -> tuple[str, int | None]:
        """Apply novelty merge and score-based admission to ``candidate`` within the size limits (the module
        docstring). Returns ("merged" | "added" | "rejected", entry id)."""
        candidate = within_bounds(candidate, self.max_key_chars, self.max_lesson_chars)
        capacity = self.capacity[candidate.zone]
        if capacity == 0:
            return "rejected", None
        twin = self.most_similar(candidate.text, candidate.zone, candidate.level)
        if twin is not None and twin[1] >= self.novelty_threshold:
            entry = self.entries[twin[0]]
            entry.score = max(entry.score, float(candidate.score))
            entry.support += candidate.support
            for cid in candidate.cluster_ids:
                self.link(entry.entry_id, cid)
            entry.updated_iter = iteration
            if entry.advice is None:
                entry.advice = candidate.advice
            if entry.habit is None:
                entry.habit = candidate.habit
            return "merged", entry.entry_id
        level = self.levels[(candidate.zone, candidate.level)]
        if len(level) >= capacity:
            lowest = min((self.entries[i] for i in level), key=ExperienceEntry.rank_key)
            if not admission_key(candidate, iteration) > lowest.rank_key()[:3]:
                return "rejected", None
            self.remove(lowest.entry_id)
        return "added", self._insert(candidate, iteration)

    def insert_unchecked(self, candidates: Iterable[Candidate], iteration: int) -> list[int]:
        """Insert without the novelty check or admission (imports, benchmarks); capacity is enforced by ``prune``
        afterwards. Returns the new ids."""
        ids = [self._insert(within_bounds(c, self.max_key_chars, self.max_lesson_chars), iteration) for c in candidates]
        self.prune()
        return ids

    def _insert(self, candidate: Candidate, iteration: int) -> int:
        entry = ExperienceEntry(
            entry_id=self.next_id,
            text=candidate.text,
            zone=candidate.zone,
            level=candidate.level,
            score=float(candidate.score),
            task=candidate.task,
            task_type=candidate.task_type,
            key=candidate.key,
            cluster_ids=[],
            support=int(candidate.support),
            created_iter=iteration,
            updated_iter=iteration,
            advice=candidate.advice,
            habit=candidate.habit,
        )
        self.next_id += 1
        self._store(entry)
        for cid in candidate.cluster_ids:
            self.link(entry.entry_id, cid)
        return entry.entry_id

    def _store(self, entry: ExperienceEntry) -> None:
        self.entries[entry.entry_id] = entry
        self.levels[(entry.zone, entry.level)][entry.entry_id] = None
        self._keys.add(entry.entry_id, entry.key)
        if self._tasks is not None:
            self._tasks.add(entry.entry_id, entry.task)
        for cid in entry.cluster_ids:
            self.by_cluster.setdefault(cid, set()).add(entry.entry_id)
        if self.embed is not None:
            self._vectors[entry.entry_id] = self.embed([entry.text])[0]

    def remove(self, entry_id: int) -> None:
        entry = self.entries.pop(entry_id)
        del self.levels[(entry.zone, entry.level)][entry_id]
        self._keys.remove(entry_id)
        if self._tasks is not None:
            self._tasks.remove(entry_id)
        self._vectors.pop(entry_id, None)
        for cid in entry.cluster_ids:
            linked = self.by_cluster.get(cid)
            if linked is not None:
                linked.discard(entry_id)
                if not linked:
                    del self.by_cluster[cid]

    def prune(self) -> int:
        """Bring every level back within capacity; returns how many entries were dropped."""
        dropped = 0
        for (zone, _), ids in self.levels.items():
            excess = len(ids) - self.capacity[zone]
            if excess > 0:
                worst = sorted((self.entries[i] for i in ids), key=ExperienceEntry.rank_key)[:excess]
                for entry in worst:
                    self.remove(entry.entry_id)
                dropped += excess
        return dropped

    def most_similar(self, text: str, zone: str, level: str) -> tuple[int, float] | None:
        """(entry id, similarity) of the entry of that zone and level most similar to ``text`` (ties: older)."""
        ids = list(self.levels[(zone, level)])
        if not ids:
            return None
        if self.embed is not None:
            sims = np.stack([self._vectors[i] for i in ids]) @ self.embed([text])[0]
            best = int(np.argmax(sims))
            return ids[best], float(sims[best])
        best = process.extractOne(text, [self.entries[i].text for i in ids], scorer=fuzz.ratio)
        return ids[best[2]], best[1] / 100.0

    # cluster links -------------------------------------------------------------------------------------------

    def link(self, entry_id: int, cluster_id: int) -> None:
        entry = self.entries[entry_id]
        if cluster_id not in entry.cluster_ids:
            entry.cluster_ids.append(cluster_id)
            self.by_cluster.setdefault(cluster_id, set()).add(entry_id)

    def unlink(self, entry_id: int, cluster_id: int) -> None:
        """Undo :meth:`link` (nothing where the entry or the link is gone)."""
        entry = self.entries.get(entry_id)
        if entry is not None and cluster_id in entry.cluster_ids:
            entry.cluster_ids.remove(cluster_id)
            linked = self.by_cluster[cluster_id]
            linked.discard(entry_id)
            if not linked:
                del self.by_cluster[cluster_id]

    def unlink_cluster(self, cluster_id: int) -> None:
        for entry_id in self.by_cluster.pop(cluster_id, ()):
            self.entries[entry_id].cluster_ids.remove(cluster_id)

    # lookups used by retrieval -------------------------------------------------------------------------------

    def top_for_cluster(self, cluster_id: int, zone: str, k: int) -> list[ExperienceEntry]:
        """The best ``k`` shown (not retired) entries of ``zone`` linked to the cluster."""
        linked = (self.entries[i] for i in self.by_cluster.get(cluster_id, ()))
        return sorted((e for e in linked if e.zone == zone and e.shown), key=ExperienceEntry.rank_key,
                      reverse=True)[:k]

    def key(self, text: str) -> str:
        """What the key and task searches compare for ``text``: its :func:`bounded_key`."""
        return bounded_key(text, self.max_key_chars)

    def search_keys(self, obs: str, threshold: float) -> list[tuple[ExperienceEntry, float]]:
        """Entries whose source observation has ``sim >= threshold`` with ``obs`` (bounded keys), most similar first."""
        return [(self.entries[i], s) for i, s in self._keys.search(self.key(obs), threshold)]

    def search_tasks(self, task: str, threshold: float) -> list[tuple[ExperienceEntry, float]]:
        """Entries whose source task has ``sim >= threshold`` with ``task`` (bounded keys), most similar first."""
        if self._tasks is None:
            self._tasks = NearDuplicateIndex(self.lsh)
            for entry in self.entries.values():
                self._tasks.add(entry.entry_id, entry.task)
        return [(self.entries[i], s) for i, s in self._tasks.search(self.key(task), threshold)]

    def all_entries(self) -> Iterable[ExperienceEntry]:
        return self.entries.values()

    # persistence ---------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "golden_capacity": self.capacity[GOLDEN],
            "warning_capacity": self.capacity[WARNING],
            "novelty_threshold": self.novelty_threshold,
            "next_id": self.next_id,
            "entries": [{**asdict(e), "advice": None if e.advice is None else e.advice.as_dict()}
                        for e in self.entries.values()],
        }

    @classmethod
    def from_state(
        cls, state: dict[str, Any], embed: Embed | None = None, lsh: LSHParams | None = None,
        capacity: tuple[int, int] | None = None, novelty_threshold: float | None = None,
        max_key_chars: int = MAX_KEY_CHARS, max_lesson_chars: int = MAX_LESSON_CHARS,
    ) -> "ExperienceLibrary":
        """The library saved by ``state_dict``; ``capacity`` (golden, warning) and ``novelty_threshold``, when
        given, replace the saved ones (a smaller capacity drops the lowest-ranked entries of a full level). The
        size limits apply to the saved entries too (a file written before them may hold longer texts)."""
        golden, warning = capacity if capacity is not None else (state["golden_capacity"], state["warning_capacity"])
        novelty = novelty_threshold if novelty_threshold is not None else state["novelty_threshold"]
        library = cls(golden, warning, novelty, embed, lsh, max_key_chars, max_lesson_chars)
        library.next_id = int(state["next_id"])
        entries = []
        for raw in state["entries"]:
            advice = None if raw.get("advice") is None else Advice.from_dict(raw["advice"])
            entry = ExperienceEntry(**{**raw, "cluster_ids": list(raw["cluster_ids"]), "advice": advice})
            entries.append(within_bounds(entry, library.max_key_chars, library.max_lesson_chars))
        if embed is not None:  # one batched call fills the embedder's cache for the per-entry lookups below
            embed([entry.text for entry in entries])
        for entry in entries:
            library._store(entry)
        library.prune()
        return library
