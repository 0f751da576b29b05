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
2. a MinHash LSH prefilter: each string becomes the set of its UTF-8 byte ``q``-grams; ``bands x rows``
   MinHash values (random affine permutations of the hashed q-gram modulo 2^32, vectorised in numpy) are grouped
   into ``bands`` coarse keys (``rows`` values each) and ``bands`` fine keys (two adjacent bands, ``2 * rows``
   values); strings sharing a key are candidates. Per band, a coarse bucket is read whole while it holds at
   most ``bucket_cap`` strings; beyond that (strings of a common template) the fine bucket is read instead, at
   most its ``bucket_cap`` newest members. This bounds the work per query independently of the index size.
   Buckets keep their members in insertion order, so answers depend only on the current contents and their
   order, not on the history of removals: an index rebuilt from a checkpoint answers exactly like the saved one;
3. a length filter (``sim >= t`` needs ``t / (2 - t) <= |a| / |b| <= (2 - t) / t``), then the
   ``max_candidates`` candidates sharing the most bands with the query (near-duplicates share many);
4. exact confirmation of those candidates with ``sim`` (rapidfuzz, C++);
5. only when that finds nothing: a second pass. It reads the bands of step 2 under the larger bound
   ``rescue_bucket_cap``, and ``rescue_bands`` more bands of a second MinHash family over *positional* q-grams
   (each gram tagged with which of ``position_bins`` equal parts of the string it starts in; coarse keys only: a
   bucket over the bound is read as its newest ``rescue_bucket_cap``). The strings read there, within the
   length bounds, are ranked by how many of the query's ``(bands + rescue_bands) x rows`` MinHash values they
   share (ties: older first), and the first ``rescue_candidates`` are confirmed exactly. Repeated
   observations, the common case, stop at step 4.

Why the second pass looks like this. Near the threshold a true match is not a near-copy: two 350-character
strings of one template (a WebShop item page, an ALFWorld room) at ``sim`` 0.85 differ in about 50 characters
each and their 3-gram sets overlap little (Jaccard J of 0.5 to 0.6). A band of 4 rows collides for such a pair
with probability J^4, about 0.1, so of 24 bands the pair shares 1 to 3 ((1 - J^4)^24 = 0.14 shares none at
J = 0.53), most often a band whose minima are template grams, whose bucket holds a sizeable share of every
string of the template (over 10,000 strings at 10^5) and is read only through its fine bucket. And the number
of shared bands (24 indicators, each of J^4) ranks candidates poorly: strings of the same template with other
content share as many grams as a match does. Hence three changes over step 2:

* more bands, from an independent family, so that a borderline pair shares a readable band more often (with
  72 bands in all, none is shared with probability (1 - J^4)^72 = 0.003 at J = 0.53, if the positional grams
  overlap as much as the plain ones);
* positional grams for those bands: ``sim`` counts a common subsequence, whose characters come in the same
  order in both strings, so an aligned character moves by at most the number of characters deleted before it;
  a match keeps most of its grams in the same part of the string, while other content of the same template
  puts the same grams in other parts and no longer collides;
* ranking by signature agreement: the ``(bands + rescue_bands) x rows`` MinHash values (their low bytes) tell
  how much plain and positional overlap a candidate has far more precisely than the count of shared bands, so
  the confirmation budget goes to the likeliest candidates.

What remains missed (``scripts/bench_library.py`` measures the recall against an exact linear scan; figures in
docs/experience_library.md) is mostly a single chance match among thousands of strings of the same template,
most of them between 0.80 and 0.85, that shares no band with the query: at that distance the template's
strings are all alike, and no bounded candidate set finds it reliably.

Steps 2, 3 and 5 are approximate: a true match can be missed, never a false one reported (every result is
confirmed exactly).

