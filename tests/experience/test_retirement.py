"""Lesson retirement (recipe/forge/experience/retirement.py): a lesson whose showing goes with worse outcomes, or
whose habit the steps keep without it, is not shown; retrieval never returns it; it is saved and checked."""

from __future__ import annotations

import hashlib
import json

import pytest

from agent_system.multi_turn_rollout.protocols import StepQuery
from recipe.forge.experience import ExperienceSystem
from recipe.forge.experience.extract_rule import RuleExtractor
from recipe.forge.experience.library import GOLDEN, WARNING, Candidate, ExperienceLibrary
from recipe.forge.experience.retirement import HABIT_KEPT, HARM, harmful, retire_lessons
from recipe.forge.experience.retrieval import Retriever
from recipe.forge.experience.store import FILENAME, CheckpointError, _canonical
from tests.experience.conftest import make_traj

STATE = "Target: 2\nCurrent: 0"


def entry_with(shown: tuple[int, int], unshown: tuple[int, int]):
    library = ExperienceLibrary(10, 10, 0.99)
    entry_id = library.insert_unchecked([Candidate("a lesson", GOLDEN, "principle", 1.0)], 0)[0]
    entry = library.entries[entry_id]
    entry.shown_successes, entry.shown_episodes = shown
    entry.unshown_successes, entry.unshown_episodes = unshown
    return entry


@pytest.mark.parametrize("shown, unshown, expected", [
    ((2, 10), (8, 10), True),    # 0.2 vs 0.8: pooled 0.5, se sqrt(0.25 * 0.2) = 0.224; 0.6 > 0.447
    ((4, 10), (6, 10), False),   # 0.2 < 0.447
    ((0, 8), (4, 8), True),      # pooled 0.25, se sqrt(0.1875 * 0.25) = 0.217; 0.5 > 0.433
    ((1, 4), (8, 8), False),     # too few shown episodes to judge
    ((8, 10), (2, 10), False),   # better where shown
    ((0, 10), (0, 10), False),   # no difference (se 0)
])
def test_harm_is_a_worse_shown_rate_by_more_than_two_standard_errors(shown, unshown, expected):
    assert harmful(entry_with(shown, unshown), min_episodes=8) is expected


def steps_at(cluster: int, valid: list[bool], uid: str = "u"):
    return make_traj(uid, f"{uid}-0", "move", [(STATE, "+" if v else "?") for v in valid], 0.0,
                     clusters=[cluster] * len(valid), valid=valid)


def test_a_habit_lesson_is_not_shown_while_its_clusters_keep_the_habit_and_again_when_they_break_it():
    library = ExperienceLibrary(10, 10, 0.99)
    habit = library.insert_unchecked([Candidate("Answer with one of <action>+</action>, <action>-</action>.", WARNING,
                                                "mistake", 1.0, key=STATE, cluster_ids=[3], habit="valid_answer")], 0)[0]
    plain = library.insert_unchecked([Candidate("Keep going.", GOLDEN, "principle", 1.0, key=STATE,
                                                cluster_ids=[3])], 0)[0]
    retriever = Retriever(library, top_k_golden=2, top_k_warning=2)
    assert [e.entry_id for e in retriever.retrieve(STATE, "move", 3).entries] == [plain, habit]
    metrics = retire_lessons(library, [steps_at(3, [True] * 9 + [False])], min_episodes=8, habit_kept_rate=0.9)
    assert library.entries[habit].retired == HABIT_KEPT and library.entries[plain].retired is None
    assert metrics == {"forge/lessons_retired/harm": 0.0, "forge/lessons_retired/habit_kept": 1.0}
    assert [e.entry_id for e in retriever.retrieve(STATE, "move", 3).entries] == [plain]
    assert [e.entry_id for e in retriever.retrieve(STATE, "move", None).entries] == [plain]  # the fallback too
    retire_lessons(library, [steps_at(7, [False] * 4)], min_episodes=8, habit_kept_rate=0.9)  # not visited: kept
    assert library.entries[habit].retired == HABIT_KEPT
    retire_lessons(library, [steps_at(3, [True, False, False, True])], min_episodes=8, habit_kept_rate=0.9)
    assert library.entries[habit].retired is None
    assert [e.entry_id for e in retriever.retrieve(STATE, "move", 3).entries] == [plain, habit]


