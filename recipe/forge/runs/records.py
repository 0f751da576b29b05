"""Hydra's records of a run (``<run folder>/hydra/<time>/.hydra/``): which ones belong to a run that started, how
they are read, and what ``slea-rl eval`` and ``slea-rl export`` may take from them.

* **Records of runs only.** Hydra writes a command's record into the run folder before our checks run, so a
  refused command (a held run folder, a bad key) leaves one too. A command that passes them marks its record
  (:func:`mark_started`, ``.hydra/started.json``); a refused one removes what Hydra wrote (:func:`discard`); and the
  readers take the newest *marked* record (:func:`newest_record`), so a refused command's config is never taken
  for the run's. Records are named to the microsecond, so two commands never share one.
* **Bounded reads** (:func:`read_record`): at most :data:`MAX_BYTES`, nesting at most :data:`MAX_DEPTH`, no YAML
  anchor or alias (Hydra never writes one; an alias bomb expands exponentially). Anything else is a RecordError
  of one line naming the file.
* **Nothing that reaches out or runs.** A received run folder's record must not choose where this machine
  connects, what it sends, or what code it instantiates. :func:`safe_overrides` keeps only the overrides of the
  sections an evaluation reads (:data:`TAKEN`) and leaves out, whatever their section, every key that names an
  endpoint or a credential (:data:`REACHING_OUT`), Hydra's special keys (``_target_`` instantiates code through
  verl's config conversion), ``hydra.*``, deletions and forced additions, and every value holding an
  interpolation (``${oc.env:NAME}`` would read this machine's environment) or a mapping. :func:`recorded_config` gives the
  composed config as written, never resolved, with credential values and URL user info redacted: what an
  export's manifest shows.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARK = "started.json"
MAX_BYTES = 2_000_000  # a composed record is about 30 KB
MAX_DEPTH = 64
MAX_OVERRIDES = 2_000
TAKEN = ("env.", "data.", "algorithm.", "actor_rollout_ref.model.", "actor_rollout_ref.rollout.", "trainer.local.")
TAKEN_KEYS = ("trainer.api.model",)
GROUPS = ("experiment",)  # recipe/forge/config/<group>/: the shipped presets
# words of a key (split at "_") that make it reach out (where to connect, with which credential) or run code
REACHING_OUT = frozenset({"url", "urls", "uri", "endpoint", "endpoints", "host", "hostname", "address", "port",
                          "proxy", "server", "remote", "secret", "secrets", "password", "passwd", "credential",
                          "credentials", "auth", "cookie", "cookies", "header", "headers"})
RUNNING_CODE = frozenset({"trust", "custom", "function", "fn", "python", "code", "module", "cls", "hook", "external",
                          "cmd", "tool", "debugger", "profiler"})  # and _target_, _partial_, ...: a leading "_"
CREDENTIAL_WORDS = frozenset({"secret", "secrets", "password", "passwd", "credential", "credentials", "cookie",
                              "cookies", "auth"})
HYDRA_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")
REDACTED = "<redacted>"
_USERINFO = re.compile(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", re.IGNORECASE)


class RecordError(ValueError):
    """A Hydra record that cannot be read within the bounds, or is not what Hydra writes (one line)."""


# which records ----------------------------------------------------------------------------------------------------

def mark_started(record: str | os.PathLike) -> None:
    """Mark the record folder ``record`` (``hydra.run.dir``) as that of a run that passed its start-up checks."""
    hydra_dir = Path(record) / ".hydra"
    if hydra_dir.is_dir():
        (hydra_dir / MARK).write_text(json.dumps({"pid": os.getpid(), "started": time.time()}), encoding="utf-8")


def is_started(record: Path) -> bool:
    return (Path(record) / ".hydra" / MARK).is_file()


def discard(record: str | os.PathLike, job_name: str) -> None:
    """Remove what Hydra wrote for a refused command into ``record`` (its three YAML files and ``<job>.log``), then
    the folders left empty; anything else there stays. Only a record in the layout the readers read
    (``<run folder>/hydra/<time>``, the shipped ``hydra.run.dir``) is touched, and never a marked one."""
    record = Path(record)
    if record.parent.name != "hydra" or is_started(record):
        return
    for path in [*(record / ".hydra" / name for name in HYDRA_FILES), record / f"{job_name}.log"]:
        path.unlink(missing_ok=True)
    for folder in (record / ".hydra", record):
        try:
            folder.rmdir()
        except OSError:  # not empty (something else is there), or already gone
            return
    try:
        record.parent.rmdir()  # <run>/hydra, when this was its only record
    except OSError:
        pass


def newest_record(run: str | os.PathLike | None) -> Path | None:
    """The ``.hydra`` folder of the newest marked record in the run folder ``run`` (folder names sort by time)."""
    if run is None:
        return None
    started = [path for path in sorted(Path(run).glob("hydra/*/.hydra")) if (path / MARK).is_file()]
    return started[-1] if started else None


# bounded reads ------------------------------------------------------------------------------------------------------

def _check_events(text: str, path: Path) -> None:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    depth = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise RecordError(f"{path} uses YAML anchors or aliases, which a Hydra record never holds: not read")
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise RecordError(f"{path} nests deeper than {MAX_DEPTH} levels: not a Hydra record, not read")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError as exc:
        raise RecordError(f"{path} is not valid YAML ({type(exc).__name__})") from None


def read_record(path: str | os.PathLike) -> Any:
    """The content of the record file ``path`` as plain data (interpolations left as written); RecordError for a
    missing, oversized, aliased, too deeply nested or unparsable file."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise RecordError(f"{path} is {size:,} bytes, more than a Hydra record's {MAX_BYTES:,}: not read")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(f"{path} cannot be read ({type(exc).__name__}: {exc})") from None
    _check_events(text, path)
    try:
        return OmegaConf.to_container(OmegaConf.create(text), resolve=False)
    except (OmegaConfBaseException, ValueError, RecursionError) as exc:  # ValueError: an integer of 5,000 digits
        raise RecordError(f"{path} is not a Hydra record ({type(exc).__name__})") from None


