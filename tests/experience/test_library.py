"""ExperienceLibrary: admission, novelty merge, pruning, links; hypothesis properties."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recipe.forge.experience.library import GOLDEN, LEVELS, WARNING, Candidate, ExperienceLibrary


def cand(text, score, level="method", zone=GOLDEN, clusters=(), support=1):
    return Candidate(text=text, zone=zone, level=level, score=score, task="t", key="k",
                     cluster_ids=list(clusters), support=support)


def test_score_based_admission_into_a_full_level():
    lib = ExperienceLibrary(golden_capacity=2, warning_capacity=1, novelty_threshold=0.85)
    assert lib.admit(cand("open the fridge before taking the apple", 1.0), 0)[0] == "added"
    assert lib.admit(cand("heat the mug in the microwave then place it", 3.0), 0)[0] == "added"
    # full: a lower score, or an equal one that is no newer, is rejected; a higher one replaces the lowest (1.0)
    assert lib.admit(cand("clean the plate at the sinkbasin first", 0.5), 1) == ("rejected", None)
    assert lib.admit(cand("clean the plate at the sinkbasin first", 1.0), 0) == ("rejected", None)
    outcome, new_id = lib.admit(cand("go to the desk and use the desklamp", 2.0), 1)
    assert outcome == "added"
    assert sorted(e.score for e in lib.level_entries(GOLDEN, "method")) == [2.0, 3.0]
    # other levels and the other zone have their own capacity
    assert lib.admit(cand("a principle", 0.1, level="principle"), 1)[0] == "added"
    assert lib.admit(cand("never repeat look", 5.0, zone=WARNING, level="pattern"), 1)[0] == "added"
    assert lib.admit(cand("avoid invalid actions", 4.0, zone=WARNING, level="pattern"), 1)[0] == "rejected"


def test_a_full_level_of_equal_scores_admits_new_evidence_by_support_then_recency():
    """Binary rewards: every golden entry scores 10. Comparing scores alone froze a full level for good."""
    lib = ExperienceLibrary(golden_capacity=2, warning_capacity=1, novelty_threshold=0.85)
    _, seen_often = lib.admit(cand("at target 3 from 2 answer plus", 10.0, support=36), 0)
    _, seen_once = lib.admit(cand("open the fridge before taking the apple", 10.0), 0)
    # same score and support, but newer evidence: it replaces the older single-support entry
    outcome, newer = lib.admit(cand("a rare success: going left reached the goal", 10.0), 3)
    assert outcome == "added" and seen_once not in lib.entries and seen_often in lib.entries
    # same score, support and iteration as the lowest entry: nothing to prefer, the level stays as it is
    assert lib.admit(cand("heat the mug in the microwave then place it", 10.0), 3) == ("rejected", None)
    # more support ranks before recency
    assert lib.admit(cand("take the mug to the coffeemachine", 10.0, support=2), 3)[0] == "added"
    assert newer not in lib.entries
    assert lib.admit(cand("clean the plate at the sinkbasin first", 10.0), 9) == ("rejected", None)
    assert lib.admit(cand("clean the plate at the sinkbasin first", 10.0, support=2), 9)[0] == "added"
    assert seen_often in lib.entries and len(lib) == 2


def test_novelty_merge_keeps_max_score_and_adds_support():
    lib = ExperienceLibrary(golden_capacity=5, warning_capacity=5, novelty_threshold=0.85)
    _, eid = lib.admit(cand("take the apple 1 from countertop 1", 5.0, clusters=[1], support=2), 0)
    outcome, same = lib.admit(cand("take the apple 2 from countertop 1", 3.0, clusters=[2]), 4)
    assert (outcome, same) == ("merged", eid)
    entry = lib.entries[eid]
    assert (entry.score, entry.support, entry.cluster_ids, entry.updated_iter) == (5.0, 3, [1, 2], 4)
    lib.admit(cand("take the apple 3 from countertop 1", 9.0), 5)
    assert entry.score == 9.0 and len(lib) == 1
    # the same text in another level or zone is not a duplicate
    assert lib.admit(cand("take the apple 1 from countertop 1", 1.0, level="example"), 5)[0] == "added"
    assert lib.by_cluster == {1: {eid}, 2: {eid}}


def test_prune_order_score_then_support_then_recency():
    lib = ExperienceLibrary(golden_capacity=10, warning_capacity=10, novelty_threshold=0.99)
    specs = [("low score", 1.0, 9, 9), ("high score", 5.0, 1, 0), ("more support", 2.0, 3, 0),
             ("less support newer", 2.0, 1, 8), ("less support older", 2.0, 1, 2)]
    for text, score, support, it in specs:
        assert lib.admit(cand(text, score, support=support), it)[0] == "added"
    lib.capacity[GOLDEN] = 3
    assert lib.prune() == 2
    kept = {e.text for e in lib.all_entries()}
    assert kept == {"high score", "more support", "less support newer"}


def test_links_follow_removal_and_cluster_eviction():
    lib = ExperienceLibrary(golden_capacity=1, warning_capacity=1)
    _, a = lib.admit(cand("first strategy text here", 1.0, clusters=[7, 8]), 0)
    lib.unlink_cluster(7)
    assert lib.entries[a].cluster_ids == [8] and 7 not in lib.by_cluster
    lib.admit(cand("completely different better one", 2.0, clusters=[8]), 1)
    assert a not in lib.entries and len(lib.by_cluster[8]) == 1


def test_zero_capacity_admits_nothing_and_bad_candidates_are_named():
    lib = ExperienceLibrary(golden_capacity=0, warning_capacity=1)
    assert lib.admit(cand("anything", 100.0), 0) == ("rejected", None)
    with pytest.raises(ValueError, match="level='mistake'"):
        cand("x", 1.0, level="mistake", zone=GOLDEN)
    with pytest.raises(ValueError, match="empty"):
        cand("   ", 1.0)
    with pytest.raises(ValueError, match="capacities"):
        ExperienceLibrary(golden_capacity=-1)


WORDS = ["apple", "fridge", "mug", "heat", "clean", "drawer", "open", "take", "put", "look"]
candidates = st.builds(
    lambda words, score, zone, lvl: cand(" ".join(words), score, level=LEVELS[zone][lvl], zone=zone),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=6),
    st.floats(-10, 10, allow_nan=False),
    st.sampled_from([GOLDEN, WARNING]),
    st.integers(0, 2),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(candidates, max_size=40), st.integers(0, 3), st.integers(0, 3))
def test_properties_capacity_and_monotone_merged_scores(stream, gcap, wcap):
    lib = ExperienceLibrary(golden_capacity=gcap, warning_capacity=wcap, novelty_threshold=0.85)
    for it, c in enumerate(stream):
        before = {i: e.score for i, e in lib.entries.items()}
        outcome, eid = lib.admit(c, it)
        for (zone, level), ids in lib.levels.items():
            assert len(ids) <= lib.capacity[zone]
        if outcome == "merged":
            assert lib.entries[eid].score == max(before[eid], c.score) >= before[eid]
        for i, s in before.items():  # no surviving entry's score ever drops
            if i in lib.entries:
                assert lib.entries[i].score >= s
        level_keys = [lib.entries[i].rank_key()[:3] for i in lib.levels[(c.zone, c.level)]]
        new_key = (c.score, c.support, it)
        if outcome == "rejected" and lib.capacity[c.zone] > 0:
            # rejected only by a full level none of whose entries ranks below the candidate
            assert len(level_keys) == lib.capacity[c.zone] and new_key <= min(level_keys)
        if outcome == "added":
            # an entry it pushed out ranked below it: (score, support, recency)
            gone = [before[i] for i in before if i not in lib.entries]
            assert len(gone) <= 1
            if gone:
                assert c.score >= gone[0]
