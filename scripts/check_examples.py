#!/usr/bin/env python
"""Check every example script: compose its Hydra config with its overrides and validate it.

For each ``*.sh`` under examples/ (or the paths given), every ``-m recipe.forge.main_forge`` command is
extracted statically (no script is executed): line continuations are joined, the script's own variable
assignments (``NAME=value``, ``NAME=${NAME:-default}``, ``export NAME=...``) are expanded with their defaults
(the caller's environment is ignored, so the check is deterministic; a caller of ``extract_commands`` may
pass the variables a command line sets before the script, ``N_GPUS=1 bash ...``), bash arrays (``NAME=( ... )``, used
as ``"${NAME[@]}"``) are expanded element by element, files the script sources (``source`` / ``.``, with
``$(dirname "$0")`` or ``$(dirname "${BASH_SOURCE[0]}")`` as the script's folder) are read in place, and the
command is split like a shell would. The overrides are then

1. composed with Hydra against recipe/forge/config (a typo in a key fails here: verl's config is strict);
2. validated with recipe.forge.run_config.load_run_config (SLEA-RL's keys and values, typed);
3. for ``trainer.engine=verl``, checked by verl's own ``validate_config`` (batch sizes against GPUs, micro
   batches, ...) after the same wiring and batch-size derivation run_verl applies, and its typed actor and rollout sections are
   instantiated (bad enum values fail here), the critic's batch settings included (the model files are
   left to the run). Without vLLM installed, a LoRA rank is checked against vLLM's allowed values instead of
   through verl's vLLM import.

Scripts with no training command (helpers such as retriever launchers) are listed as skipped. Exit status 1
on any failure; the last line printed is a one-line summary.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO / "recipe" / "forge" / "config"
ENTRY = "recipe.forge.main_forge"
_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_COMMAND_SUBSTITUTION = re.compile(r"\$\([^()]*\)")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_ARRAY_START = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=\((.*)$")
_ARRAY_USE = re.compile(r'"?\$\{([A-Za-z_][A-Za-z0-9_]*)\[@\]\}"?')
_SOURCE = re.compile(r"^(?:source|\.)\s+([^=\s].*)$")
_HEREDOC = re.compile(r"<<-?\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?")
_SCRIPT_DIR = re.compile(r'\$\(\s*dirname\s+"?\$(?:0|\{0\}|\{BASH_SOURCE\[0\]\}|BASH_SOURCE)"?\s*\)')
_MAX_SOURCE_DEPTH = 8


@dataclass
class Command:
    script: Path
    line: int
    overrides: list[str]
    config_name: str = "forge_trainer"


@dataclass
class Report:
    checked: int = 0
    failures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def expand(text: str, variables: dict[str, str]) -> str:
    """Expand ``${V}``, ``${V:-default}`` and ``$V`` with the script's variables (unknown: default or ""), and
    ``$(command)`` to the placeholder "command-output"."""

    def repl(match: re.Match) -> str:
        name = match.group(1) or match.group(3)
        if name in variables and variables[name] != "":
            return variables[name]
        default = match.group(2)
        return expand(default, variables) if default is not None else ""

    # a command substitution's output is unknown statically: a fixed placeholder keeps the value parseable
    return _VAR.sub(repl, _COMMAND_SUBSTITUTION.sub("command-output", text))


def logical_lines(source: str) -> list[tuple[int, str]]:
    """Join backslash continuations and the lines of a multi-line array assignment (``NAME=(`` up to the
    line that ends with ``)``), drop comments and the bodies of here-documents (``<<'PY'`` ... ``PY``: text for
    another program, not shell); returns (first line number, text)."""
    lines: list[tuple[int, str]] = []
    buffer, start, in_array = "", 0, False
    heredoc_end: str | None = None
    for number, raw in enumerate(source.splitlines(), start=1):
        stripped = raw.strip()
        if heredoc_end is not None:
            if stripped == heredoc_end:
                heredoc_end = None
            continue
        heredoc = _HEREDOC.search(raw)
        if heredoc:
            heredoc_end = heredoc.group(1)
        if not buffer and (not stripped or stripped.startswith("#")):
            continue
        if buffer and (stripped.startswith("#") or (in_array and not stripped)):
            continue
        if not buffer:
            start = number
            in_array = bool(_ARRAY_START.match(stripped)) and not stripped.endswith(")")
        if stripped.endswith("\\"):
            buffer += stripped[:-1] + " "
            continue
        if in_array and not stripped.endswith(")"):
            buffer += stripped + " "
            continue
        lines.append((start, buffer + stripped))
        buffer, in_array = "", False
    if buffer:
        lines.append((start, buffer))
    return lines


def expand_arrays(text: str, arrays: dict[str, list[str]]) -> str:
    """Replace each ``"${NAME[@]}"`` with the array's elements, each quoted as one shell word."""

    def repl(match: re.Match) -> str:
        name = match.group(1)
        if name not in arrays:
            raise ValueError(f"array ${{{name}[@]}} is used but never assigned")
        return shlex.join(arrays[name])

    return _ARRAY_USE.sub(repl, text)


