"""SLEA-RL entry point: ``python -m recipe.forge.main_forge [hydra overrides]``.

The config (recipe/forge/config/forge_trainer.yaml, which extends verl's ppo_trainer) is validated first,
before any environment or model is touched; then ``trainer.engine`` picks where training runs:

* ``local`` (default): the embedded single-process trainer (recipe/forge/engines/local), CPU or one GPU;
* ``api``: prompt-only mode, no gradient updates, against an OpenAI-compatible chat endpoint;
* ``verl``: verl 0.9.1 on Ray (recipe/forge/engines/verl).

Without overrides it trains with the paper's defaults; the README's main job (``make demo``) adds
the preset ``+experiment=main_job``: SLEA-RL training of SmolLM2-135M-Instruct on Gym Cards NumberLine on a CPU.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from recipe.forge.commands import silence_irrelevant_verl_warnings
from recipe.forge.run_config import CONFIG_DIR, verl_config_searchpath


def validate(cfg: DictConfig):
    """The typed run config (recipe/forge/run_config.py), or ConfigError naming the first bad key. The checks that
    need neither verl nor torch run first, so that a bad value is reported within seconds."""
    from recipe.forge.run_config import load_run_config

    return load_run_config(cfg)


def run(cfg: DictConfig, record: Path | None = None):
    """Validate, take the run folder (one run at a time, nothing in it a run did not write is replaced:
    recipe/forge/runs/run_folder.py), mark Hydra's ``record`` of the command as that of a started run
    (recipe/forge/runs/records.py), then train with the configured engine. Returns the local/api engines' metric
    history. A write the file system refuses (full disk, read-only folder), wherever it happens, ends the run
    with a RunFolderError naming the folder and the fault."""
    from recipe.forge.runs.records import mark_started
    from recipe.forge.runs.run_folder import own_run_folder
    from recipe.forge.runs.run_start import interrupted_line, start_run
    from recipe.forge.runs.write_faults import writing

    run_config = validate(cfg)
    folder = run_config.trainer.output_dir
    with own_run_folder(folder):  # before any model loads; each engine's trainer takes it again (a no-op here)
        with writing("the run's files", folder, redescribe=False):
            if record is not None:
                mark_started(record)
            plan = start_run(run_config)  # fresh, resumed or complete, said before any model loads
            if plan.complete:
                return []
            try:
                return train(run_config, plan)
            except KeyboardInterrupt:
                raise RunInterrupted(interrupted_line(folder, sys.argv)) from None


class RunInterrupted(Exception):
    """Ctrl-C ended the run; the message says what was saved and the command that continues it."""


def train(run_config, plan=None):
    """Train a checked run config (:func:`validate`) with its engine from ``plan`` (run_start.start_run; None: the
    engine decides); the caller holds the run folder."""
    if run_config.engine == "verl":
        from recipe.forge.engines.verl.main import run_verl

        return run_verl(run_config, plan)
    if run_config.engine == "api":
        from recipe.forge.engines.api.runner import PromptOnlyRunner

        return PromptOnlyRunner(run_config).fit(plan)
    from recipe.forge.engines.local.trainer import LocalTrainer

    return LocalTrainer(run_config).fit(plan)


@hydra.main(config_path=CONFIG_DIR, config_name="forge_trainer", version_base=None)
def _hydra_main(cfg: DictConfig) -> None:
    from agent_system.config_checks import ConfigError

    from recipe.forge.runs.durable import CheckpointError
    from recipe.forge.engines.api.retry import EndpointError
    from recipe.forge.engines.verl.worker_faults import EXIT_CODE, WorkerDiedError
    from recipe.forge.runs.console import log_to_run_files, say
    from recipe.forge.runs.records import discard
    from recipe.forge.runs.write_faults import RunFolderError

    log_to_run_files()
    hydra_run = HydraConfig.get()
    record = Path(hydra_run.runtime.output_dir)  # Hydra's record of this command, written before any check
    try:
        run(cfg, record)
    except RunInterrupted as exc:
        say(str(exc), stream=sys.stderr)
        sys.exit(130)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        sys.exit(2)
    except CheckpointError as exc:
        print(f"checkpoint error: {exc}", file=sys.stderr)
        sys.exit(2)
    except EndpointError as exc:  # the prompt-only engine's endpoint stayed unusable; what it had is saved
        print(f"endpoint error: {exc}", file=sys.stderr)
        sys.exit(2)
    except RunFolderError as exc:
        print(f"run folder error: {exc}", file=sys.stderr)
        sys.exit(2)
    except WorkerDiedError as exc:  # the verl engine's Ray process died; the last complete checkpoint stays
        print(f"worker died: {exc}; resume from the last complete checkpoint with trainer.resume_mode=auto",
              file=sys.stderr)
        sys.exit(EXIT_CODE)
    finally:
        discard(record, hydra_run.job.name)  # a refused command's record: never taken for the run's config


SUBCOMMANDS = {"eval": "recipe.forge.commands.eval.evaluate", "export": "recipe.forge.commands.export"}


def main() -> None:
    """``slea-rl [hydra overrides]`` trains; ``slea-rl eval ...`` and ``slea-rl export ...`` run those commands. No
    command unpickles code from a torch file (recipe/forge/runs/torch_files.py)."""
    from recipe.forge.runs.torch_files import restrict_torch_loads

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    restrict_torch_loads()
    silence_irrelevant_verl_warnings()
    if len(sys.argv) > 1 and sys.argv[1] in SUBCOMMANDS:
        import importlib

        sys.exit(importlib.import_module(SUBCOMMANDS[sys.argv[1]]).main(sys.argv[2:]))
    if not any(arg.startswith("hydra.searchpath=") for arg in sys.argv[1:]):
        # first, not last: Hydra's parser takes the overrides as one run of words, so one after the options of a
        # command such as `run_script.sh --cfg job` would be refused
        sys.argv.insert(1, f"hydra.searchpath=[{verl_config_searchpath()}]")
    _hydra_main()


if __name__ == "__main__":
    main()
