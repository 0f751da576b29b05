"""Lesson retirement (beyond the paper): a lesson whose showing goes with worse outcomes, or whose habit the policy
keeps without it, stops being shown.

The paper shows every entry retrieval finds. A small policy copies what a lesson names (the answer-format habit
``Answer with one of <action>+</action>, <action>-</action>.`` ends with ``-``, and a policy that already answers in
the format then answers ``-`` more often), and most of what is shown names no action for the state, so lesson
precision cannot see it. Once per training iteration, after the outcome counters counted the iteration's episodes
(outcomes.py), :func:`retire_lessons` sets each entry's ``retired`` (None: shown):

* ``harm``: the episodes shown the entry succeeded less often than the episodes at its clusters not shown it, by
  more than two standard errors of the difference of the two rates (pooled), with at least ``harm_min_episodes``
  episodes in each group. The counters compare episodes of one run across iterations, and the policy usually
  improves, so episodes shown an entry (later) are favoured: the rule errs towards keeping lessons.
* ``habit kept``: a lesson asking for a checkable habit (``ExperienceEntry.habit``: ``valid_answer``, the
  invalid-answer habit of the rule extractor) is not shown while the iteration's steps at its clusters keep that
  habit at a rate of at least ``habit_kept_rate`` (valid answers); it is shown again in the iteration after one
  in which they fall below it.

An entry no episode visited this iteration keeps its state. A retired entry stays in the library (a duplicate
candidate merges into it and stays retired; capacity and pruning treat it as any entry), the viewer lists it with
its reason, and retrieval never returns it. ``algorithm.forge.retire_lessons=false`` keeps the paper's rule.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Sequence

from agent_system.multi_turn_rollout.protocols import TrajectoryRecord
from recipe.forge.experience.library import ExperienceEntry, ExperienceLibrary

HARM, HABIT_KEPT = "harm", "habit kept"
RETIREMENTS = (HARM, HABIT_KEPT)


def harmful(entry: ExperienceEntry, min_episodes: int) -> bool:
    """Whether the entry's shown episodes succeeded less often than its not-shown ones by more than two standard
    errors of the difference (pooled two-proportion), with at least ``min_episodes`` in each group."""
    n1, n0 = entry.shown_episodes, entry.unshown_episodes
    if n1 < min_episodes or n0 < min_episodes:
        return False
    p1, p0 = entry.shown_successes / n1, entry.unshown_successes / n0
    pooled = (entry.shown_successes + entry.unshown_successes) / (n1 + n0)
    se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n0))
    return p0 - p1 > 2.0 * se


def habit_rates(library: ExperienceLibrary, trajectories: Sequence[TrajectoryRecord]) -> dict[int, float]:
    """Per habit entry visited this iteration: the share of its clusters' steps that kept its habit (answered
    validly)."""
    kept: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    habit_ids = {e.entry_id for e in library.all_entries() if e.habit is not None}
    for trajectory in trajectories:
        if trajectory.failure_reason is not None:
            continue
        for step in trajectory.steps:
            for entry_id in library.by_cluster.get(step.cluster_id, ()) if step.cluster_id is not None else ():
                if entry_id in habit_ids:
                    kept[entry_id][0] += bool(step.is_action_valid)
                    kept[entry_id][1] += 1
    return {entry_id: valid / total for entry_id, (valid, total) in kept.items() if total}


def retire_lessons(library: ExperienceLibrary, trajectories: Sequence[TrajectoryRecord], min_episodes: int,
                   habit_kept_rate: float) -> dict[str, float]:
    """Set every entry's ``retired`` from its counters and this iteration's ``trajectories`` (module docstring);
    returns ``forge/lessons_retired/{harm,habit_kept}``, the entries retired for each reason now."""
    rates = habit_rates(library, trajectories)
    for entry in library.all_entries():
        if harmful(entry, min_episodes):
            entry.retired = HARM
        elif entry.entry_id in rates:
            entry.retired = HABIT_KEPT if rates[entry.entry_id] >= habit_kept_rate else None
        elif entry.retired == HARM:
            entry.retired = None
    counts = defaultdict(int)
    for entry in library.all_entries():
        if entry.retired is not None:
            counts[entry.retired] += 1
    return {f"forge/lessons_retired/{reason.replace(' ', '_')}": float(counts[reason]) for reason in RETIREMENTS}
