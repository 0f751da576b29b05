"""The similarity metric and the sub-linear near-duplicate search."""

import difflib
import os
import random
import subprocess
import sys
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recipe.forge.experience import similarity, synthetic
from recipe.forge.experience.similarity import (
    LSHParams, MinHasher, NearDuplicateIndex, length_bounds, sequence_similarity,
)


def lcs_length(a: str, b: str) -> int:
    """Textbook O(|a||b|) dynamic programme, the independent reference for the metric."""
    prev = [0] * (len(b) + 1)
    for ca in a:
        cur = [0]
        for j, cb in enumerate(b):
            cur.append(prev[j] + 1 if ca == cb else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="abc 12", max_size=25), st.text(alphabet="abc 12", max_size=25))
def test_similarity_is_twice_lcs_over_total_length(a, b):
    expected = 1.0 if not a and not b else 2 * lcs_length(a, b) / (len(a) + len(b))
    assert sequence_similarity(a, b) == pytest.approx(expected, abs=1e-9)
    assert sequence_similarity(a, b) >= difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() - 1e-9


def test_hand_worked_similarity():
    # "drawer 3" vs "drawer 4": LCS 7 of 8+8 characters -> 14/16
    assert sequence_similarity("drawer 3", "drawer 4") == pytest.approx(14 / 16)
    assert sequence_similarity("abc", "") == 0.0


def edited(text: str, rng: random.Random, edits: int) -> str:
    """``text`` after ``edits`` random single-character insertions or deletions."""
    chars = list(text)
    for _ in range(edits):
        if chars and rng.random() < 0.5:
            del chars[rng.randrange(len(chars))]
        else:
            chars.insert(rng.randrange(len(chars) + 1), rng.choice("ab"))
    return "".join(chars)


def test_length_bounds_are_necessary():
    rng = random.Random(0)
    similar = 0
    for _ in range(300):
        a = "".join(rng.choice("ab") for _ in range(rng.randint(1, 30)))
        b = edited(a, rng, rng.randint(0, 6))  # near and far pairs, lengths on both sides of the bounds
        if sequence_similarity(a, b) >= 0.85:
            similar += 1
            low, high = length_bounds(len(a), 0.85)
            assert low <= len(b) <= high
    assert similar >= 100  # the bounds were checked on many pairs that reach the threshold


def test_length_bounds_are_tight():
    # |a| = 17 at 0.85: m >= 17 * 0.85 / 1.15 = 12.57 and m <= 17 * 1.15 / 0.85 = 23; "a" * m shares min(17, m).
    assert length_bounds(17, 0.85) == pytest.approx((17 * 0.85 / 1.15, 23.0))
    assert sequence_similarity("a" * 17, "a" * 13) >= 0.85 > sequence_similarity("a" * 17, "a" * 12)
    assert sequence_similarity("a" * 17, "a" * 22) >= 0.85 > sequence_similarity("a" * 17, "a" * 24)


def test_search_is_exactly_confirmed_and_finds_near_duplicates():
    corpus = list(dict.fromkeys(synthetic.corpus(3000, seed=1)))
    index = NearDuplicateIndex()
    for i, text in enumerate(corpus):
        index.add(i, text)
    rng = random.Random(5)
    queries = [synthetic.perturb(t, rng, 2) for t in rng.sample(corpus, 150)] + synthetic.corpus(150, seed=9)
    found = total = 0
    for q in queries:
        exact = {i for i, t in enumerate(corpus) if sequence_similarity(q, t) >= 0.85}
        hits = index.search(q, 0.85)
        assert {i for i, _ in hits} <= exact  # never a false match
        assert all(s == pytest.approx(sequence_similarity(q, corpus[i])) for i, s in hits)
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
        total += bool(exact)
        found += bool(exact) and bool(hits)
    assert total > 100
    assert found / total >= 0.95  # recall of "some match exists" on realistic text


def test_exact_only_and_remove():
    index = NearDuplicateIndex(exact_only=True)
    index.add(1, "Nothing happens.")
    index.add(2, "Nothing happens!")
    assert index.best("Nothing happens.", 0.5) == (1, 1.0)
    assert index.search("Nothing happens?", 0.5) == []
    index.remove(1)
    assert index.best("Nothing happens.", 0.5) is None and len(index) == 1
    with pytest.raises(KeyError):
        index.add(2, "again")


def test_remove_restores_search_state():
    index = NearDuplicateIndex()
    texts = synthetic.corpus(200, seed=3)
    for i, t in enumerate(texts):
        index.add(i, t)
    for i in range(0, 200, 2):
        index.remove(i)
    for i, t in enumerate(texts):
        hit = index.best(t, 0.999)
        if i % 2:
            assert hit is not None and hit[1] == 1.0
        elif hit is not None:
            assert hit[0] % 2 == 1


def test_bucket_keys_do_not_depend_on_the_process():
    code = ("from recipe.forge.experience.similarity import MinHasher, LSHParams; h = MinHasher(LSHParams());"
            "print(h.all_keys(h.signature('You arrive at drawer 3. The drawer 3 is closed.')).tolist())")
    outs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.add(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                check=True).stdout)
    hasher = MinHasher(LSHParams())
    assert outs == {str(hasher.all_keys(hasher.signature("You arrive at drawer 3. The drawer 3 is closed.")).tolist())
                    + "\n"}


def test_bad_params_and_ids_rejected():
    with pytest.raises(ValueError, match="qgram"):
        MinHasher(LSHParams(qgram=5))
    for bad in (LSHParams(bucket_cap=0), LSHParams(rescue_bucket_cap=0), LSHParams(rescue_candidates=-1)):
        with pytest.raises(ValueError, match="counts"):
            MinHasher(bad)
    with pytest.raises(ValueError, match="at most 256"):
        MinHasher(LSHParams(bands=100, rescue_bands=100))
    with pytest.raises(ValueError, match=">= 0"):
        NearDuplicateIndex().add(-1, "a text")


