"""Checkpoint file of the experience system: one JSON document, written atomically, validated on load.

Layout: ``{"format": "slea-rl-experience", "schema_version": 1, "payload": {...}, "sha256": <hex of the
payload's canonical JSON (sorted keys, no spaces, UTF-8)>}``. The payload holds the library, the observation index, the iteration, the library
version and the counters, so a resumed run continues exactly where the saved one stopped.

Writing (recipe/forge/runs/durable.py): the payload is streamed (serialised once, hashed on the way) into a
temporary file of this writer in the same folder, flushed and fsync'ed, then ``os.replace``d onto the final
name. A crash at any moment leaves either the previous complete file or the new one, and two runs writing into
one folder never delete each other's temporaries.
Loading never returns an empty library for a bad file: a missing, truncated, damaged, foreign or newer file,
and one whose checksum matches but whose content is not a valid library (a wrong type, a NaN score, a
negative count, more successes than episodes, an unknown field), raises :class:`CheckpointError` naming the
file and what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from agent_system.json_input import loads as read_json
from recipe.forge.runs.durable import CheckpointError, write_atomic
from recipe.forge.experience.library import HABITS, LEVELS
from recipe.forge.experience.retirement import RETIREMENTS
from recipe.forge.experience.metrics import RetrievalStats
from recipe.forge.experience.outcomes import OUTCOME_FIELDS

FORMAT = "slea-rl-experience"
SCHEMA_VERSION = 1
FILENAME = "experience_library.json"

ENTRY_FIELDS = {
    "entry_id": int, "text": str, "zone": str, "level": str, "score": (int, float), "task": str,
    "task_type": (str, type(None)), "key": str, "cluster_ids": list, "support": int, "retrieval_count": int,
    "created_iter": int, "updated_iter": int,
}
# absent in libraries saved before lessons carried advice (None) and before the outcome counters (0)
# and before retirement (habit, retired: None)
OPTIONAL_ENTRY_FIELDS = {"advice": (dict, type(None)), **dict.fromkeys(OUTCOME_FIELDS, int),
                         "habit": (str, type(None)), "retired": (str, type(None))}
ADVICE_FIELDS = {"state": str, "do": list, "avoid": list, "expert": (str, type(None))}
CLUSTER_FIELDS = {"cluster_id": int, "prototype": str, "uses": int, "created_iter": int, "last_used_iter": int}
PAYLOAD_FIELDS = {"iteration": int, "version": int, "library": dict, "index": dict, "counters": dict, "config": dict}
LIBRARY_FIELDS = {"golden_capacity": int, "warning_capacity": int, "novelty_threshold": (int, float),
                  "next_id": int, "entries": list}
INDEX_FIELDS = {"threshold": (int, float), "max_clusters": int, "exact": bool, "next_id": int, "evicted": int,
                "clusters": list}
# fields that count something (>= 0); support counts the trajectories behind an entry (>= 1)
NON_NEGATIVE = ("entry_id", "retrieval_count", "created_iter", "updated_iter", "cluster_id", "uses",
                "last_used_iter", "iteration", "version", "next_id", "evicted", "golden_capacity", "warning_capacity",
                *OUTCOME_FIELDS)
COUNTER_SECTIONS = ("totals", "extractor", "retrieval")
TOTALS = ("strategies_added", "warnings_added", "merged", "rejected", "pruned")  # evolution totals of a system


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _canonical(payload: dict[str, Any]) -> bytes:
    return _ENCODER.encode(payload).encode("utf-8")


def checkpoint_path(directory: str | os.PathLike) -> Path:
    return Path(directory) / FILENAME


def save_payload(directory: str | os.PathLike, payload: dict[str, Any]) -> Path:
    """Atomically write ``payload`` to ``directory/experience_library.json``; returns the path."""
    validate_payload(payload, "<in memory>")

    def write(fh) -> None:
        # streamed: the payload is serialised once, hashed and written chunk by chunk
        fh.write(json.dumps({"format": FORMAT, "schema_version": SCHEMA_VERSION})[:-1] + ', "payload": ')
        digest = hashlib.sha256()
        for chunk in _ENCODER.iterencode(payload):
            fh.write(chunk)
            digest.update(chunk.encode("utf-8"))
        fh.write(f', "sha256": "{digest.hexdigest()}"}}\n')

    return write_atomic(checkpoint_path(directory), write)


def load_payload(directory_or_file: str | os.PathLike) -> dict[str, Any]:
    """Read and validate a checkpoint (a folder holding experience_library.json, or the file itself)."""
    path = Path(directory_or_file)
    if path.is_dir():
        path = checkpoint_path(path)
    if not path.is_file():
        raise CheckpointError(f"no experience checkpoint at {path}")
    try:
        document = read_json(path.read_bytes(), str(path))
    except ValueError as exc:  # JSONInputError: not JSON, an integer of thousands of digits, nested too deeply
        raise CheckpointError(f"{exc}; the file is truncated, damaged or not an experience-library checkpoint") \
            from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an experience-library checkpoint (format={document.get('format')!r}"
                              if isinstance(document, dict) else f"{path} is not an experience-library checkpoint")
    version = document.get("schema_version")
    if version != SCHEMA_VERSION:
        raise CheckpointError(f"{path} has schema_version={version!r}; this code reads schema_version={SCHEMA_VERSION}")
    payload = document.get("payload")
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path}: 'payload' is missing or not an object")
    try:
        digest = hashlib.sha256(_canonical(payload)).hexdigest()
    except (RecursionError, UnicodeEncodeError) as exc:
        raise CheckpointError(f"{path}: the payload cannot be re-encoded ({type(exc).__name__})") from exc
    if digest != document.get("sha256"):
        raise CheckpointError(f"{path}: checksum mismatch (stored {document.get('sha256')!r}, content {digest}); "
                              "the file was modified or damaged")
    validate_payload(payload, str(path))
    return payload


def _is_finite(value: Any) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


def _check_fields(obj: Any, fields: dict[str, Any], where: str, optional: dict[str, Any] | None = None) -> None:
    """Exactly ``fields`` (and any of ``optional``), each of its type; numbers finite; counts and ids >= 0."""
    if not isinstance(obj, dict):
        raise CheckpointError(f"{where} must be an object, got {type(obj).__name__}")
    optional = optional or {}
    for name, kind in {**fields, **optional}.items():
        if name not in obj:
            if name in optional:
                continue
            raise CheckpointError(f"{where} is missing the field {name!r}")
        value = obj[name]
        if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
            raise CheckpointError(f"{where}.{name}={_short(value)} has the wrong type")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not _is_finite(value):
                raise CheckpointError(f"{where}.{name}={_short(value)} is not a finite number")
            if name in NON_NEGATIVE and value < 0:
                raise CheckpointError(f"{where}.{name}={value} must be >= 0")
    unknown = sorted(set(obj) - set(fields) - set(optional), key=str)
    if unknown:
        raise CheckpointError(f"{where} has the unknown field {_short(unknown[0])}")


def _check_advice(advice: Any, where: str) -> None:
    """A lesson's advice: its fields, with lists of action strings."""
    _check_fields(advice, ADVICE_FIELDS, where)
    for name in ("do", "avoid"):
        if not all(isinstance(action, str) for action in advice[name]):
            raise CheckpointError(f"{where}.{name} must hold action strings")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_fraction(value: float, where: str) -> None:
    if not 0.0 <= value <= 1.0:
        raise CheckpointError(f"{where}={value} must be in [0, 1]")


