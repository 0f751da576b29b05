"""The string similarity SLEA-RL clusters with, and a sub-linear near-duplicate search for it.

Similarity (used for observation clusters, the retrieval fallback and the novelty check without embeddings)::

    sim(a, b) = rapidfuzz.fuzz.ratio(a, b) / 100 = 1 - InDel(a, b) / (|a| + |b|) = 2 * LCS(a, b) / (|a| + |b|)

on the raw strings (case- and whitespace-sensitive, no preprocessing), where InDel is the insertion/deletion
edit distance and LCS the longest common subsequence; two empty strings have similarity 1. This is the
quantity difflib's ``SequenceMatcher.ratio`` (GiGPO's similarity) approximates; difflib's greedy block matching
can only find a shorter common subsequence, so ``sim >= difflib ratio``. It is the same metric as
``recipe.forge.core_forge.similarity_step_groups``.

:class:`NearDuplicateIndex` finds the stored strings with ``sim >= threshold`` without scanning them all:

1. an exact-text hash map (a repeated observation costs one dict lookup);
2. a MinHash LSH prefilter: each string becomes the set of its UTF-8 byte ``q``-grams; ``bands x rows`` MinHash
   values (random affine permutations of the hashed q-gram modulo 2^32, vectorised in numpy) are grouped into
   ``bands`` coarse keys (``rows`` values each) and ``bands`` fine keys (two adjacent bands, ``2 * rows``
   values); strings sharing a key are candidates. Per band, a coarse bucket is read whole while it holds at
   most ``bucket_cap`` strings; beyond that (strings of a common template) the fine bucket is read instead, at
   most its ``bucket_cap`` newest members. Fine entries exist only for members of overflowing coarse buckets.
   This bounds the work per query independently of the index size. Buckets keep their members in insertion
   order, so answers depend only on the current contents and their order, not on the history of removals: an
   index rebuilt from a checkpoint answers exactly like the saved one;
3. a length filter (``sim >= t`` needs ``t / (2 - t) <= |a| / |b| <= (2 - t) / t``), then the
   ``max_candidates`` candidates sharing the most bands with the query (near-duplicates share many);
4. exact confirmation of those candidates with ``sim`` (rapidfuzz, C++);
5. only when that finds nothing: a second pass over every string sharing a coarse band with the query (whole
   buckets, no cap; a bucket larger than ``rescue_candidates`` is replaced by its fine bucket), within the
   length bounds, the ``rescue_candidates`` sharing the most bands (ties: older first), confirmed exactly.
   Near the threshold a true match shares few bands with the query and is outnumbered in its buckets by
   strings of the same template, so steps 2-3 alone miss some; repeated observations, the common case, stop
   at step 4.

Steps 2, 3 and 5 are approximate: a true match can be missed, never a false one reported (every result is
confirmed exactly). ``scripts/bench_library.py`` reports the recall against an exact linear scan.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import chain, islice
from typing import Iterable

import numpy as np
from rapidfuzz import fuzz, process


def sequence_similarity(a: str, b: str) -> float:
    """``rapidfuzz.fuzz.ratio(a, b) / 100``: normalised InDel similarity in [0, 1] (see module docstring)."""
    return fuzz.ratio(a, b, processor=None) / 100.0


def length_bounds(length: int, threshold: float) -> tuple[float, float]:
    """Lengths ``m`` a string must have for ``sim(a, b) >= threshold`` to be possible when ``|a| = length``."""
    if threshold <= 0.0:
        return 0.0, float("inf")
    return length * threshold / (2.0 - threshold), length * (2.0 - threshold) / threshold


@dataclass(frozen=True)
class LSHParams:
    """MinHash LSH shape. Defaults were chosen with ``scripts/bench_library.py`` on ALFWorld/WebShop-like text."""

    qgram: int = 3
    bands: int = 24
    rows: int = 4
    bucket_cap: int = 24
    max_candidates: int = 32
    rescue_candidates: int = 1024  # the second pass's bound (step 5 of the module docstring); 0 = no second pass
    seed: int = 1234


class MinHasher:
    """Band keys of a string: Python ints, identical in every process (no salted ``hash``).

    A q-gram (q <= 4 bytes) is packed into a uint32, mixed by a Knuth multiplicative hash, and permuted by
    ``bands * rows`` random odd-multiplier affine maps modulo 2^32 (bijections, vectorised); the minimum of each
    map over the string's grams is one MinHash value.
    """

    def __init__(self, params: LSHParams):
        if not 1 <= params.qgram <= 4:
            raise ValueError(f"LSHParams.qgram={params.qgram} must be in [1, 4] (grams are packed into 32 bits)")
        self.params = params
        rng = np.random.default_rng(params.seed)
        n = params.bands * params.rows
        self._mul = rng.integers(1, 2**32, size=(n, 1), dtype=np.uint32) | np.uint32(1)
        self._add = rng.integers(0, 2**32, size=(n, 1), dtype=np.uint32)
        self._combine = rng.integers(1, 2**63, size=params.rows, dtype=np.uint64) | np.uint64(1)

    def qgrams(self, text: str) -> np.ndarray:
        """(n_grams,) uint32 codes of the byte q-grams (the q bytes packed into one integer, repeats kept)."""
        q = self.params.qgram
        data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint32)
        if data.size < q:
            data = np.concatenate([data, np.zeros(q - data.size, dtype=np.uint32)])
        n = data.size - q + 1
        codes = data[:n].copy()
        for i in range(1, q):
            codes |= data[i : i + n] << np.uint32(8 * i)
        return codes

    def band_keys(self, text: str) -> tuple[list[int], list[int]]:
        """(coarse, fine) keys, each (bands,): coarse key b hashes band b's ``rows`` MinHash values; fine key b
        hashes bands b and b+1 (2 * rows values), so strings sharing a fine key also share the coarse key."""
        grams = self.qgrams(text)
        grams *= np.uint32(2654435761)
        permuted = np.multiply(self._mul, grams[None, :])  # (bands*rows, n_grams), wraps modulo 2^32
        permuted += self._add
        signature = permuted.min(axis=1).astype(np.uint64).reshape(self.params.bands, self.params.rows)
        coarse = (signature * self._combine).sum(axis=1)  # uint64 arithmetic wraps: a hash of the band
        return coarse.tolist(), self.fine_keys(coarse).tolist()

    @staticmethod
    def fine_keys(coarse: np.ndarray) -> np.ndarray:
        """(bands,) uint64 fine keys from the (bands,) uint64 coarse keys."""
        return coarse * np.uint64(0x9E3779B97F4A7C15) + np.roll(coarse, -1)


def _push(table: dict[int, int | list[int]], key: int, item_id: int) -> int:
    """Append ``item_id`` to the bucket ``key``; returns the bucket's new size."""
    bucket = table.get(key)
    if bucket is None:
        table[key] = item_id
        return 1
    if type(bucket) is int:
        table[key] = [bucket, item_id]
        return 2
    bucket.append(item_id)
    return len(bucket)


