"""The near-duplicate search's second pass (similarity.py step 5): what it adds to the LSH first pass, checked
against an exact linear scan written here, on template-heavy ALFWorld-like text where borderline matches share
few bands with the query."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from rapidfuzz import fuzz

from recipe.forge.experience import synthetic
from recipe.forge.experience.similarity import LSHParams, NearDuplicateIndex, length_bounds

THRESHOLD = 0.85


def exact_hits(corpus: list[str], query: str, threshold: float) -> set[int]:
    """Naive reference: every stored string with InDel similarity >= threshold."""
    return {i for i, text in enumerate(corpus) if fuzz.ratio(query, text) >= threshold * 100 - 1e-9}


@pytest.fixture(scope="module")
def corpus_and_queries():
    rng = random.Random(5)
    corpus, seen = [], set()
    while len(corpus) < 1500:
        text = synthetic.observation(rng)
        if text not in seen:
            seen.add(text)
            corpus.append(text)
    queries = [synthetic.observation(rng) for _ in range(300)]
    return corpus, queries


def build(corpus: list[str], params: LSHParams) -> NearDuplicateIndex:
    index = NearDuplicateIndex(params)
    for i, text in enumerate(corpus):
        index.add(i, text)
    return index


def test_second_pass_finds_borderline_matches_the_first_pass_misses_and_never_a_false_one(corpus_and_queries):
    corpus, queries = corpus_and_queries
    with_second = build(corpus, LSHParams())
    first_only = build(corpus, replace(LSHParams(), rescue_candidates=0))
    recalled = {"both": 0, "first": 0}
    matched = 0
    for query in queries:
        truth = exact_hits(corpus, query, THRESHOLD)
        full = {i for i, _ in with_second.search(query, THRESHOLD)}
        first = {i for i, _ in first_only.search(query, THRESHOLD)}
        assert full <= truth and first <= truth  # every hit is confirmed exactly
        if first:
            assert full == first  # the second pass runs only when the first finds nothing
        if truth:
            matched += 1
            recalled["both"] += bool(full)
            recalled["first"] += bool(first)
    assert matched >= 100  # the corpus is template-heavy: many borderline matches
    assert recalled["first"] < matched  # the case exercises the second pass
    assert recalled["both"] > recalled["first"]
    assert recalled["both"] / matched >= 0.99


def reads_per_id(query_keys: list[int], stored_keys: dict[int, list[int]], bound: int) -> dict[int, int]:
    """Naive reference of the second pass's reading rule: per band, the ids sharing the query's coarse key, or,
    when more than ``bound`` do, the newest ``bound`` of those also sharing the next band's key (the fine
    bucket); returns how many bands each id was read in."""
    bands = len(query_keys)
    reads: dict[int, int] = {}
    for b in range(bands):
        members = [i for i, keys in stored_keys.items() if keys[b] == query_keys[b]]
        if len(members) > bound:
            nxt = (b + 1) % bands
            members = [i for i in members if stored_keys[i][nxt] == query_keys[nxt]][-bound:]
        for i in members:
            reads[i] = reads.get(i, 0) + 1
    return reads


def test_wide_candidates_follow_the_reading_rule_the_length_bounds_and_the_bound(corpus_and_queries):
    corpus, queries = corpus_and_queries
    bound = 64
    index = build(corpus, replace(LSHParams(), rescue_candidates=bound))
    stored = {i: index._hasher.band_keys(text)[0] for i, text in enumerate(corpus)}
    for query in queries[:40]:
        low, high = length_bounds(len(query), THRESHOLD)
        reads = reads_per_id(index._hasher.band_keys(query)[0], stored, bound)
        eligible = sorted((-n, i) for i, n in reads.items() if low <= len(corpus[i]) <= high)
        assert index.wide_candidates(query, THRESHOLD) == [i for _, i in eligible[:bound]]


def test_search_answers_alike_after_a_rebuild_in_the_same_order(corpus_and_queries):
    corpus, queries = corpus_and_queries
    a, b = build(corpus, LSHParams()), build(corpus, LSHParams())
    for query in queries[:50]:
        assert a.search(query, THRESHOLD) == b.search(query, THRESHOLD)
        assert np.array_equal(a.wide_candidates(query, THRESHOLD), b.wide_candidates(query, THRESHOLD))
