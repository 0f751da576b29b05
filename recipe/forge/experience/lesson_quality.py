"""Lesson quality: whether the lessons name the right action, checked against the environment's expert.

A lesson that names an action for one state carries its advice (:class:`~recipe.forge.experience.library.Advice`:
the state, the actions to take ``do`` and not to take ``avoid``, and ``expert``, the environment's expert action
at the step the lesson was drawn from). Its :func:`verdict`:

* ``"right"``: the expert is known, it is not in ``avoid``, and ``do`` is empty or holds it;
* ``"wrong"``: the expert is known and the advice goes against it (the expert is in ``avoid``, or ``do`` names
  other actions only);
* ``None``, not checkable: the lesson has no advice, or its step had no expert.

Actions are compared whitespace-normalised and case-folded (``"Go  North"`` is ``"go north"``); states are
compared whitespace-normalised.

:func:`lesson_quality_stats` ``(steps, entries) -> metrics`` measures the lessons a batch was shown. An injected
lesson is one (step, shown entry) pair (``StepRecord.experience_ids`` are the shown entry ids, as strings), so an
entry shown at k steps counts k times; ``entries`` maps entry ids to the entries the steps were shown from (the
library's ``entries``), and an id not in it (pruned since) is an injected lesson that cannot be checked.

* ``forge/lesson_precision``: right / (right + wrong) over the injected lessons;
* ``forge/lesson_precision/<level>``: the same for the lessons of each library level (all six levels);
* ``forge/lessons_checkable``: the share of the injected lessons that are checkable;
* ``forge/lesson_conflict``: the share of the steps shown at least one lesson whose shown lessons name different
  actions for one state: two of them with advice at the same state whose ``do`` sets (both non-empty) differ, or
  an action in one's ``do`` that is in another's ``avoid``;
* ``forge/library_precision``: right / (right + wrong) over the checkable entries of ``entries``.

A precision with no checkable lesson behind it is left out of the metrics (a 0.0 would read as "every lesson
wrong"); the shares (``lessons_checkable``, ``lesson_conflict``) are 0.0 where nothing was shown. Read a
precision together with ``forge/lessons_checkable``.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping, Sequence

from agent_system.multi_turn_rollout.protocols import StepRecord
from recipe.forge.experience.library import LEVELS, Advice, ExperienceEntry

RIGHT, WRONG = "right", "wrong"


def normalise(action: str) -> str:
    """``action`` with every run of whitespace made one space, trimmed and case-folded."""
    return " ".join(str(action).split()).casefold()


def verdict(advice: Advice | None) -> str | None:
    """``"right"``, ``"wrong"``, or None where ``advice`` is None or has no expert (the module docstring)."""
    if advice is None or advice.expert is None:
        return None
    expert = normalise(advice.expert)
    do, avoid = {normalise(a) for a in advice.do}, {normalise(a) for a in advice.avoid}
    return RIGHT if expert not in avoid and (not do or expert in do) else WRONG


def precision(verdicts: Iterable[str | None]) -> float | None:
    """right / (right + wrong) of ``verdicts`` (None ones left out); None with none checkable."""
    counts = Counter(v for v in verdicts if v is not None)
    checked = counts[RIGHT] + counts[WRONG]
    return counts[RIGHT] / checked if checked else None


def _measured(metrics: dict[str, float | None]) -> dict[str, float]:
    """``metrics`` without the precisions that had nothing to measure."""
    return {name: value for name, value in metrics.items() if value is not None}


def conflicting(advices: Sequence[Advice]) -> bool:
    """Whether two of ``advices`` name different actions for one state (the module docstring)."""
    by_state: dict[str, list[tuple[frozenset, frozenset]]] = {}
    for advice in advices:
        do = frozenset(normalise(a) for a in advice.do)
        avoid = frozenset(normalise(a) for a in advice.avoid)
        by_state.setdefault(" ".join(advice.state.split()), []).append((do, avoid))
    for named in by_state.values():
        for i, (do_a, avoid_a) in enumerate(named):
            for do_b, avoid_b in named[i + 1:]:
                if (do_a and do_b and do_a != do_b) or do_a & avoid_b or do_b & avoid_a:
                    return True
    return False


def injected_lesson_stats(steps: Sequence[StepRecord], entries: Mapping[int, ExperienceEntry]) -> dict[str, float]:
    """``forge/lesson_precision`` (overall and per level), ``forge/lessons_checkable`` and
    ``forge/lesson_conflict`` of the lessons shown to ``steps``."""
    verdicts: list[str | None] = []
    by_level: dict[str, list[str | None]] = {level: [] for zone in LEVELS.values() for level in zone}
    shown_steps = conflicts = 0
    for step in steps:
        shown = [entries.get(int(raw)) for raw in step.experience_ids]
        for entry in shown:
            verdicts.append(None if entry is None else verdict(entry.advice))
            if entry is not None:
                by_level[entry.level].append(verdicts[-1])
        if shown:
            shown_steps += 1
            conflicts += conflicting([e.advice for e in shown if e is not None and e.advice is not None])
    checkable = sum(v is not None for v in verdicts)
    out: dict[str, float | None] = {
        "forge/lesson_precision": precision(verdicts),
        "forge/lessons_checkable": checkable / len(verdicts) if verdicts else 0.0,
        "forge/lesson_conflict": conflicts / shown_steps if shown_steps else 0.0,
    }
    out.update({f"forge/lesson_precision/{level}": precision(found) for level, found in by_level.items()})
    return _measured(out)


def library_precision(entries: Mapping[int, ExperienceEntry]) -> dict[str, float]:
    """``forge/library_precision``: the right share of the checkable entries of ``entries``."""
    return _measured({"forge/library_precision": precision(verdict(e.advice) for e in entries.values())})


def lesson_quality_stats(steps: Sequence[StepRecord], entries: Mapping[int, ExperienceEntry]) -> dict[str, float]:
    """Every metric of the module docstring, for ``steps`` shown lessons from ``entries``."""
    return {**injected_lesson_stats(steps, entries), **library_precision(entries)}