def extract_commands(script: Path, environment: dict[str, str] | None = None) -> list[Command]:
    """Every main_forge command of a script, with the script's variables and arrays expanded and the files
    it sources read in place. ``environment``: the variables the caller sets for the script (``N_GPUS=1 bash
    script.sh``), which its ``${NAME:-default}`` take instead of their defaults; nothing else of the caller's
    environment is read."""
    commands: list[Command] = []
    _scan(script, dict(environment or {}), {}, commands, depth=0)
    return commands


def _scan(script: Path, variables: dict[str, str], arrays: dict[str, list[str]], commands: list[Command], depth: int) -> None:
    """Read one script (or a file it sources) into ``variables`` / ``arrays`` and append its commands."""
    for number, line in logical_lines(script.read_text()):
        source = _SOURCE.match(line)
        if source:
            _scan(_sourced_path(script, number, source.group(1), variables, depth), variables, arrays, commands, depth + 1)
            continue
        array = _ARRAY_START.match(line)
        if array and ENTRY not in line:
            body = array.group(2).rstrip()
            if not body.endswith(")"):
                raise ValueError(f"{script}:{number}: array {array.group(1)} is not closed with ')'")
            arrays[array.group(1)] = shlex.split(expand(expand_arrays(body[:-1], arrays), variables), posix=True)
            continue
        assign = _ASSIGN.match(line)
        if assign and ENTRY not in line:
            value = shlex.split(expand(assign.group(2), variables) or "''", posix=True)
            variables[assign.group(1)] = value[0] if value else ""
            continue
        if ENTRY not in line:
            continue
        text = expand_arrays(line.replace('"$@"', "").replace("$@", ""), arrays)
        tokens = shlex.split(expand(text, variables), posix=True)
        rest = tokens[tokens.index(ENTRY) + 1 :]
        config_name, overrides = "forge_trainer", []
        i = 0
        while i < len(rest):
            token = rest[i]
            if token == "--config-name":
                config_name, i = rest[i + 1], i + 2
                continue
            if token.startswith("--config-name="):
                config_name = token.split("=", 1)[1]
            elif token in ("&&", "||", ";", "|") or token.startswith(("2>", ">", "&")):
                break
            elif token.startswith("-"):
                raise ValueError(f"{script}:{number}: unsupported command-line flag {token!r}")
            else:
                overrides.append(token)
            i += 1
        commands.append(Command(script=script, line=number, overrides=overrides, config_name=config_name))


def _sourced_path(script: Path, number: int, argument: str, variables: dict[str, str], depth: int) -> Path:
    """The file a ``source`` line reads: ``$(dirname "$0")`` is the script's folder, relative paths are taken
    from it too (the examples source their helpers relative to themselves)."""
    if depth >= _MAX_SOURCE_DEPTH:
        raise ValueError(f"{script}:{number}: sources nested deeper than {_MAX_SOURCE_DEPTH} files")
    words = shlex.split(expand(_SCRIPT_DIR.sub(str(script.parent), argument), variables), posix=True)
    if not words:
        raise ValueError(f"{script}:{number}: source without a file")
    path = Path(words[0])
    path = path if path.is_absolute() else script.parent / path
    if not path.is_file():
        raise ValueError(f"{script}:{number}: sourced file {words[0]!r} not found (resolved to {path})")
    return path.resolve()


def compose(command: Command):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return hydra_compose(config_name=command.config_name, overrides=command.overrides)


