"""``slea-rl export CHECKPOINT --out FOLDER [--force] [--base-model PATH]``: write the export folder atomically.

The folder is assembled under a temporary name next to ``FOLDER`` and renamed once complete, so ``FOLDER`` is at
every moment absent, the previous export or the new one. An existing non-empty ``FOLDER`` is refused, and with
``--force`` only an earlier export (a folder holding this command's ``manifest.json``) is replaced; the
checkpoint's own folders (the checkpoint, the run folder, anything inside them) are never a target. The manifest
lists every file the export wrote with its size; ``--force`` replaces an earlier export only while it holds exactly
those, so a file a user added or changed there is never deleted.
Bad input (not a checkpoint, a damaged or incomplete one, a missing base model, an unusable target) is one
``error:`` line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

from agent_system.json_input import loads as read_json
from recipe.forge.runs.durable import fsync_folder, remove_orphans, temp_name
from recipe.forge.experience.store import FILENAME, CheckpointError, load_payload
from recipe.forge.experience.viewer import as_markdown, organise
from recipe.forge.runs.checkpoint_source import CheckpointSource, ExportError, inspect_checkpoint
from recipe.forge.commands.export.manifest import FORMAT, build_manifest, model_path_of
from recipe.forge.runs.records import RecordError, recorded_config
from recipe.forge.runs.policy_weights import adapter_base, write_policy
from recipe.forge.safe_text import terminal_text
from recipe.forge.runs.torch_files import weights_only_loads
from recipe.forge.runs.write_faults import RunFolderError, writing

MANIFEST = "manifest.json"


def written_files(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` but the manifest: relative path -> size in bytes (what an export lists)."""
    return {path.relative_to(folder).as_posix(): path.stat().st_size for path in sorted(folder.rglob("*"))
            if path.is_file() and path.relative_to(folder).as_posix() != MANIFEST}


def not_written_by_export(folder: Path) -> str | None:
    """Why ``folder`` is not exactly an earlier export (its manifest missing or foreign, a file the manifest does
    not list or of another size, a link or folder of the user's), or None."""
    try:
        manifest = read_json((folder / MANIFEST).read_bytes(), MANIFEST)
    except (OSError, ValueError):
        return f"no {MANIFEST} of slea-rl export"
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return f"its {MANIFEST} is not one of slea-rl export"
    listed = manifest.get("files")
    if not isinstance(listed, dict):
        return f"its {MANIFEST} lists no files (an export of an older version: remove it yourself)"
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if path.is_symlink() or not (path.is_dir() or path.is_file()):
            return f"{name} is not a file the export wrote"
        if path.is_file() and name != MANIFEST and listed.get(name) != path.stat().st_size:
            return f"{name} was {'changed' if name in listed else 'added'} after the export"
        if path.is_dir() and not any(key.startswith(f"{name}/") for key in listed):
            return f"{name}/ is not a folder the export wrote"
    return None


def check_target(out: Path, source: CheckpointSource, force: bool) -> None:
    """ExportError unless ``out`` may receive the export (see the module docstring)."""
    if source.path.is_relative_to(out) or out.is_relative_to(source.path):
        raise ExportError(f"--out {out} would replace or write into the checkpoint {source.path} (or a folder "
                          "holding it): choose a folder outside it")
    if out.is_relative_to(source.run):
        raise ExportError(f"--out {out} is inside the run folder {source.run}, which its run owns (checkpoints "
                          "are pruned and replaced there): choose a folder outside it")
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise ExportError(f"--out {out} exists and is not empty; --force replaces an earlier export")
        why = not_written_by_export(out)
        if why is not None:
            raise ExportError(f"--out {out} is not an earlier export as it was written ({why}); --force replaces "
                              "only those, so nothing of yours is deleted: choose another folder")


def base_model_candidates(source: CheckpointSource, given: str | None, config: dict | None) -> list[tuple[str, str]]:
    """Where a LoRA adapter's base model may be, in order: --base-model, the adapter's record, the run config."""
    if not source.lora:
        return []
    candidates = [(given, "--base-model")] if given else []
    recorded = adapter_base(source.policy)
    if recorded:
        candidates.append((recorded, "the adapter's base_model_name_or_path"))
    configured = model_path_of(config)
    if configured:
        candidates.append((configured, "actor_rollout_ref.model.path of the run's Hydra record"))
    return candidates


