"""Checkpoint file of the experience system: one JSON document, written atomically, validated on load.

Layout: ``{"format": "slea-rl-experience", "schema_version": 1, "payload": {...}, "sha256": <hex of the
payload's canonical JSON (sorted keys, no spaces, UTF-8)>}``. The payload holds the library, the observation index, the iteration, the library
version and the counters, so a resumed run continues exactly where the saved one stopped.

Writing: the payload is streamed (serialised once, hashed on the way) into a temporary file in the same folder,
flushed and fsync'ed, then ``os.replace``d onto the final name, then the folder is fsync'ed. A crash at any moment leaves either the previous complete file or the new one.
Loading never returns an empty library for a bad file: a missing, truncated, damaged, foreign or newer file
raises :class:`CheckpointError` naming the file and what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from recipe.forge.experience.library import LEVELS

FORMAT = "slea-rl-experience"
SCHEMA_VERSION = 1
FILENAME = "experience_library.json"

ENTRY_FIELDS = {
    "entry_id": int, "text": str, "zone": str, "level": str, "score": (int, float), "task": str,
    "task_type": (str, type(None)), "key": str, "cluster_ids": list, "support": int, "retrieval_count": int,
    "created_iter": int, "updated_iter": int,
}
CLUSTER_FIELDS = {"cluster_id": int, "prototype": str, "uses": int, "created_iter": int, "last_used_iter": int}
PAYLOAD_FIELDS = {"iteration": int, "version": int, "library": dict, "index": dict, "counters": dict, "config": dict}


class CheckpointError(RuntimeError):
    """A checkpoint file cannot be used; the message names the file and the fault."""


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _canonical(payload: dict[str, Any]) -> bytes:
    return _ENCODER.encode(payload).encode("utf-8")


def checkpoint_path(directory: str | os.PathLike) -> Path:
    return Path(directory) / FILENAME


def save_payload(directory: str | os.PathLike, payload: dict[str, Any]) -> Path:
    """Atomically write ``payload`` to ``directory/experience_library.json``; returns the path."""
    validate_payload(payload, "<in memory>")
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(f".{FILENAME}.*.tmp"):  # left by a writer killed mid-save (one writer per folder)
        stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{FILENAME}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            # streamed: the payload is serialised once, hashed and written chunk by chunk
            fh.write(json.dumps({"format": FORMAT, "schema_version": SCHEMA_VERSION})[:-1] + ', "payload": ')
            digest = hashlib.sha256()
            for chunk in _ENCODER.iterencode(payload):
                fh.write(chunk)
                digest.update(chunk.encode("utf-8"))
            fh.write(f', "sha256": "{digest.hexdigest()}"}}\n')
            fh.flush()
            os.fsync(fh.fileno())
        target = checkpoint_path(folder)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return target


def load_payload(directory_or_file: str | os.PathLike) -> dict[str, Any]:
    """Read and validate a checkpoint (a folder holding experience_library.json, or the file itself)."""
    path = Path(directory_or_file)
    if path.is_dir():
        path = checkpoint_path(path)
    if not path.is_file():
        raise CheckpointError(f"no experience checkpoint at {path}")
    raw = path.read_bytes()
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} is not valid JSON ({exc}); the file is truncated or damaged") from exc
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an experience-library checkpoint (format={document.get('format')!r}"
                              if isinstance(document, dict) else f"{path} is not an experience-library checkpoint")
    version = document.get("schema_version")
    if version != SCHEMA_VERSION:
        raise CheckpointError(f"{path} has schema_version={version!r}; this code reads schema_version={SCHEMA_VERSION}")
    payload = document.get("payload")
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path}: 'payload' is missing or not an object")
    digest = hashlib.sha256(_canonical(payload)).hexdigest()
    if digest != document.get("sha256"):
        raise CheckpointError(f"{path}: checksum mismatch (stored {document.get('sha256')!r}, content {digest}); "
                              "the file was modified or damaged")
    validate_payload(payload, str(path))
    return payload


def _check_fields(obj: Any, fields: dict[str, Any], where: str) -> None:
    if not isinstance(obj, dict):
        raise CheckpointError(f"{where} must be an object, got {type(obj).__name__}")
    for name, kind in fields.items():
        if name not in obj:
            raise CheckpointError(f"{where} is missing the field {name!r}")
        value = obj[name]
        if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
            raise CheckpointError(f"{where}.{name}={value!r} has the wrong type")


def validate_payload(payload: dict[str, Any], source: str) -> None:
    """Raise CheckpointError naming the first structural fault in ``payload``."""
    _check_fields(payload, PAYLOAD_FIELDS, f"{source}: payload")
    library, index = payload["library"], payload["index"]
    _check_fields(library, {"golden_capacity": int, "warning_capacity": int, "novelty_threshold": (int, float),
                            "next_id": int, "entries": list}, f"{source}: library")
    _check_fields(index, {"threshold": (int, float), "max_clusters": int, "exact": bool, "next_id": int,
                          "evicted": int, "clusters": list}, f"{source}: index")
    seen: set[int] = set()
    for n, entry in enumerate(library["entries"]):
        where = f"{source}: library.entries[{n}]"
        _check_fields(entry, ENTRY_FIELDS, where)
        if entry["zone"] not in LEVELS or entry["level"] not in LEVELS[entry["zone"]]:
            raise CheckpointError(f"{where} has zone={entry['zone']!r} level={entry['level']!r}, not a known pair")
        if entry["entry_id"] in seen or not 0 <= entry["entry_id"] < library["next_id"]:
            raise CheckpointError(f"{where}.entry_id={entry['entry_id']} is duplicated or >= next_id")
        seen.add(entry["entry_id"])
    clusters: set[int] = set()
    for n, cluster in enumerate(index["clusters"]):
        where = f"{source}: index.clusters[{n}]"
        _check_fields(cluster, CLUSTER_FIELDS, where)
        if cluster["cluster_id"] in clusters or not 0 <= cluster["cluster_id"] < index["next_id"]:
            raise CheckpointError(f"{where}.cluster_id={cluster['cluster_id']} is duplicated or >= next_id")
        clusters.add(cluster["cluster_id"])