def check_verl_side(cfg) -> None:
    """verl's own start-up checks on the config run_verl would hand it (without writing task files); a script that
    sets ``trainer.device=cpu`` is checked with the CPU backend's settings, any other as for a GPU cluster."""
    from omegaconf import OmegaConf, open_dict
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.config import validate_config as verl_validate_config

    from recipe.forge.engines.verl.agent_loop import AGENT_NAME
    from recipe.forge.engines.verl.batch_layout import derive_batch_sizes
    from recipe.forge.engines.verl.cpu.settings import apply_cpu_settings

    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    derive_batch_sizes(cfg, int(cfg.data.train_batch_size), int(cfg.env.rollout.n))  # as run_verl derives them
    if str(cfg.trainer.get("device")) == "cpu":  # a script for verl's CPU backend: the settings run_verl applies
        apply_cpu_settings(cfg)
    with open_dict(cfg):
        cfg.actor_rollout_ref.rollout.agent.default_agent_loop = AGENT_NAME
        cfg.actor_rollout_ref.rollout.n = int(cfg.env.rollout.n)
    use_critic = need_critic(cfg)
    # verl's validate_config builds the critic's model config, which reads the model files; the critic's own
    # batch checks run below on its section without the model
    check_lora_rank_without_vllm(cfg)
    verl_validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=False)
    omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    if use_critic:
        critic = OmegaConf.create(OmegaConf.to_container(cfg.critic, resolve=True))
        with open_dict(critic):
            critic.model = None
        n_gpus = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
        omega_conf_to_dataclass(critic).validate(n_gpus, int(cfg.data.train_batch_size))


# vLLM's allowed max_lora_rank values, the fallback verl itself uses (verl.workers.rollout.vllm_rollout.utils)
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def check_lora_rank_without_vllm(cfg) -> None:
    """verl checks a LoRA rank against vLLM by importing its vLLM rollout, which needs vLLM installed. Where it is
    not (CPU machines), check the rank against vLLM's allowed values here and leave verl's check out."""
    import importlib.util

    from omegaconf import open_dict

    model = cfg.actor_rollout_ref.model
    rank = int(model.get("lora_rank", 0) or 0)
    if rank <= 0 or cfg.actor_rollout_ref.rollout.name != "vllm" or importlib.util.find_spec("vllm") is not None:
        return
    if rank > max(VLLM_LORA_RANKS):
        raise ValueError(f"actor_rollout_ref.model.lora_rank={rank} exceeds vLLM's maximum {max(VLLM_LORA_RANKS)}")
    with open_dict(cfg):
        model.lora_rank = 0  # the rest of verl's checks still run


def check_command(command: Command) -> None:
    from recipe.forge.run_config import load_run_config

    cfg = compose(command)
    validated = load_run_config(cfg)
    if validated.engine == "verl":
        check_verl_side(cfg)


def example_scripts(paths: list[str]) -> list[Path]:
    if paths:
        return [Path(p).resolve() for p in paths]
    return sorted((REPO / "examples").rglob("*.sh"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="scripts to check (default: every examples/**/*.sh)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print failures and the summary only")
    args = parser.parse_args(argv)
    os.environ.setdefault("VERL_LOGGING_LEVEL", "ERROR")

    report = Report()
    scripts = example_scripts(args.paths)
    for script in scripts:
        name = os.path.relpath(script, REPO)
        try:
            commands = extract_commands(script)
        except (ValueError, OSError) as exc:
            report.failures.append(f"{name}: {exc}")
            print(f"FAIL {name}: {exc}")
            continue
        if not commands:
            report.skipped.append(name)
            if not args.quiet:
                print(f"skip {name}: no {ENTRY} command")
            continue
        for command in commands:
            report.checked += 1
            where = f"{name}:{command.line}"
            try:
                check_command(command)
            except Exception as exc:  # every fault is reported, then the next command is checked
                message = " ".join(str(exc).split())
                report.failures.append(f"{where}: {type(exc).__name__}: {message}")
                print(f"FAIL {where}: {type(exc).__name__}: {message}")
                continue
            if not args.quiet:
                print(f"ok   {where} ({len(command.overrides)} overrides)")
    if report.checked == 0:
        report.failures.append(f"no {ENTRY} command found in {len(scripts)} scripts")
        print(f"FAIL {report.failures[-1]}")
    status = "FAILED" if report.failures else "OK"
    print(
        f"check_examples {status}: {len(scripts)} scripts, {report.checked} commands checked, "
        f"{len(report.failures)} failed, {len(report.skipped)} skipped"
    )
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