def _pull(table: dict[int, int | list[int]], key: int, item_id: int) -> int:
    """Remove ``item_id`` from the bucket ``key``; returns the bucket's new size."""
    bucket = table[key]
    if type(bucket) is int:
        del table[key]
        return 0
    bucket.remove(item_id)
    if len(bucket) == 1:
        table[key] = bucket[0]
    return len(bucket)


def _members(bucket: int | list[int]) -> list[int]:
    return [bucket] if type(bucket) is int else list(bucket)


class NearDuplicateIndex:
    """Integer ids -> strings, searchable for ``sim >= threshold`` in time independent of the number stored."""

    def __init__(self, params: LSHParams | None = None, exact_only: bool = False):
        """``exact_only``: skip the LSH tables (only exact-text lookups are served, e.g. GiGPO's hash grouping)."""
        self.params = params or LSHParams()
        self.exact_only = exact_only
        self._hasher = MinHasher(self.params)
        self._text: dict[int, str] = {}
        self._len: dict[int, int] = {}
        self._exact: dict[str, list[int]] = {}
        self._coarse: dict[int, bytes] = {}  # id -> its coarse keys (bands uint64), to place it in fine tables later
        # per band: key -> member id, or a list of member ids in insertion order once a bucket has several (most
        # buckets hold one string: a bare int keeps them small). Coarse tables first, then fine tables; a string
        # has a fine entry in band b only while its coarse bucket there holds more than bucket_cap strings.
        self._tables: list[dict[int, int | list[int]]] = [{} for _ in range(2 * self.params.bands)]

    def __len__(self) -> int:
        return len(self._text)

    def __contains__(self, item_id: int) -> bool:
        return item_id in self._text

    def text(self, item_id: int) -> str:
        return self._text[item_id]

    def ids(self) -> Iterable[int]:
        return self._text.keys()

    def add(self, item_id: int, text: str) -> None:
        if item_id in self._text:
            raise KeyError(f"id {item_id} is already in the index")
        self._text[item_id] = text
        self._len[item_id] = len(text)
        self._exact.setdefault(text, []).append(item_id)
        if self.exact_only:
            return
        bands, cap = self.params.bands, self.params.bucket_cap
        coarse, fine = self._hasher.band_keys(text)
        self._coarse[item_id] = np.array(coarse, dtype=np.uint64).tobytes()
        for b in range(bands):
            size = _push(self._tables[b], coarse[b], item_id)
            if size == cap + 1:  # the coarse bucket just overflowed: its members get fine entries
                for member in _members(self._tables[b][coarse[b]]):
                    _push(self._tables[bands + b], self._fine_key(member, b), member)
            elif size > cap + 1:
                _push(self._tables[bands + b], fine[b], item_id)

    def remove(self, item_id: int) -> None:
        text = self._text[item_id]
        same = self._exact[text]
        same.remove(item_id)
        if not same:
            del self._exact[text]
        if not self.exact_only:
            bands, cap = self.params.bands, self.params.bucket_cap
            stored = np.frombuffer(self._coarse.pop(item_id), dtype=np.uint64)
            coarse, fine = stored.tolist(), self._hasher.fine_keys(stored).tolist()
            for b in range(bands):
                size = _pull(self._tables[b], coarse[b], item_id)
                if size >= cap + 1:
                    _pull(self._tables[bands + b], fine[b], item_id)
                elif size == cap:  # back within the cap: the fine entries of this bucket go
                    _pull(self._tables[bands + b], fine[b], item_id)
                    for member in _members(self._tables[b][coarse[b]]):
                        _pull(self._tables[bands + b], self._fine_key(member, b), member)
        del self._text[item_id]
        del self._len[item_id]

    def _fine_key(self, item_id: int, band: int) -> int:
        return int(self._hasher.fine_keys(np.frombuffer(self._coarse[item_id], dtype=np.uint64))[band])

    def _band_members(self, text: str, limit: int) -> list[Iterable[int]]:
        """Per band that holds anything for ``text``: the members read there, newest first. The coarse bucket while
        it holds at most ``limit`` members, else the fine bucket, of which the newest ``limit``."""
        bands = self.params.bands
        coarse, fine = self._hasher.band_keys(text)
        out: list[Iterable[int]] = []
        for b in range(bands):
            bucket = self._tables[b].get(coarse[b])
            if type(bucket) is list and len(bucket) > limit:
                bucket = self._tables[bands + b].get(fine[b])
            if bucket is not None:
                out.append((bucket,) if type(bucket) is int else islice(reversed(bucket), limit))
        return out

    def candidates(self, text: str, threshold: float = 0.0) -> list[int]:
        """Ids worth confirming for ``text``: exact copies first, then ids sharing LSH bands with it, most shared
        bands first (ties: the order met), within the length bounds, at most ``max_candidates``.

        Per band the coarse bucket is read whole when it holds at most ``bucket_cap`` members; a larger one
        (strings sharing a common template) is replaced by the fine bucket (twice the rows, so only close
        strings share it), of which the newest ``bucket_cap`` members are read."""
        exact = list(self._exact.get(text, ()))
        if self.exact_only:
            return exact
        counts: Counter[int] = Counter()
        for members in self._band_members(text, self.params.bucket_cap):
            counts.update(members)
        low, high = length_bounds(len(text), threshold)
        lengths = self._len
        ranked = (i for i, _ in counts.most_common() if low <= lengths[i] <= high)
        return exact + list(islice(ranked, self.params.max_candidates))

    def search(self, text: str, threshold: float, limit: int | None = None) -> list[tuple[int, float]]:
        """Stored ids with ``sim(text, stored) >= threshold``, best first (ties: smaller id), at most ``limit``."""
        if threshold >= 1.0 or self.exact_only:
            hits = [(i, 1.0) for i in sorted(self._exact.get(text, ()))]
            return hits[:limit] if limit is not None else hits
        ids = list(dict.fromkeys(self.candidates(text, threshold)))
        hits = self._confirm(text, ids, threshold)
        if not hits and self.params.rescue_candidates > 0:
            checked = set(ids)
            hits = self._confirm(text, [i for i in self.wide_candidates(text, threshold) if i not in checked],
                                 threshold)
        return hits[:limit] if limit is not None else hits

    def _confirm(self, text: str, ids: list[int], threshold: float) -> list[tuple[int, float]]:
        """The ``ids`` with exact ``sim(text, stored) >= threshold``, best first (ties: smaller id)."""
        if not ids:
            return []
        cutoff = threshold * 100.0 - 1e-9
        scores = process.cdist(
            [text], [self._text[i] for i in ids], scorer=fuzz.ratio, dtype=np.float64, score_cutoff=cutoff
        )[0]
        keep = np.flatnonzero(scores >= cutoff)
        return [(i, -s / 100.0) for s, i in sorted((-float(scores[k]), ids[k]) for k in keep)]

    def wide_candidates(self, text: str, threshold: float = 0.0) -> list[int]:
        """The second pass's candidates (step 5): ids sharing a coarse band with ``text``, read from whole buckets
        (a bucket over ``rescue_candidates`` members gives way to its fine bucket, likewise bounded), within the
        length bounds, the ``rescue_candidates`` sharing the most bands first (ties: smaller id)."""
        if self.exact_only or not self._text:
            return []
        bound = self.params.rescue_candidates
        members = np.fromiter(chain.from_iterable(self._band_members(text, bound)), dtype=np.int64)
        if members.size == 0:
            return []
        ids, shared = np.unique(members, return_counts=True)
        low, high = length_bounds(len(text), threshold)
        lengths = np.fromiter(map(self._len.__getitem__, ids.tolist()), dtype=np.float64, count=ids.size)
        inside = (lengths >= low) & (lengths <= high)
        ids, shared = ids[inside], shared[inside]
        order = np.argsort(-shared, kind="stable")[:bound]
        return ids[order].tolist()

    def best(self, text: str, threshold: float) -> tuple[int, float] | None:
        """The most similar stored id with ``sim >= threshold`` (ties: the smaller id), or None."""
        exact = self._exact.get(text)
        if exact:
            return min(exact), 1.0
        hits = self.search(text, threshold, limit=1)
        return hits[0] if hits else None
