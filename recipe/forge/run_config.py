"""The run config, checked and typed once: ``load_run_config(cfg) -> RunConfig``.

Hydra composes recipe/forge/config/forge_trainer.yaml (verl's ppo_trainer plus SLEA-RL's keys); main_forge hands
the composed config to :func:`load_run_config`, and from there on the engines and the prompt-only runner read
typed sections, never the composed config. Each key is read once, by :class:`~recipe.forge.config_reader.
ConfigReader`. The checks that need neither verl nor torch run first, so a bad value is named within seconds;
verl's typed objects (the ``algorithm`` section, the embedded engine's actor, critic optimizer and
``filter_groups``) are built after. Every fault is a ConfigError naming the key, the value and what is allowed.

Sections by engine: every engine has ``algorithm``, ``env``, ``data``, ``trainer`` and ``composed``; the embedded
and the prompt-only engines also ``rollout`` and ``local``; the embedded engine ``policy``; the prompt-only
engine ``api``; the distributed engine ``verl``. verl's trainer reads its own keys from ``composed`` (recipe/forge/engines/verl/main.py).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agent_system.config_checks import ConfigError, check_choice
from agent_system.multi_turn_rollout.protocols import ACTION_STOP, SamplingParams
from recipe.forge.config_reader import ConfigReader
from recipe.forge.runs.run_folder import check_run_paths
from recipe.forge.runs.run_length import total_iterations

LOGGERS = ("console", "jsonl", "tensorboard", "wandb")
RESUME_MODES = ("disable", "auto", "resume_path")
ROLLOUT = "actor_rollout_ref.rollout"
MODEL_PATH = "actor_rollout_ref.model.path"
CONFIG_DIR = str(Path(__file__).resolve().parent / "config")


@dataclass(frozen=True)
class DataSection:
    """``data``: tasks per iteration and per validation pass (each run as ``env.rollout.n`` copies)."""

    train_batch_size: int
    val_batch_size: int | None  # None (verl's default): as many as train_batch_size, on the verl engine only


@dataclass(frozen=True)
class TrainerSection:
    """``trainer.*``: the run's length, schedule, resumption, output folder and loggers."""

    total_iterations: int  # trainer.total_training_steps, else total_epochs x iterations per epoch (verl's rule)
    save_freq: int
    test_freq: int
    val_before_train: bool
    val_only: bool
    resume_mode: str
    resume_from_path: str | None
    output_dir: str  # trainer.default_local_dir
    rollout_data_dir: str | None  # training steps as JSONL per iteration (rollout_dump.py); None = off
    loggers: tuple[str, ...]
    project_name: str
    experiment_name: str
    max_ckpt_to_keep: int | None = None  # trainer.max_actor_ckpt_to_keep (None: keep all; verl applies its own)


@dataclass(frozen=True)
class RolloutSection:
    """``actor_rollout_ref.rollout.*``: how training and validation responses are decoded."""

    temperature: float
    top_p: float
    top_k: int  # -1 (and 0): no top-k filter
    response_length: int  # max new tokens per step
    prompt_length: int  # max prompt tokens per step: experiences give way first (agent_system/.../prompt_fit.py)
    val_temperature: float  # val_kwargs.temperature; 0 = greedy
    val_top_p: float
    val_top_k: int
    val_copies: int  # val_kwargs.n: copies per held-out task (default env.rollout.n, as in training)

    def sampling(self, validation: bool = False) -> SamplingParams:
        """The decoding of a training (or validation) rollout step; it stops after ``</action>``."""
        if validation:
            return SamplingParams(temperature=self.val_temperature, top_p=self.val_top_p, top_k=self.val_top_k,
                                  max_new_tokens=self.response_length, stop=ACTION_STOP,
                                  do_sample=self.val_temperature > 0)
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                              max_new_tokens=self.response_length, stop=ACTION_STOP)