Storage is a handful of numpy arrays rather than Python objects per string (a 10^5-string index is a few
objects for the garbage collector, and pickles as a few buffers): each string has a slot (insertion order); the
keys of every column (coarse and fine keys of the plain bands, coarse keys of the positional ones; the column
index in the top 8 bits) sit in one sorted array next to their slots, and the keys of the newest slots wait in a
small unsorted block until they are merged into it (every ``max(32, sqrt(n))`` insertions, one pass over the
array). Removal marks the slot dead; once dead slots outnumber live ones the arrays are rewritten without them
(slots renumbered in order, so answers do not change).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from math import isqrt
from typing import Any, Iterable

import numpy as np
from rapidfuzz import fuzz, process

BLOB_FORMAT = 2  # layout of NearDuplicateIndex.to_blob (1 was the pickled attributes of the dict-based index)
_COLUMN_SHIFT = np.uint64(56)  # a stored key is (column << 56) | (band hash >> 8)
_FINE_MIX = np.uint64(0x9E3779B97F4A7C15)
_GRAM_MIX = np.uint32(2654435761)
_POSITION_MIX = np.uint32(0x9E3779B1)
_MIN_MERGE = 32  # pending slots before their keys are merged into the sorted array (at least)


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
    rescue_bands: int = 48  # the second pass's extra bands, over positional q-grams (step 5 of the module docstring)
    position_bins: int = 4  # parts of a string a positional q-gram's start is placed in
    rescue_bucket_cap: int = 1024  # the second pass's read bound per band
    rescue_candidates: int = 512  # the second pass confirms this many; 0 = no second pass
    seed: int = 1234


