"""ObservationIndex: joining, founding, ties, eviction, exact mode, state round trip."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recipe.forge.core_forge import factorize
from recipe.forge.experience import synthetic
from recipe.forge.experience.index import ObservationIndex
from recipe.forge.experience.similarity import sequence_similarity

A = "You arrive at drawer 3. The drawer 3 is closed."
A2 = "You arrive at drawer 4. The drawer 4 is closed."  # sim 0.958 with A
B = "You pick up the apple 1 from the countertop 1."


def test_join_and_found_by_threshold():
    index = ObservationIndex(threshold=0.85)
    assert sequence_similarity(A, A2) >= 0.85 > sequence_similarity(A, B)
    assert index.assign_batch([A, A2, B, A], iteration=0) == [0, 0, 1, 0]
    assert index.clusters[0].uses == 3 and index.clusters[0].prototype == A
    strict = ObservationIndex(threshold=0.99)
    assert strict.assign_batch([A, A2, B, A], iteration=0) == [0, 1, 2, 0]


def test_joins_most_similar_and_ties_go_to_the_older_cluster():
    query = "You arrive at countertop 2. On it you see a mug 1, a pan 3."
    p0 = query.replace("countertop 2", "countertop 7")  # one substitution: sim = 1 - 2 / (2 * len)
    p1 = query.replace("pan 3", "pan 8")
    threshold = 0.97
    assert sequence_similarity(p0, p1) < threshold <= sequence_similarity(query, p0) == sequence_similarity(query, p1)
    for first, second in ((p0, p1), (p1, p0)):
        index = ObservationIndex(threshold=threshold)
        assert index.assign_batch([first, second], 0) == [0, 1]
        assert index.assign(query, 0) == 0
    closer = ObservationIndex(threshold=0.9)
    closer.assign("You arrive at drawer 1. The drawer 1 is closed and empty today.", 0)
    closer.assign("You arrive at safe 5. The safe 5 is closed.", 0)
    assert closer.assign("You arrive at safe 5. The safe 5 is closed!", 0) == 1


def test_an_observation_keeps_its_cluster_for_the_rest_of_the_iteration():
    """o joins p's cluster; a prototype more similar to o founds a cluster; o's later visits in the same iteration
    stay in p's cluster (one state, one step group), and from the next iteration on o joins the closer one."""
    o = "You arrive at countertop 2. On it you see a mug 1, a pan 3."
    p = o.replace("you see a mug 1", "you see the mug 4")
    closer = o.replace("pan 3", "pan 8")
    index = ObservationIndex(threshold=0.94)
    assert 0.94 <= sequence_similarity(o, p) < sequence_similarity(o, closer)
    assert sequence_similarity(p, closer) < 0.94
    assert index.assign_batch([p, o, closer, o, o], iteration=3) == [0, 0, 1, 0, 0]
    assert index.assign(o, 4) == 1
    assert index.assign(o, 4) == 1


def test_matches_a_greedy_linear_reference_on_realistic_text():
    obs = synthetic.corpus(400, seed=11)
    index = ObservationIndex(threshold=0.85)
    got = index.assign_batch(obs, 0)
    prototypes: list[str] = []
    agree = 0
    for o, g in zip(obs, got):
        scores = [sequence_similarity(o, p) for p in prototypes]
        best = int(np.argmax(scores)) if scores else -1
        want = best if scores and scores[best] >= 0.85 else len(prototypes)
        if want == len(prototypes):
            prototypes.append(o)
        agree += index.prototype(g) == prototypes[want]
    assert agree / len(obs) >= 0.97  # the LSH prefilter may miss a rare match; confirmed matches are exact


def test_eviction_removes_least_used_and_never_reuses_ids():
    index = ObservationIndex(threshold=0.99, max_clusters=3)
    evicted = []
    index.on_evict.append(evicted.append)
    index.assign("alpha alpha alpha", 0)
    index.assign("alpha alpha alpha", 0)  # cluster 0 used twice
    index.assign("beta beta beta", 1)  # cluster 1 used once at iteration 1
    index.assign("gamma gamma gamma", 0)  # cluster 2 used once at iteration 0 (least recently)
    new = index.assign("delta delta delta", 2)  # over the cap: evict cluster 2
    assert new == 3 and evicted == [2] and sorted(index.cluster_ids()) == [0, 1, 3]
    assert index.assign("gamma gamma gamma", 2) == 4  # a fresh id, the old one stays retired
    assert len(index) == 3 and index.evicted == 2


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["a b c", "a b d", "x y z", "x y w", "q r s", "t u v", "m n o"]), max_size=40),
       st.integers(1, 4))
def test_cluster_count_never_exceeds_cap(observations, cap):
    index = ObservationIndex(threshold=0.9, max_clusters=cap)
    ids = index.assign_batch(observations, 0)
    assert len(index) <= cap
    assert all(i in index for i in ids[-1:])  # the cluster just used is never the one evicted


def test_exact_mode_is_gigpo_grouping():
    obs = synthetic.corpus(300, seed=2)
    obs += obs[:100]
    index = ObservationIndex(threshold=0.85, exact=True)
    ids = index.assign_batch(obs, 0)
    codes, _ = factorize(obs)
    assert np.array_equal(factorize(ids)[0], codes)


def test_state_round_trip_continues_identically():
    obs = synthetic.corpus(300, seed=4)
    a = ObservationIndex(threshold=0.85, max_clusters=120)
    a.assign_batch(obs[:200], 0)
    b = ObservationIndex.from_state(a.state_dict())
    assert b.state_dict() == a.state_dict()
    assert a.assign_batch(obs[200:], 1) == b.assign_batch(obs[200:], 1)
    assert b.state_dict() == a.state_dict()


def test_bad_arguments():
    with pytest.raises(ValueError, match="threshold"):
        ObservationIndex(threshold=1.5)
    with pytest.raises(ValueError, match="max_clusters"):
        ObservationIndex(max_clusters=0)