@dataclass(frozen=True)
class RunConfig:
    """A run config, typed (see the module docstring for which sections each engine has)."""

    engine: str  # local | api | verl
    algorithm: Any  # recipe.forge.config_schema.ForgeAlgoConfig (verl's AlgoConfig + forge, gigpo)
    env: Any  # agent_system.environments.config.EnvConfig
    data: DataSection
    trainer: TrainerSection
    composed: dict  # the composed config as written (interpolations kept): the run's record, verl's input
    rollout: RolloutSection | None = None
    local: Any = None  # recipe.forge.engines.local.settings.LocalSettings
    policy: Any = None  # recipe.forge.engines.local.settings.PolicySection (embedded engine)
    api: Any = None  # recipe.forge.engines.api.settings.ApiSettings (prompt-only engine)
    verl: Any = None  # recipe.forge.engines.verl.settings.VerlSettings (distributed engine)

    @property
    def group_size(self) -> int:
        """G: environment copies per task (``env.rollout.n``; verl's ``rollout.n`` on the verl engine)."""
        return self.env.rollout.n

    @property
    def seed(self) -> int:
        return self.env.seed


def read_data(reader: ConfigReader, engine: str) -> DataSection:
    return DataSection(train_batch_size=reader.integer("data.train_batch_size", 1),
                       val_batch_size=reader.integer("data.val_batch_size", 1, nullable=engine == "verl"))


def read_trainer(reader: ConfigReader, engine: str) -> TrainerSection:
    """On the verl engine, verl's trainer resumes from its own checkpoint layout, logs to its own backends and
    prunes its own checkpoints: those are left to verl there. The run folder's path is checked on every engine
    (recipe/forge/runs/run_folder.py)."""
    project_name, experiment_name = reader.get("trainer.project_name"), reader.get("trainer.experiment_name")
    output_dir = reader.text("trainer.default_local_dir")
    check_run_paths(project_name, experiment_name, output_dir)
    resume_mode = reader.choice("trainer.resume_mode", RESUME_MODES)
    resume_from_path = reader.get("trainer.resume_from_path")
    if resume_mode == "resume_path" and engine != "verl":
        check_resume_path(resume_from_path)
    loggers = reader.get("trainer.logger") if engine == "verl" else reader.names("trainer.logger", LOGGERS)
    steps = reader.integer("trainer.total_training_steps", 1, nullable=True)
    return TrainerSection(
        total_iterations=total_iterations(reader.integer("data.train_batch_size", 1), steps,
                                          reader.integer("trainer.total_epochs", 1)),
        save_freq=reader.integer("trainer.save_freq", -1),
        test_freq=reader.integer("trainer.test_freq", -1),
        val_before_train=reader.flag("trainer.val_before_train"),
        val_only=reader.flag("trainer.val_only"),
        resume_mode=resume_mode,
        resume_from_path=resume_from_path,
        output_dir=output_dir,
        rollout_data_dir=reader.text("trainer.rollout_data_dir", nullable=True),
        loggers=tuple([loggers] if isinstance(loggers, str) else loggers),
        project_name=str(project_name),
        experiment_name=str(experiment_name),
        max_ckpt_to_keep=None if engine == "verl" else reader.integer("trainer.max_actor_ckpt_to_keep", 1,
                                                                      nullable=True),
    )


def read_rollout(reader: ConfigReader) -> RolloutSection:
    return RolloutSection(
        temperature=reader.number(f"{ROLLOUT}.temperature", 0.0, low_inclusive=False),
        top_p=reader.number(f"{ROLLOUT}.top_p", 0.0, 1.0, low_inclusive=False),
        top_k=reader.integer(f"{ROLLOUT}.top_k", -1),
        response_length=reader.integer(f"{ROLLOUT}.response_length", 1),
        prompt_length=reader.integer(f"{ROLLOUT}.prompt_length", 1),
        val_temperature=reader.number(f"{ROLLOUT}.val_kwargs.temperature", 0.0),
        val_top_p=reader.number(f"{ROLLOUT}.val_kwargs.top_p", 0.0, 1.0, low_inclusive=False),
        val_top_k=reader.integer(f"{ROLLOUT}.val_kwargs.top_k", -1),
        val_copies=reader.integer(f"{ROLLOUT}.val_kwargs.n", 1),
    )