class MinHasher:
    """MinHash signatures and bucket keys of strings: identical in every process (no salted ``hash``).

    A q-gram (q <= 4 bytes) is packed into a uint32, mixed by a Knuth multiplicative hash, and permuted by random
    odd-multiplier affine maps modulo 2^32 (bijections, vectorised); the minimum of each map over the string's
    grams is one MinHash value. The plain family has ``bands * rows`` maps over the grams; the positional family
    ``rescue_bands * rows`` maps over the grams each combined with the part of the string (of ``position_bins``)
    its first byte falls in.
    """

    def __init__(self, params: LSHParams):
        if not 1 <= params.qgram <= 4:
            raise ValueError(f"LSHParams.qgram={params.qgram} must be in [1, 4] (grams are packed into 32 bits)")
        counts = (params.bands, params.rows, params.position_bins, params.bucket_cap, params.rescue_bucket_cap)
        if min(counts) < 1 or min(params.rescue_bands, params.max_candidates, params.rescue_candidates) < 0:
            raise ValueError(f"{params}: counts must be >= 1 (rescue_bands, max_candidates, rescue_candidates >= 0)")
        if 2 * params.bands + params.rescue_bands > 256:
            raise ValueError(f"{params}: 2 * bands + rescue_bands must be at most 256 (the column index has 8 bits)")
        self.params = params
        rng = np.random.default_rng(params.seed)
        n = params.bands * params.rows
        self._mul = rng.integers(1, 2**32, size=(n, 1), dtype=np.uint32) | np.uint32(1)
        self._add = rng.integers(0, 2**32, size=(n, 1), dtype=np.uint32)
        self._combine = rng.integers(1, 2**63, size=params.rows, dtype=np.uint64) | np.uint64(1)
        positional = np.random.default_rng([params.seed, 1])
        m = params.rescue_bands * params.rows
        self._pmul = positional.integers(1, 2**32, size=(m, 1), dtype=np.uint32) | np.uint32(1)
        self._padd = positional.integers(0, 2**32, size=(m, 1), dtype=np.uint32)
        self.n_plain, self.n_values = n, n + m
        self.n_columns = 2 * params.bands + params.rescue_bands
        self._tags = np.arange(self.n_columns, dtype=np.uint64) << _COLUMN_SHIFT

    def qgrams(self, text: str) -> np.ndarray:
        """(n_grams,) uint32 codes of the byte q-grams (the q bytes packed into one integer, repeats kept). The
        bytes are UTF-8 with lone surrogates kept (``surrogatepass``): any Python string hashes."""
        q = self.params.qgram
        data = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8).astype(np.uint32)
        if data.size < q:
            data = np.concatenate([data, np.zeros(q - data.size, dtype=np.uint32)])
        n = data.size - q + 1
        codes = data[:n].copy()
        for i in range(1, q):
            codes |= data[i : i + n] << np.uint32(8 * i)
        return codes

    @staticmethod
    def _minhash(codes: np.ndarray, mul: np.ndarray, add: np.ndarray) -> np.ndarray:
        """(len(mul),) uint32: the minimum over ``codes`` ((n_grams,) uint32) of each affine map."""
        permuted = np.multiply(mul, codes * _GRAM_MIX)  # (maps, n_grams), wraps modulo 2^32
        permuted += add
        return permuted.min(axis=1)

    def plain(self, text: str) -> np.ndarray:
        """(bands * rows,) uint32 MinHash values of the plain family."""
        return self._minhash(self.qgrams(text), self._mul, self._add)

    def positional(self, text: str) -> np.ndarray:
        """(rescue_bands * rows,) uint32 MinHash values of the positional family."""
        grams = self.qgrams(text)
        part = np.arange(grams.size, dtype=np.uint64) * np.uint64(self.params.position_bins) // np.uint64(grams.size)
        return self._minhash(grams ^ (part.astype(np.uint32) * _POSITION_MIX), self._pmul, self._padd)

    def signature(self, text: str) -> np.ndarray:
        """(n_values,) uint32: the plain family's values, then the positional family's."""
        return np.concatenate([self.plain(text), self.positional(text)])

    def _coarse(self, values: np.ndarray) -> np.ndarray:
        """(len(values) // rows,) uint64: each band's ``rows`` values hashed (uint64 arithmetic wraps)."""
        return (values.reshape(-1, self.params.rows).astype(np.uint64) * self._combine).sum(axis=1)

    def plain_keys(self, plain: np.ndarray) -> np.ndarray:
        """(2 * bands,) uint64 stored keys of the plain values: coarse keys (columns 0 .. bands - 1), then fine
        keys, a hash of bands b and b + 1 (columns bands .. 2 * bands - 1)."""
        coarse = self._coarse(plain)
        fine = coarse * _FINE_MIX + np.concatenate([coarse[1:], coarse[:1]])
        return (np.concatenate([coarse, fine]) >> np.uint64(8)) | self._tags[: 2 * self.params.bands]

    def positional_keys(self, positional: np.ndarray) -> np.ndarray:
        """(rescue_bands,) uint64 stored keys of the positional values: coarse keys only (columns 2 * bands on)."""
        return (self._coarse(positional) >> np.uint64(8)) | self._tags[2 * self.params.bands :]

    def all_keys(self, signature: np.ndarray) -> np.ndarray:
        """(n_columns,) uint64: the plain keys, then the positional ones, of a :meth:`signature`."""
        return np.concatenate([self.plain_keys(signature[: self.n_plain]),
                               self.positional_keys(signature[self.n_plain :])])


def _grown(array: np.ndarray, rows: int) -> np.ndarray:
    """A fresh copy of ``array`` ((n, ...)) with room for ``rows`` rows (the first n are ``array``'s)."""
    out = np.empty((rows, *array.shape[1:]), dtype=array.dtype)
    out[: len(array)] = array
    return out


def _ids_of(entry: int | tuple[int, ...] | None) -> tuple[int, ...]:
    """The ids of an exact-text map entry (one id, or a tuple when several strings are equal)."""
    if entry is None:
        return ()
    return entry if type(entry) is tuple else (entry,)