TEMPLATE = "You arrive at drawer 1. On the drawer 1, you see a mug 1, and a pen 2."
POOL = [synthetic.perturb(TEMPLATE, random.Random(i), 2) for i in range(40)] + synthetic.corpus(40, seed=8)
SMALL = LSHParams(bucket_cap=2, rescue_bucket_cap=3, rescue_candidates=4)  # buckets overflow at once


def first_pass_reference(live: list[tuple[int, str]], query: str, params: LSHParams, threshold: float) -> list[int]:
    """Naive model of ``candidates``: per band in order, the ids sharing the query's coarse key, or, when more
    than ``bucket_cap`` do, the newest ``bucket_cap`` sharing its fine key, each band's newest first; ranked by the
    number of bands an id was read in (ties: first met), within the length bounds, at most ``max_candidates``,
    after the exact copies. ``live``: (id, text) in insertion order."""
    hasher, bands, cap = MinHasher(params), params.bands, params.bucket_cap
    keys = [hasher.plain_keys(hasher.plain(text)) for _, text in live]
    want = hasher.plain_keys(hasher.plain(query))
    met: list[int] = []
    for b in range(bands):
        members = [i for i, k in enumerate(keys) if k[b] == want[b]]
        if len(members) > cap:
            members = [i for i, k in enumerate(keys) if k[bands + b] == want[bands + b]][-cap:]
        met += [live[i][0] for i in reversed(members)]
    counts: dict[int, int] = {}
    for item in met:
        counts[item] = counts.get(item, 0) + 1
    low, high = length_bounds(len(query), threshold)
    length = dict(live)
    ranked = [i for i in sorted(counts, key=lambda i: -counts[i]) if low <= len(length[i]) <= high]
    return [i for i, text in live if text == query] + ranked[: params.max_candidates]


def replay(operations: list[tuple[bool, int]]) -> tuple[NearDuplicateIndex, list[tuple[int, str]]]:
    """An index after ``operations`` ((add?, pick): add POOL[pick] under a new id, or remove the live id at
    position pick), and the live (id, text) pairs in insertion order."""
    index, live = NearDuplicateIndex(SMALL), []
    for step, (add, pick) in enumerate(operations):
        if add or not live:
            index.add(step, POOL[pick % len(POOL)])
            live.append((step, POOL[pick % len(POOL)]))
        else:
            index.remove(live.pop(pick % len(live))[0])
    return index, live


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 10**6)), min_size=1, max_size=80))
def test_any_history_answers_like_the_naive_model_and_a_fresh_build(operations):
    """Adds, removals, merges of the pending keys and compactions (made frequent here) leave answers that depend
    only on the live strings and their order: equal to a naive model of the first pass, and to an index that
    adds the survivors afresh (what a checkpoint rebuild does) or is restored from a blob, in both passes."""
    with mock.patch.object(similarity, "_MIN_MERGE", 3):
        index, live = replay(operations)
        fresh = NearDuplicateIndex(SMALL)
        for item, text in live:
            fresh.add(item, text)
    restored = NearDuplicateIndex.from_blob(index.to_blob())
    assert sorted(index.ids()) == sorted(i for i, _ in live) and len(index) == len(live)
    for probe in POOL[::5] + [synthetic.perturb(t, random.Random(7), 1) for t in POOL[::9]]:
        assert index.candidates(probe, 0.85) == first_pass_reference(live, probe, SMALL, 0.85)
        for other in (fresh, restored):
            assert other.candidates(probe, 0.85) == index.candidates(probe, 0.85)
            assert other.wide_candidates(probe, 0.85) == index.wide_candidates(probe, 0.85)
            assert other.search(probe, 0.85) == index.search(probe, 0.85)


def test_tables_depend_only_on_the_current_contents():
    """A long history (coarse buckets crossing the cap both ways, merges, compactions) answers like the
    survivors added afresh in their order, in both passes."""
    rng = random.Random(0)
    index, alive = NearDuplicateIndex(SMALL), []
    for step in range(800):  # about 440 additions and 360 removals: compactions
        if alive and rng.random() < 0.45:
            index.remove(alive.pop(rng.randrange(len(alive))))
        else:
            index.add(step, POOL[rng.randrange(len(POOL))])
            alive.append(step)
    fresh = NearDuplicateIndex(SMALL)
    for item in sorted(alive):
        fresh.add(item, index.text(item))
    assert sorted(index.ids()) == sorted(alive) and len(index) == len(alive)
    probes = POOL + [synthetic.perturb(t, random.Random(7), 1) for t in POOL]
    for probe in probes:  # candidates are what the tables hold for a text's buckets
        assert index.candidates(probe) == fresh.candidates(probe)
        assert index.wide_candidates(probe, 0.85) == fresh.wide_candidates(probe, 0.85)
        assert index.search(probe, 0.85) == fresh.search(probe, 0.85)
    assert sum(bool(index.candidates(probe)) for probe in probes) > len(probes) // 2


def test_a_text_with_a_lone_surrogate_is_stored_and_found():
    """An observation may carry a lone surrogate (an environment's raw text); the index hashes it as any string."""
    index = NearDuplicateIndex()
    stored = "You are in the kitchen \ud800 and see a drawer 3 and a cabinet 1."
    index.add(7, stored)
    query = stored.replace("drawer 3", "drawer 4")
    assert index.search(query, 0.9) == [(7, pytest.approx(sequence_similarity(query, stored)))]
    assert index.best(stored, 1.0) == (7, 1.0)