# what may be taken ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RecordedOverrides:
    record: Path | None  # the .hydra folder read, None when the run folder has no record of a started run
    taken: list[str]  # the overrides an evaluation takes, as written
    left_out: list[str]  # the keys left out (never their values: they may be secrets)


def _override_key(item: str) -> tuple[str, str]:
    """(prefix, key) of a Hydra override ``[+|++|~]key[=value]``."""
    prefix = re.match(r"^(\+\+|\+|~)?", item).group(0)
    return prefix, item[len(prefix):].split("=", 1)[0].strip()


def _words(part: str) -> set[str]:
    return set(part.lower().strip("_").split("_"))


def reaches_out_or_runs(part: str) -> bool:
    """Whether the key component ``part`` names an endpoint, a credential or code (``api_key``, ``base_url``,
    ``auth_token``, ``trust_remote_code``, ``_target_``, ``custom_cls``, ...)."""
    words = _words(part)
    credential_token = bool({"token", "key"} & words) and bool({"api", "auth", "access", "bearer", "hf", "wandb",
                                                                 "env"} & words)
    return bool(words & (REACHING_OUT | RUNNING_CODE)) or credential_token or part.startswith("_")


def is_credential(part: str) -> bool:
    """Whether the value under ``part`` may itself be a secret (never an environment variable's name, ``*_env``)."""
    words = _words(part)
    if "env" in words:
        return False
    return bool(words & CREDENTIAL_WORDS) or ("token" in words or "key" in words) and bool(
        {"api", "auth", "access", "bearer", "hf", "wandb"} & words)


def is_taken(item: str) -> bool:
    """Whether an evaluation may take the override ``item`` from a received record (module docstring)."""
    prefix, key = _override_key(item)
    value = item.split("=", 1)[1] if "=" in item else ""
    if "=" not in item or "$" in value or "{" in value or prefix in ("~", "++") or len(item) > 4096:
        return False  # an interpolation, or a mapping (which could carry a _target_)
    if "." not in key:
        return key in GROUPS
    if prefix == "+" or any(reaches_out_or_runs(part) for part in key.split(".")):
        return False
    return key.startswith(TAKEN) or key in TAKEN_KEYS


def safe_overrides(run: str | os.PathLike | None, given: list[str] = ()) -> RecordedOverrides:
    """The overrides of the run's newest started record that an evaluation takes (:func:`is_taken`), less those
    whose key ``given`` (the command line's overrides) sets again; RecordError for a damaged record."""
    record = newest_record(run)
    if record is None or not (record / "overrides.yaml").is_file():
        return RecordedOverrides(record, [], [])
    items = read_record(record / "overrides.yaml")
    if not isinstance(items, list) or len(items) > MAX_OVERRIDES or not all(isinstance(i, str) for i in items):
        raise RecordError(f"{record / 'overrides.yaml'} is not a list of Hydra overrides")
    given_keys = {_override_key(item)[1] for item in given}
    taken, left_out = [], []
    for item in items:
        key = _override_key(item)[1]
        if key in given_keys:
            continue
        (taken if is_taken(item) else left_out).append(item if is_taken(item) else key[:80])
    return RecordedOverrides(record, taken, left_out)


def redacted(value: Any, key: str = "") -> Any:
    """``value`` (a config as plain containers) with credential values and URL user info replaced by REDACTED."""
    if isinstance(value, dict):
        return {k: redacted(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v, key) for v in value]
    if isinstance(value, str):
        if is_credential(key):
            return REDACTED
        return _USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", value)
    return value


def recorded_config(run: str | os.PathLike) -> tuple[dict[str, Any] | None, Path | None]:
    """The composed config of the run's newest started record as written (interpolations such as
    ``${oc.env:NAME}`` kept as text, never resolved), credential values and URL user info redacted, and its file;
    (None, None) without a record. RecordError for a damaged one."""
    record = newest_record(run)
    if record is None or not (record / "config.yaml").is_file():
        return None, None
    config = read_record(record / "config.yaml")
    if not isinstance(config, dict):
        raise RecordError(f"{record / 'config.yaml'} is not a mapping: not a Hydra record")
    return redacted(config), record / "config.yaml"