class NearDuplicateIndex:
    """Integer ids -> strings, searchable for ``sim >= threshold`` in time independent of the number stored."""

    def __init__(self, params: LSHParams | None = None, exact_only: bool = False):
        """``exact_only``: no LSH tables (only exact-text lookups are served, e.g. GiGPO's hash grouping)."""
        self.params = params or LSHParams()
        self.exact_only = exact_only
        self._hasher = MinHasher(self.params)
        self._slot_of: dict[int, int] = {}  # live id -> slot
        self._exact: dict[str, int | tuple[int, ...]] = {}  # text -> its ids, in insertion order
        self._texts: list[str | None] = []  # slot -> text; None once removed
        self._ids = np.empty(0, dtype=np.int64)  # (capacity,) slot -> id; -1 once removed
        self._lens = np.empty(0, dtype=np.int64)  # (capacity,) slot -> len(text)
        self._sigs = np.empty((0, self._hasher.n_values), dtype=np.uint8)  # (capacity, n_values) low bytes
        self._keys = np.empty(0, dtype=np.uint64)  # (n_columns * merged,) sorted keys of slots < merged
        self._key_slots = np.empty(0, dtype=np.int32)  # (n_columns * merged,) the slot of each key
        self._pending = np.empty((0, self._hasher.n_columns), dtype=np.uint64)  # (rows, n_columns) keys of the
        # slots >= merged, row i for slot merged + i
        self._merged = 0
        self._removed = 0

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, item_id: int) -> bool:
        return item_id in self._slot_of

    def text(self, item_id: int) -> str:
        return self._texts[self._slot_of[item_id]]

    def ids(self) -> Iterable[int]:
        return self._slot_of.keys()

    # changes -------------------------------------------------------------------------------------------------

    def add(self, item_id: int, text: str) -> None:
        """Store ``text`` under ``item_id`` (an integer >= 0, not stored yet)."""
        if item_id in self._slot_of:
            raise KeyError(f"id {item_id} is already in the index")
        if item_id < 0:
            raise ValueError(f"id {item_id} must be >= 0 (the index marks removed slots with -1)")
        slot = len(self._texts)
        self._reserve(slot + 1)
        self._texts.append(text)
        self._ids[slot], self._lens[slot] = item_id, len(text)
        self._slot_of[item_id] = slot
        self._exact[text] = (*_ids_of(self._exact.get(text)), item_id) if text in self._exact else item_id
        if self.exact_only:
            return
        signature = self._hasher.signature(text)
        self._sigs[slot] = signature.astype(np.uint8)  # the low byte of each value
        row = slot - self._merged
        if row >= len(self._pending):
            self._pending = _grown(self._pending, max(2 * len(self._pending), 16))
        self._pending[row] = self._hasher.all_keys(signature)
        if slot + 1 - self._merged >= max(_MIN_MERGE, isqrt(self._merged)):
            self._merge()

    def remove(self, item_id: int) -> None:
        """Forget ``item_id`` (its slot is marked dead; the arrays are rewritten once dead slots outnumber live)."""
        slot = self._slot_of.pop(item_id)
        text = self._texts[slot]
        rest = tuple(i for i in _ids_of(self._exact[text]) if i != item_id)
        if rest:
            self._exact[text] = rest if len(rest) > 1 else rest[0]
        else:
            del self._exact[text]
        self._texts[slot] = None
        self._ids[slot] = -1
        self._removed += 1
        if self._removed > max(len(self._slot_of), _MIN_MERGE):
            self._compact()

    def _reserve(self, slots: int) -> None:
        """Room for ``slots`` slots in the per-slot arrays (capacity doubles; a restored index's arrays, possibly
        read-only views of a received buffer, are replaced by fresh ones here, never written in place)."""
        if slots <= len(self._ids):
            return
        size = max(slots, 2 * len(self._ids), 64)
        self._ids, self._lens = _grown(self._ids, size), _grown(self._lens, size)
        if not self.exact_only:
            self._sigs = _grown(self._sigs, size)

    def _merge(self) -> None:
        """Move the pending slots' keys into the sorted array: equal keys stay in slot order (pending slots are
        newer than every merged one). Costs one pass over the array."""
        count = len(self._texts) - self._merged
        if count == 0 or self.exact_only:
            return
        columns = self._pending.shape[1]
        keys = self._pending[:count].ravel()  # slot-major: equal keys come in slot order
        slots = np.repeat(np.arange(self._merged, self._merged + count, dtype=np.int32), columns)
        order = np.argsort(keys, kind="stable")
        keys, slots = keys[order], slots[order]
        at = np.searchsorted(self._keys, keys, side="right")
        self._keys, self._key_slots = np.insert(self._keys, at, keys), np.insert(self._key_slots, at, slots)
        self._merged += count
        self._pending = np.empty((0, columns), dtype=np.uint64)

    def _compact(self) -> None:
        """Drop removed slots: live slots are renumbered in order, so buckets keep their order and answers stay."""
        self._merge()
        used = len(self._texts)
        live = self._ids[:used] >= 0
        renumber = np.cumsum(live) - 1  # old slot -> new slot, for live slots
        self._texts = [t for t in self._texts if t is not None]
        self._ids, self._lens = self._ids[:used][live], self._lens[:used][live]
        self._slot_of = dict(zip(self._ids.tolist(), range(len(self._texts))))
        if not self.exact_only:
            self._sigs = self._sigs[:used][live]
            keep = live[self._key_slots]
            self._keys, self._key_slots = self._keys[keep], renumber[self._key_slots[keep]].astype(np.int32)
        self._merged, self._removed = len(self._texts), 0

    # reading -------------------------------------------------------------------------------------------------

    def _members(self, keys: np.ndarray) -> list[np.ndarray]:
        """For each of ``keys`` ((k,) uint64, stored-key form): the slots of its bucket, oldest first, removed
        slots included."""
        low = np.searchsorted(self._keys, keys, side="left")
        high = np.searchsorted(self._keys, keys, side="right")
        count = len(self._texts) - self._merged
        columns = (keys >> _COLUMN_SHIFT).astype(np.intp)
        out = [self._key_slots[a:b] for a, b in zip(low.tolist(), high.tolist())]
        which, rows = np.nonzero(self._pending[:count, columns].T == keys[:, None])  # by key, then slot
        if which.size:
            bounds = np.searchsorted(which, np.arange(keys.size + 1))
            for j in np.flatnonzero(np.diff(bounds)).tolist():
                out[j] = np.concatenate([out[j], rows[bounds[j] : bounds[j + 1]] + self._merged])
        return out

    def _newest(self, members: np.ndarray, limit: int) -> tuple[np.ndarray, bool]:
        """(the newest ``limit`` live slots of ``members`` (oldest first), whether it holds more than ``limit``
        live slots). Walks back from the newest, so it reads about ``limit`` slots plus the removed ones met."""
        if not self._removed:
            return members[-limit:], members.size > limit
        found, count, end = [], 0, members.size
        while end > 0 and count <= limit:
            start = max(0, end - 2 * (limit + 1))
            chunk = members[start:end]
            chunk = chunk[self._ids[chunk] >= 0]
            found.append(chunk)
            count, end = count + chunk.size, start
        live = np.concatenate(found[::-1]) if found else members[:0]
        return live[-limit:], live.size > limit

    def _read(self, keys: np.ndarray, limit: int) -> list[np.ndarray]:
        """Per band whose (coarse, fine) stored keys are ``keys`` ((2 * bands_f,) uint64: coarse keys, then fine
        keys): the slots read there, oldest first. The coarse bucket's live members while they are at most
        ``limit``, else the newest ``limit`` of the fine bucket."""
        bands = keys.size // 2
        read = [self._newest(m, limit) for m in self._members(keys[:bands])]
        over = [b for b, (_, more) in enumerate(read) if more]
        out = [m for m, _ in read]
        for b, members in zip(over, self._members(keys[bands:][over]) if over else ()):
            out[b] = self._newest(members, limit)[0]
        return out

    def _within(self, slots: np.ndarray, length: int, threshold: float) -> np.ndarray:
        """The ``slots`` whose string length allows ``sim >= threshold`` with a string of ``length``."""
        low, high = length_bounds(length, threshold)
        lens = self._lens[slots]
        return slots[(lens >= low) & (lens <= high)]

    def candidates(self, text: str, threshold: float = 0.0) -> list[int]:
        """Ids worth confirming for ``text``: exact copies first, then ids sharing LSH bands with it, most shared
        bands first (ties: the order met, bands in order and each band's members newest first), within the
        length bounds, at most ``max_candidates``.

        Per band the coarse bucket is read whole when it holds at most ``bucket_cap`` members; a larger one
        (strings sharing a common template) is replaced by the fine bucket (twice the rows, so only close
        strings share it), of which the newest ``bucket_cap`` members are read."""
        exact = list(_ids_of(self._exact.get(text)))
        if self.exact_only or not self._slot_of:
            return exact
        return exact + self._ids[self._first_pass(text, self._hasher.plain(text), threshold)].tolist()

    def wide_candidates(self, text: str, threshold: float = 0.0, exclude: Iterable[int] = ()) -> list[int]:
        """The second pass's candidates (step 5): ids read in a band of either family (plain bands: whole coarse
        buckets up to ``rescue_bucket_cap`` members, else the fine bucket's newest ``rescue_bucket_cap``;
        positional bands: the coarse bucket's newest ``rescue_bucket_cap``), within the length bounds, not in
        ``exclude``, the ``rescue_candidates`` sharing the most MinHash values with ``text`` first (ties: older
        first)."""
        if self.exact_only or not self._slot_of:
            return []
        skip = np.array([self._slot_of[i] for i in exclude if i in self._slot_of], dtype=np.int64)
        return self._ids[self._second_pass(text, self._hasher.plain(text), threshold, skip)].tolist()

    def _first_pass(self, text: str, plain: np.ndarray, threshold: float) -> np.ndarray:
        """(<= max_candidates,) slots of :meth:`candidates` (without the exact copies); ``plain``: the text's plain
        MinHash values."""
        met = np.concatenate([m[::-1] for m in self._read(self._hasher.plain_keys(plain), self.params.bucket_cap)])
        slots, first, shared = np.unique(met, return_index=True, return_counts=True)
        ranked = slots[np.lexsort((first, -shared))]
        return self._within(ranked, len(text), threshold)[: self.params.max_candidates]

    def _second_pass(self, text: str, plain: np.ndarray, threshold: float, skip: np.ndarray) -> np.ndarray:
        """(<= rescue_candidates,) slots of :meth:`wide_candidates`, leaving out the slots ``skip``."""
        positional = self._hasher.positional(text)
        cap = self.params.rescue_bucket_cap
        read = self._read(self._hasher.plain_keys(plain), cap)
        read += [self._newest(m, cap)[0] for m in self._members(self._hasher.positional_keys(positional))]
        slots = self._within(np.unique(np.concatenate(read)), len(text), threshold)  # ascending
        if skip.size and slots.size:  # drop the skipped slots: where they would sit in the sorted slots, if there
            at = np.minimum(np.searchsorted(slots, skip), slots.size - 1)
            slots = np.delete(slots, at[slots[at] == skip])
        signature = np.concatenate([plain, positional]).astype(np.uint8)
        shared = np.count_nonzero(self._sigs[slots] == signature, axis=1)
        return slots[np.argsort(-shared, kind="stable")[: self.params.rescue_candidates]]

    # searching -----------------------------------------------------------------------------------------------

    def search(self, text: str, threshold: float, limit: int | None = None) -> list[tuple[int, float]]:
        """Stored ids with ``sim(text, stored) >= threshold``, best first (ties: smaller id), at most ``limit``."""
        if threshold >= 1.0 or self.exact_only or not self._slot_of:
            hits = [(i, 1.0) for i in sorted(_ids_of(self._exact.get(text)))]
            return hits[:limit] if limit is not None else hits
        exact = [self._slot_of[i] for i in _ids_of(self._exact.get(text))]
        plain = self._hasher.plain(text)
        slots = np.array(list(dict.fromkeys(exact + self._first_pass(text, plain, threshold).tolist())), np.int64)
        hits = self._confirm(text, slots, threshold)
        if not hits and self.params.rescue_candidates > 0:
            hits = self._confirm(text, self._second_pass(text, plain, threshold, slots), threshold)
        return hits[:limit] if limit is not None else hits

    def _confirm(self, text: str, slots: np.ndarray, threshold: float) -> list[tuple[int, float]]:
        """(id, sim) of the ``slots`` with exact ``sim(text, stored) >= threshold``, best first (ties: smaller
        id)."""
        if not slots.size:
            return []
        cutoff = threshold * 100.0 - 1e-9
        texts = self._texts
        scores = process.cdist(
            [text], [texts[s] for s in slots.tolist()], scorer=fuzz.ratio, dtype=np.float64, score_cutoff=cutoff
        )[0]
        keep = np.flatnonzero(scores >= cutoff)
        ids = self._ids[slots[keep]].tolist()
        return [(i, -s / 100.0) for s, i in sorted(zip((-scores[keep]).tolist(), ids))]

    def best(self, text: str, threshold: float) -> tuple[int, float] | None:
        """The most similar stored id with ``sim >= threshold`` (ties: the smaller id), or None."""
        exact = self._exact.get(text)
        if exact is not None:
            return min(_ids_of(exact)), 1.0
        hits = self.search(text, threshold, limit=1)
        return hits[0] if hits else None

    # shipping ------------------------------------------------------------------------------------------------

    def to_blob(self) -> dict[str, Any]:
        """This index as plain data and numpy arrays (pickles as a few buffers; ``from_blob`` restores it without
        hashing anything). Pending keys are merged and removed slots dropped first, which changes no answer."""
        if self._removed:
            self._compact()
        else:
            self._merge()
        used = len(self._texts)
        return {"format": BLOB_FORMAT, "params": asdict(self.params), "exact_only": self.exact_only,
                "texts": list(self._texts), "ids": self._ids[:used].copy(), "lens": self._lens[:used].copy(),
                "sigs": self._sigs[:used].copy(), "keys": self._keys, "key_slots": self._key_slots}

    @classmethod
    def from_blob(cls, blob: dict[str, Any]) -> "NearDuplicateIndex":
        """The index ``to_blob`` described. Its arrays are used as they are (they may be read-only views of a
        received buffer: the index never writes into them)."""
        if not isinstance(blob, dict) or blob.get("format") != BLOB_FORMAT:
            found = blob.get("format") if isinstance(blob, dict) else type(blob).__name__
            raise ValueError(f"a near-duplicate search of format {found!r} cannot be restored (this code reads "
                             f"format {BLOB_FORMAT}): the snapshot comes from another version of the code")
        index = cls(LSHParams(**blob["params"]), bool(blob["exact_only"]))
        index._texts = list(blob["texts"])
        index._ids = np.array(blob["ids"], dtype=np.int64)  # written on removal: a private copy
        index._lens, index._sigs = blob["lens"], blob["sigs"]
        index._keys, index._key_slots = blob["keys"], blob["key_slots"]
        index._merged = len(index._texts)
        index._slot_of = dict(zip(index._ids.tolist(), range(index._merged)))
        for item_id, text in zip(index._ids.tolist(), index._texts):
            index._exact[text] = (*_ids_of(index._exact[text]), item_id) if text in index._exact else item_id
        return index
