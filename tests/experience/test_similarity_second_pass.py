"""The near-duplicate search's second pass (similarity.py step 5): what it adds to the LSH first pass, checked
against an exact linear scan written here, on template-heavy ALFWorld-like text where borderline matches share
few bands with the query; and its reading and ranking rule against a naive model of it."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from rapidfuzz import fuzz, process

from recipe.forge.experience import synthetic
from recipe.forge.experience.similarity import LSHParams, MinHasher, NearDuplicateIndex, length_bounds

THRESHOLD = 0.85


def exact_hits(corpus: list[str], query: str, threshold: float) -> set[int]:
    """Naive reference: every stored string with InDel similarity >= threshold."""
    return {i for i, text in enumerate(corpus) if fuzz.ratio(query, text) >= threshold * 100 - 1e-9}


def distinct_observations(count: int, seed: int) -> tuple[list[str], random.Random]:
    rng = random.Random(seed)
    corpus, seen = [], set()
    while len(corpus) < count:
        text = synthetic.observation(rng)
        if text not in seen:
            seen.add(text)
            corpus.append(text)
    return corpus, rng


@pytest.fixture(scope="module")
def corpus_and_queries():
    corpus, rng = distinct_observations(1500, seed=5)
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


def test_a_small_confirmation_budget_goes_to_the_likeliest_candidates():
    """6,000 strings, 64 confirmations: the candidates ranked by signature agreement (plain and positional
    q-grams) hold a match for 99% of the queries that have one (ranked by the count of shared bands: 94%)."""
    corpus, rng = distinct_observations(6000, seed=5)
    queries = [synthetic.observation(rng) for _ in range(400)]
    index = build(corpus, replace(LSHParams(), rescue_candidates=64))
    scores = process.cdist(queries, corpus, scorer=fuzz.ratio)  # the linear scan, (queries, corpus)
    matched = found = first = 0
    for query, row in zip(queries, scores):
        truth = set(np.flatnonzero(row >= THRESHOLD * 100 - 1e-9).tolist())
        hits = {i for i, _ in index.search(query, THRESHOLD)}
        assert hits <= truth
        matched += bool(truth)
        found += bool(hits)
        first += bool(truth & set(index.candidates(query, THRESHOLD)))  # what the first pass confirms
    assert matched >= 150 and first / matched < 0.95  # borderline matches the first pass misses
    assert found / matched >= 0.99


def reads_per_id(query_keys: np.ndarray, stored_keys: list[np.ndarray], bands: int, bound: int,
                 fine: bool) -> set[int]:
    """Naive reference of one family's reading rule: per band, the ids whose coarse key (column b) equals the
    query's, or, when more than ``bound`` do, the newest ``bound`` of those whose fine key (column bands + b)
    does (with ``fine``), else the newest ``bound`` of the coarse ones; ``stored_keys[i]`` holds id i's keys
    (ids are insertion order)."""
    read: set[int] = set()
    for b in range(bands):
        members = [i for i, keys in enumerate(stored_keys) if keys[b] == query_keys[b]]
        if len(members) > bound and fine:
            members = [i for i, keys in enumerate(stored_keys) if keys[bands + b] == query_keys[bands + b]]
        read.update(members[-bound:])
    return read


def test_wide_candidates_follow_the_reading_rule_the_length_bounds_the_ranking_and_the_bound(corpus_and_queries):
    corpus, queries = corpus_and_queries
    params = replace(LSHParams(), rescue_bucket_cap=40, rescue_candidates=64)
    index = build(corpus, params)
    hasher, split = MinHasher(params), params.bands * params.rows  # the index's hasher: the same for the same params
    signatures = [hasher.signature(text) for text in corpus]
    plain = [hasher.plain_keys(s[:split]) for s in signatures]
    positional = [hasher.positional_keys(s[split:]) for s in signatures]
    for query in queries[:40]:
        sig = hasher.signature(query)
        read = reads_per_id(hasher.plain_keys(sig[:split]), plain, params.bands, 40, fine=True)
        read |= reads_per_id(hasher.positional_keys(sig[split:]), positional, params.rescue_bands, 40, fine=False)
        low, high = length_bounds(len(query), THRESHOLD)
        excluded = set(index.candidates(query, THRESHOLD))
        eligible = [i for i in read if low <= len(corpus[i]) <= high and i not in excluded]
        agreement = {i: int(np.sum(signatures[i].astype(np.uint8) == sig.astype(np.uint8))) for i in eligible}
        expected = sorted(eligible, key=lambda i: (-agreement[i], i))[:64]
        assert index.wide_candidates(query, THRESHOLD, exclude=excluded) == expected


def test_search_answers_alike_after_a_rebuild_in_the_same_order(corpus_and_queries):
    corpus, queries = corpus_and_queries
    a, b = build(corpus, LSHParams()), build(corpus, LSHParams())
    for query in queries[:50]:
        assert a.search(query, THRESHOLD) == b.search(query, THRESHOLD)
        assert a.wide_candidates(query, THRESHOLD) == b.wide_candidates(query, THRESHOLD)
