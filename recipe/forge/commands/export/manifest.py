"""``manifest.json`` of an export: where the checkpoint came from and what it is.

* ``checkpoint``, ``engine`` (``local``, ``verl`` or ``api``), ``iteration``;
* ``policy``: how the model folder was made (full weights, a LoRA adapter merged, verl's merger; the dtype), or
  null for a prompt-only checkpoint, with ``note`` saying so;
* ``library``: its iteration, version (evolutions) and entries per zone, or null without a library;
* ``config`` and ``config_source``: the composed config of the newest Hydra record of a started run in the run
  folder (``<run>/hydra/<time>/.hydra/config.yaml``, recipe/forge/runs/records.py), as written: interpolations
  such as ``${oc.env:NAME}`` are never resolved, credential values and URL user info are redacted; null for a
  run started from Python or a record that cannot be read within bounds (with a warning);
* ``evaluation``: the figures of ``<run>/eval/global_step_<k>/`` when that checkpoint was evaluated
  (``metrics.jsonl`` of ``trainer.val_only``, ``evaluation.json`` of ``slea-rl eval``), else null;
* ``packages``: the versions of slea-rl, torch, transformers, peft and verl;
* ``files``: every other file of the export with its size (what ``--force`` may replace; cli.py).
"""

from __future__ import annotations

import warnings
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from agent_system.json_input import loads as read_json
from recipe.forge.runs.checkpoint_source import CheckpointSource

FORMAT = "slea-rl-export"
PACKAGES = ("slea-rl", "torch", "transformers", "peft", "verl")
PROMPT_ONLY = ("prompt-only checkpoint (trainer.engine=api): it trains no weights, so the export holds the library "
               "and this manifest only")


def package_versions() -> dict[str, str | None]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def model_path_of(config: dict[str, Any] | None) -> str | None:
    """``actor_rollout_ref.model.path`` of a recorded config, or None (also for an interpolation: a record never
    supplies an environment value)."""
    try:
        path = config["actor_rollout_ref"]["model"]["path"]
    except (TypeError, KeyError):
        return None
    return path if isinstance(path, str) and path and "${" not in path else None


def _jsonl(path: Path) -> list[dict[str, Any]]:
    lines = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        try:
            record = read_json(line, f"{path}:{number}")
        except ValueError:
            warnings.warn(f"{path}:{number} is not a JSON line; left out of the manifest")
            continue
        if isinstance(record, dict):
            lines.append(record)
    return lines


def evaluation_figures(source: CheckpointSource) -> dict[str, Any] | None:
    """What ``<run>/eval/global_step_<k>/`` holds of this checkpoint's evaluations, or None."""
    folder = source.run / "eval" / f"global_step_{source.iteration}"
    figures: dict[str, Any] = {}
    if (folder / "metrics.jsonl").is_file():
        figures["val_only"] = _jsonl(folder / "metrics.jsonl")
    if (folder / "evaluation.json").is_file():
        try:
            figures["evaluation"] = read_json((folder / "evaluation.json").read_bytes(), "evaluation.json")
        except ValueError:
            warnings.warn(f"{folder / 'evaluation.json'} is not valid JSON; left out of the manifest")
    return {"source": str(folder), **figures} if figures else None


def library_summary(payload: dict[str, Any] | None) -> dict[str, Any] | None:
    if payload is None:
        return None
    entries = payload["library"]["entries"]
    return {"iteration": payload["iteration"], "version": payload["version"], "entries": len(entries),
            "golden": sum(1 for e in entries if e["zone"] == "golden"),
            "warning": sum(1 for e in entries if e["zone"] == "warning")}


def build_manifest(source: CheckpointSource, policy: dict[str, Any] | None, payload: dict[str, Any] | None,
                   config: dict[str, Any] | None, config_source: Path | None) -> dict[str, Any]:
    """The manifest (module docstring) of ``source`` exported with the ``policy`` section and library ``payload``."""
    manifest = {
        "format": FORMAT,
        "format_version": 1,
        "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "checkpoint": str(source.path),
        "engine": source.engine,
        "iteration": source.iteration,
        "policy": policy,
        "library": library_summary(payload),
        "evaluation": evaluation_figures(source),
        "config": config,
        "config_source": None if config_source is None else str(config_source),
        "packages": package_versions(),
    }
    if policy is None:
        manifest["note"] = PROMPT_ONLY
    return manifest