def check_resume_path(path: Any) -> None:
    """``trainer.resume_from_path`` must name a complete checkpoint folder (one holding trainer_state.json)."""
    key = "trainer.resume_from_path"
    if not path or not isinstance(path, str):
        raise ConfigError(f"trainer.resume_mode=resume_path needs {key} (a checkpoint folder), got {path!r}")
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"{key}={path!r} does not exist; allowed: a checkpoint folder such as "
                          "<trainer.default_local_dir>/global_step_<k>")
    if not (folder / "trainer_state.json").is_file():
        raise ConfigError(f"{key}={path!r} is not a complete checkpoint (it has no trainer_state.json)")


def check_run_config(cfg: DictConfig) -> tuple[str, Any, DataSection, dict[str, Any]]:
    """Every check of a composed run config that needs neither verl nor torch: SLEA-RL's sections, the environment
    and every key the chosen engine reads. Returns the engine, the typed environment, ``data`` and the engine's
    sections read so far (``policy`` still without verl's typed objects)."""
    from recipe.forge.config_rules import check_config_values, check_model_reads_images

    env = check_config_values(cfg)
    reader = ConfigReader(cfg)
    engine = reader.get("trainer.engine")
    sections: dict[str, Any] = {"trainer": read_trainer(reader, engine)}
    if engine in ("local", "api"):
        from recipe.forge.engines.local.settings import read_local

        sections.update(rollout=read_rollout(reader), local=read_local(reader))
    if engine == "local":
        from recipe.forge.engines.local.settings import read_policy_keys

        sections["policy"] = read_policy_keys(reader)
    if engine in ("local", "verl"):  # the prompt-only engine's endpoint model cannot be inspected from here
        check_model_reads_images(env, MODEL_PATH, reader.text(MODEL_PATH))
    if engine == "verl":
        from recipe.forge.engines.verl.settings import read_verl

        sections["verl"] = read_verl(reader)
    if engine == "api":
        from recipe.forge.engines.api.settings import read_api_settings

        sections["api"] = read_api_settings(reader)
    return engine, env, read_data(reader, engine), sections


def compose_config(overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """The shipped config (forge_trainer.yaml on verl's defaults) with Hydra ``overrides``, as the command line
    composes it, for callers outside ``@hydra.main`` (``slea-rl eval``, scripts)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="forge_trainer",
                       overrides=list(overrides) + [f"hydra.searchpath=[{verl_config_searchpath()}]"])


def verl_config_searchpath() -> str:
    """verl's config folder as a file:// search path, found without importing verl (the YAML's
    ``pkg://verl.trainer.config`` imports verl, which takes several seconds before any check can run)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return "pkg://verl.trainer.config"
    return "file://" + str(Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config")


def validate_algorithm(section: DictConfig | dict) -> Any:
    """The typed ``algorithm`` section (config_schema.ForgeAlgoConfig), its estimator one that verl's registry (with ours) knows; ConfigError
    naming the first bad key."""
    from recipe.forge.config_schema import instantiate_algorithm
    from recipe.forge.estimator_registry import known_adv_estimators

    algorithm = instantiate_algorithm(section)
    check_choice("algorithm.adv_estimator", algorithm.adv_estimator, known_adv_estimators())
    return algorithm


def load_run_config(cfg: DictConfig) -> RunConfig:
    """Check and type a composed run config for the engine it names; ConfigError on the first fault.

    :func:`check_run_config` first (no verl or torch import), then verl's typed objects and registries."""
    engine, env, data, sections = check_run_config(cfg)
    algorithm = validate_algorithm(cfg.get("algorithm", {}) or {})  # the slow imports (verl, torch) start here
    if engine == "local":
        from recipe.forge.engines.local.settings import build_policy_section

        sections["policy"] = build_policy_section(ConfigReader(cfg), sections["policy"], algorithm, env.rollout.n)
    run = RunConfig(engine=engine, algorithm=algorithm, env=env, data=data,
                    composed=OmegaConf.to_container(cfg, resolve=False), **sections)
    if engine == "verl":
        from recipe.forge.engines.verl.settings import check_verl_engine_config

        check_verl_engine_config(run)
    return run