def validate_payload(payload: dict[str, Any], source: str) -> None:
    """Raise CheckpointError naming the first fault in ``payload``: everything a restore reads is checked,
    so a restore that starts never stops half-way."""
    _check_fields(payload, PAYLOAD_FIELDS, f"{source}: payload")
    library, index = payload["library"], payload["index"]
    _check_fields(library, LIBRARY_FIELDS, f"{source}: library")
    _check_fraction(library["novelty_threshold"], f"{source}: library.novelty_threshold")
    _check_fields(index, INDEX_FIELDS, f"{source}: index")
    _check_fraction(index["threshold"], f"{source}: index.threshold")
    if index["max_clusters"] < 1:
        raise CheckpointError(f"{source}: index.max_clusters={index['max_clusters']} must be >= 1")
    seen: set[int] = set()
    for n, entry in enumerate(library["entries"]):
        where = f"{source}: library.entries[{n}]"
        _check_fields(entry, ENTRY_FIELDS, where, OPTIONAL_ENTRY_FIELDS)
        if entry.get("advice") is not None:
            _check_advice(entry["advice"], f"{where}.advice")
        if entry["zone"] not in LEVELS or entry["level"] not in LEVELS[entry["zone"]]:
            raise CheckpointError(f"{where} has zone={_short(entry['zone'])} level={_short(entry['level'])}, "
                                  "not a known pair")
        if entry["entry_id"] in seen or not entry["entry_id"] < library["next_id"]:
            raise CheckpointError(f"{where}.entry_id={entry['entry_id']} is duplicated or >= next_id")
        seen.add(entry["entry_id"])
        if not entry["text"].strip():
            raise CheckpointError(f"{where}.text is empty")
        if entry["support"] < 1:
            raise CheckpointError(f"{where}.support={entry['support']} must be >= 1")
        _check_outcomes(entry, where)
        if entry.get("habit") not in (None, *HABITS):
            raise CheckpointError(f"{where}.habit={_short(entry['habit'])} is not one of {[None, *HABITS]}")
        if entry.get("retired") not in (None, *RETIREMENTS):
            raise CheckpointError(f"{where}.retired={_short(entry['retired'])} is not one of {[None, *RETIREMENTS]}")
        for cid in entry["cluster_ids"]:
            if isinstance(cid, bool) or not isinstance(cid, int) or cid < 0:
                raise CheckpointError(f"{where}.cluster_ids holds {_short(cid)}; cluster ids are integers >= 0")
    clusters: set[int] = set()
    for n, cluster in enumerate(index["clusters"]):
        where = f"{source}: index.clusters[{n}]"
        _check_fields(cluster, CLUSTER_FIELDS, where)
        if cluster["cluster_id"] in clusters or not cluster["cluster_id"] < index["next_id"]:
            raise CheckpointError(f"{where}.cluster_id={cluster['cluster_id']} is duplicated or >= next_id")
        clusters.add(cluster["cluster_id"])
    _check_counters(payload["counters"], f"{source}: counters")