def _write_library(payload: dict[str, Any], library: Path, staging: Path) -> None:
    view = organise(payload)
    (staging / "library.json").write_text(json.dumps(view, indent=2, ensure_ascii=False), encoding="utf-8")
    (staging / "library.md").write_text(as_markdown(view), encoding="utf-8")
    (staging / "library").mkdir()
    shutil.copyfile(library / FILENAME, staging / "library" / FILENAME)


def _usual_modes(folder: Path) -> None:
    """Give every file under ``folder`` the mode a new file gets here (0o666 less the umask): safetensors writes the
    weights 0600 (through a private temporary file), which another user sharing the model could not read."""
    umask = os.umask(0)
    os.umask(umask)
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            path.chmod(0o666 & ~umask)


def _replace(staging: Path, out: Path) -> None:
    old = out.parent / temp_name(out.name) if out.exists() else None
    if old is not None:
        os.rename(out, old)
    os.rename(staging, out)
    fsync_folder(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def export_checkpoint(checkpoint: str | Path, out: str | Path, *, force: bool = False,
                      base_model: str | None = None) -> dict[str, Any]:
    """Export ``checkpoint`` into the folder ``out`` (package docstring); returns the manifest. Raises
    ExportError / CheckpointError for bad input, RunFolderError when the folder cannot be written."""
    source = inspect_checkpoint(checkpoint)
    payload = load_payload(source.library) if source.library is not None else None
    try:
        config, config_source = recorded_config(source.run)
    except RecordError as exc:  # the export does not need it: said, and left out of the manifest
        warnings.warn(f"{exc}; the manifest has no config")
        config, config_source = None, None
    out = Path(out).expanduser().resolve()
    check_target(out, source, force)
    candidates = base_model_candidates(source, base_model, config)
    with writing("the export", out):
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_orphans(out.parent, out.name)
        staging = out.parent / temp_name(out.name)
        staging.mkdir()
        try:
            policy = write_policy(source, staging, candidates) if source.policy is not None else None
            if payload is not None:
                _write_library(payload, source.library, staging)
            manifest = build_manifest(source, policy, payload, config, config_source)
            manifest["files"] = written_files(staging)
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False), encoding="utf-8")
            _usual_modes(staging)
            _replace(staging, out)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return manifest


def summary(manifest: dict[str, Any], out: Path) -> str:
    policy = manifest["policy"]
    model = ("no policy (prompt-only)" if policy is None
             else f"model ({policy['kind']}, {policy['dtype']}) and tokenizer")
    library = manifest["library"]
    held = "no library" if library is None else f"library ({library['entries']} entries)"
    taken = []  # what came from the run's Hydra record, said aloud
    if policy is not None and policy.get("base_model_from", "").endswith("Hydra record"):
        taken.append(f"the LoRA base model {policy['base_model']}")
    if manifest["config"] is not None:
        taken.append("the run config in the manifest (as written: nothing resolved, credentials redacted)")
    record = f"; from {manifest['config_source']}: {' and '.join(taken)}" if taken else ""
    return terminal_text(f"exported {manifest['checkpoint']} ({manifest['engine']} engine, iteration "
                         f"{manifest['iteration']}) to {out}: {model}, {held}, {MANIFEST}{record}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="slea-rl export", description="a checkpoint of any engine as one folder: a "
                                "plain Hugging Face model, its tokenizer, the library as JSON and Markdown, a manifest")
    p.add_argument("checkpoint", help="a checkpoint folder, <run>/global_step_<k> (embedded, prompt-only or verl "
                                      "engine)")
    p.add_argument("--out", required=True, type=Path, help="the export folder to write")
    p.add_argument("--force", action="store_true", help="replace an earlier export in --out")
    p.add_argument("--base-model", help="the base model of a LoRA checkpoint (default: the one the adapter records, "
                                        "then actor_rollout_ref.model.path of the run's Hydra record)")
    return p


def main(argv: list[str] | None = None) -> int:
    from recipe.forge.commands import silence_irrelevant_verl_warnings

    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    silence_irrelevant_verl_warnings()  # what importing verl says about back-ends no export uses
    try:
        with weights_only_loads():  # no torch file of the checkpoint or model runs code (torch_files.py)
            manifest = export_checkpoint(args.checkpoint, args.out, force=args.force, base_model=args.base_model)
    except (ExportError, CheckpointError, RunFolderError) as exc:
        print(f"error: {terminal_text(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write the export to {terminal_text(args.out)}: {terminal_text(exc)}", file=sys.stderr)
        return 2
    print(summary(manifest, Path(args.out)))
    return 0