def test_the_rule_extractor_marks_only_the_invalid_answer_habit():
    failed = make_traj("u", "u-0", "move", [(STATE, "+"), (STATE, "?"), (STATE, "+")], 0.0, clusters=[1, 1, 1],
                       valid=[True, False, True], admissible=("+", "-"))
    clean = make_traj("u", "u-1", "move", [(STATE, "+"), (STATE, "-")], 0.0, clusters=[1, 1], admissible=("+", "-"))
    for style in ("imperative", "descriptive"):
        extractor = RuleExtractor(style)
        habits = {c.level: c.habit for c in extractor.warning(failed, 0.5)}
        assert habits["mistake"] == "valid_answer" and habits["diagnostic"] is None
        assert all(c.habit is None for c in extractor.warning(clean, 0.5))


def test_evolution_retires_and_the_checkpoint_keeps_it(cfg, tmp_path):
    system = ExperienceSystem(cfg(lesson_style="imperative"))
    system.begin_iteration(0)
    [found] = system.provide([StepQuery(STATE, "move", None, "u", "u-0", 0)])
    failed = make_traj("u", "u-0", "move", [(STATE, "?"), (STATE, "+")], 0.0, clusters=[found.cluster_id] * 2,
                       valid=[False, True], admissible=("+", "-"))
    system.evolve([failed], 0)
    [habit] = [e for e in system.library.all_entries() if e.habit == "valid_answer"]
    assert habit.retired is None  # half of the steps at its cluster answered validly
    system.begin_iteration(1)
    valid = make_traj("u", "u-1", "move", [(STATE, "+")] * 4, 0.0, clusters=[found.cluster_id] * 4,
                      admissible=("+", "-"))
    metrics = system.evolve([valid], 1)
    assert habit.retired == HABIT_KEPT and metrics["forge/lessons_retired/habit_kept"] == 1.0
    system.save(tmp_path)
    restored = ExperienceSystem.from_checkpoint(tmp_path, cfg(lesson_style="imperative"))
    assert restored.library.entries[habit.entry_id].retired == HABIT_KEPT
    document = json.loads((tmp_path / FILENAME).read_text())
    document["payload"]["library"]["entries"][0]["retired"] = "because"
    document["sha256"] = hashlib.sha256(_canonical(document["payload"])).hexdigest()  # a well-signed bad value
    (tmp_path / FILENAME).write_text(json.dumps(document))
    with pytest.raises(CheckpointError, match="retired='because' is not one of"):
        ExperienceSystem.from_checkpoint(tmp_path, cfg())
    paper = ExperienceSystem(cfg(lesson_style="imperative", retire_lessons=False))
    paper.begin_iteration(0)
    paper.provide([StepQuery(STATE, "move", None, "u", "u-0", 0)])
    paper.evolve([failed], 0)
    paper.begin_iteration(1)
    assert "forge/lessons_retired/habit_kept" not in paper.evolve([valid], 1)
    assert all(e.retired is None for e in paper.library.all_entries())


def test_harm_retires_any_entry_and_an_entry_no_longer_harmful_is_shown_again():
    entry = entry_with((1, 10), (9, 10))
    library = ExperienceLibrary(10, 10, 0.99)
    library._store(entry)  # noqa: SLF001 - the helper's entry, as the library would hold it
    retire_lessons(library, [], min_episodes=8, habit_kept_rate=0.9)
    assert entry.retired == HARM
    entry.shown_successes, entry.shown_episodes = 9, 10
    retire_lessons(library, [], min_episodes=8, habit_kept_rate=0.9)
    assert entry.retired is None