def _check_outcomes(entry: dict[str, Any], where: str) -> None:
    """An entry's successes within its episodes, in each outcome group (absent counters are 0)."""
    for group in ("shown", "unshown"):
        successes, episodes = entry.get(f"{group}_successes", 0), entry.get(f"{group}_episodes", 0)
        if successes > episodes:
            raise CheckpointError(f"{where}.{group}_successes={successes} exceeds {group}_episodes={episodes}")


def _check_counters(counters: dict[str, Any], where: str) -> None:
    """Known sections of non-negative finite numbers; the totals and retrieval sections hold only their known
    counters (extractor counters differ between extractors, and a resume may switch extractor)."""
    unknown = sorted(set(counters) - set(COUNTER_SECTIONS), key=str)
    if unknown:
        raise CheckpointError(f"{where} has the unknown section {_short(unknown[0])}")
    known = {"totals": set(TOTALS), "retrieval": {f.name for f in fields(RetrievalStats)}}
    for section, values in counters.items():
        if not isinstance(values, dict):
            raise CheckpointError(f"{where}.{section} must be an object, got {type(values).__name__}")
        extra = sorted(set(values) - known[section], key=str) if section in known else []
        if extra:
            raise CheckpointError(f"{where}.{section} has the unknown counter {_short(extra[0])}; "
                                  f"known: {sorted(known[section])}")
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not _is_finite(value) or value < 0:
                raise CheckpointError(f"{where}.{section}.{_short(name)}={_short(value)} must be a finite number >= 0")
