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

An episode generated with an older library version (verl's async modes train such episodes) counts nothing for
the entries added after that version: it could not have been shown them (``entries_before``).

An episode counts at most once per entry, however many of its steps were shown the entry or visited its
clusters. So ``shown_successes <= shown_episodes`` and ``unshown_successes <= unshown_episodes``. Episodes of
warm-up iterations (the gates closed: no step is shown anything) count in the not-shown group of the entries
whose clusters they visit. Entries this iteration's evolution adds were shown to no episode yet and start at 0.
Validation passes never reach ``evolve`` and count nothing. A novelty merge of a candidate into an entry keeps
the entry's counters as they are (a candidate was shown to no episode; entries never merge into each other),
and a pruned entry's counters go with it.

The success rate of each group is successes / episodes (none without episodes); where both groups have
episodes their difference (shown minus not shown) is shown too. The difference compares episodes of one run,
across iterations and policies, and retrieval decides who is shown what: it describes, it does not measure a
causal effect.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from agent_system.multi_turn_rollout.protocols import TrajectoryRecord
from recipe.forge.experience.library import ExperienceLibrary

OUTCOME_FIELDS = ("shown_episodes", "shown_successes", "unshown_episodes", "unshown_successes")
SHOWN_LABEL = "shown"
UNSHOWN_LABEL = "same clusters, not shown"
OUTCOME_COLUMNS = (SHOWN_LABEL, UNSHOWN_LABEL, "difference")  # the viewer's and the diff's table columns


def episode_exposure(library: ExperienceLibrary, trajectory: TrajectoryRecord) -> tuple[set[int], set[int]]:
    """(ids of the library's entries ``trajectory`` was shown, ids of the other entries linked to a cluster one
    of its steps visited)."""
    shown = {int(raw) for step in trajectory.steps for raw in step.experience_ids} & library.entries.keys()
    linked: set[int] = set()
    for cid in {step.cluster_id for step in trajectory.steps if step.cluster_id is not None}:
        linked |= library.by_cluster.get(cid, set())
    return shown, linked - shown


def count_outcomes(library: ExperienceLibrary, trajectories: Sequence[TrajectoryRecord],
                   entries_before: Callable[[TrajectoryRecord], int | None] | None = None) -> None:
    """Add one iteration's episodes to the outcome counters of the library's entries (module docstring).

    ``entries_before(t)``: the first entry id that was not in the library ``t`` was shown (None: every entry was);
    an entry added after the episode's library version (an asynchronous engine trains episodes generated with an
    older library) is not counted as visited without being shown."""
    for trajectory in trajectories:
        if trajectory.failure_reason is not None:
            continue
        won = int(bool(trajectory.success))
        shown, unshown = episode_exposure(library, trajectory)
        bound = entries_before(trajectory) if entries_before is not None else None
        if bound is not None:
            unshown = {entry_id for entry_id in unshown if entry_id < bound}
        for entry_id in shown:
            entry = library.entries[entry_id]
            entry.shown_episodes += 1
            entry.shown_successes += won
        for entry_id in unshown:
            entry = library.entries[entry_id]
            entry.unshown_episodes += 1
            entry.unshown_successes += won


def _group(successes: int, episodes: int) -> dict[str, Any]:
    return {"successes": successes, "episodes": episodes, "rate": successes / episodes if episodes else None}


def outcome_summary(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A saved entry's outcomes: ``{"shown": {successes, episodes, rate}, "unshown": {...}, "difference"}``,
    the rates None without episodes, the difference (shown rate minus not-shown rate) None unless both exist.
    An entry saved before the counters existed has 0 everywhere."""
    shown = _group(int(entry.get("shown_successes", 0)), int(entry.get("shown_episodes", 0)))
    unshown = _group(int(entry.get("unshown_successes", 0)), int(entry.get("unshown_episodes", 0)))
    both = shown["rate"] is not None and unshown["rate"] is not None
    return {"shown": shown, "unshown": unshown, "difference": shown["rate"] - unshown["rate"] if both else None}


def group_text(group: Mapping[str, Any]) -> str:
    """``3/4 (75%)``, or ``-`` without episodes."""
    if group["rate"] is None:
        return "-"
    return f"{group['successes']}/{group['episodes']} ({group['rate']:.0%})"


def difference_text(summary: Mapping[str, Any]) -> str:
    """``+50 pp`` (percentage points, shown minus not shown), or ``-`` unless both groups have episodes."""
    difference = summary["difference"]
    return "-" if difference is None else f"{100 * difference:+.0f} pp"


def outcome_cells(summary: Mapping[str, Any]) -> tuple[str, str, str]:
    """The cells of ``OUTCOME_COLUMNS`` in a table row: ``3/4 (75%)``, ``1/4 (25%)``, ``+50 pp``."""
    return group_text(summary["shown"]), group_text(summary["unshown"]), difference_text(summary)


def outcome_text(summary: Mapping[str, Any]) -> str:
    """``shown: 3/4 (75%); same clusters, not shown: 1/4 (25%); difference: +50 pp`` (``-`` where missing)."""
    return (f"{SHOWN_LABEL}: {group_text(summary['shown'])}; {UNSHOWN_LABEL}: {group_text(summary['unshown'])}; "
            f"difference: {difference_text(summary)}")
