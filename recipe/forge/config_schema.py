"""Typed schema of SLEA-RL's own config keys and the start-up validation of a whole run config.

``algorithm`` is instantiated as :class:`ForgeAlgoConfig`, a subclass of verl's ``AlgoConfig`` that adds the
``forge`` and ``gigpo`` sections, so verl's trainer and ours read the same typed object. Every check raises
:class:`ConfigError` naming the key, the value and what is allowed, before any environment or model exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from verl.base_config import BaseConfig
from verl.trainer.config import AlgoConfig

from agent_system.config_checks import ConfigError, check_choice, check_int, check_range
from agent_system.multi_turn_rollout.injection import INJECTIONS
from recipe.forge.experience.render import LESSON_STYLES

ENGINES = ("local", "verl", "api")
ADVANTAGE_MODES = ("mean_norm", "mean_std_norm")
EPISODE_NORM_OVER = ("steps", "trajectories")
RETRIEVAL_MODES = ("observation", "task", "hybrid", "clustered")
DIVERGENCES = ("kl", "reverse_kl", "jsd")
EXTRACTORS = ("rule", "llm")
RESUME_MODES = ("disable", "auto", "resume_path")


@dataclass
class GiGPOConfig(BaseConfig):
    """GiGPO baseline: episode advantage over the task group + step advantage over identical anchors."""

    step_advantage_w: float = 1.0
    mode: str = "mean_norm"
    episode_norm_over: str = "steps"
    enable_similarity: bool = False
    similarity_thresh: float = 0.95

    def __post_init__(self):
        p = "algorithm.gigpo"
        check_range(f"{p}.step_advantage_w", self.step_advantage_w, 0.0)
        check_choice(f"{p}.mode", self.mode, ADVANTAGE_MODES)
        check_choice(f"{p}.episode_norm_over", self.episode_norm_over, EPISODE_NORM_OVER)
        check_range(f"{p}.similarity_thresh", self.similarity_thresh, 0.0, 1.0)


@dataclass
class ForgeConfig(BaseConfig):
    """SLEA-RL: every key of the seed with its default, plus the paper's constants (REFERENCE.md §1)."""

    use_step_rewards: bool = True
    step_advantage_w: float = 1.0
    mode: str = "mean_norm"
    episode_norm_over: str = "steps"
    enable_similarity: bool = False
    similarity_thresh: float = 0.95
    golden_capacity_per_level: int = 100
    warning_capacity_per_level: int = 50
    use_embeddings: bool = False
    embedding_model: str = "all-MiniLM-L6-v2"
    success_threshold: Optional[float] = 0.5  # None: the batch median
    retrieval_mode: str = "observation"
    enable_clustering: bool = True
    obs_similarity_threshold: float = 0.85
    max_clusters: int = 100_000
    top_k_golden: int = 2
    top_k_warning: int = 1
    max_experience_length: int = 800
    experience_style: str = "compact"
    lesson_style: str = "descriptive"
    injection: str = "system"
    divergence_type: str = "jsd"
    distill_temperature: float = 1.0
    max_distill_weight: float = 0.5
    use_distillation: bool = False
    library_save_freq: int = 10
    checkpoint_dir: str = "checkpoints/forge"
    warmup_iterations: int = 5
    min_library_size: int = 10
    top_k_trajectories: int = 5
    max_strategies_per_iter: int = 10
    max_warnings_per_iter: int = 5
    novelty_threshold: float = 0.85
    extractor: str = "rule"

    def __post_init__(self):
        p = "algorithm.forge"
        check_range(f"{p}.step_advantage_w", self.step_advantage_w, 0.0)
        check_choice(f"{p}.mode", self.mode, ADVANTAGE_MODES)
        check_choice(f"{p}.episode_norm_over", self.episode_norm_over, EPISODE_NORM_OVER)
        check_range(f"{p}.similarity_thresh", self.similarity_thresh, 0.0, 1.0)
        check_int(f"{p}.golden_capacity_per_level", self.golden_capacity_per_level, 0)
        check_int(f"{p}.warning_capacity_per_level", self.warning_capacity_per_level, 0)
        if self.success_threshold is not None:
            check_range(f"{p}.success_threshold", self.success_threshold)
        check_choice(f"{p}.retrieval_mode", self.retrieval_mode, RETRIEVAL_MODES)
        check_range(f"{p}.obs_similarity_threshold", self.obs_similarity_threshold, 0.0, 1.0)
        check_int(f"{p}.max_clusters", self.max_clusters, 1)
        check_int(f"{p}.top_k_golden", self.top_k_golden, 0, self.golden_capacity_per_level)
        check_int(f"{p}.top_k_warning", self.top_k_warning, 0, self.warning_capacity_per_level)
        check_int(f"{p}.max_experience_length", self.max_experience_length, 1)
        check_choice(f"{p}.experience_style", self.experience_style, ("compact", "verbose"))
        check_choice(f"{p}.lesson_style", self.lesson_style, LESSON_STYLES)
        check_choice(f"{p}.injection", self.injection, INJECTIONS)
        check_choice(f"{p}.divergence_type", self.divergence_type, DIVERGENCES)
        check_range(f"{p}.distill_temperature", self.distill_temperature, 0.0, low_inclusive=False)
        check_range(f"{p}.max_distill_weight", self.max_distill_weight, 0.0)
        check_int(f"{p}.library_save_freq", self.library_save_freq, 1)
        if not self.checkpoint_dir:
            raise ConfigError(f"{p}.checkpoint_dir must not be empty")
        check_int(f"{p}.warmup_iterations", self.warmup_iterations, 0)
        check_int(f"{p}.min_library_size", self.min_library_size, 0)
        check_int(f"{p}.top_k_trajectories", self.top_k_trajectories, 1)
        check_int(f"{p}.max_strategies_per_iter", self.max_strategies_per_iter, 0)
        check_int(f"{p}.max_warnings_per_iter", self.max_warnings_per_iter, 0)
        check_range(f"{p}.novelty_threshold", self.novelty_threshold, 0.0, 1.0)
        check_choice(f"{p}.extractor", self.extractor, EXTRACTORS)


@dataclass
class ForgeAlgoConfig(AlgoConfig):
    """verl's AlgoConfig plus the step-level estimators' sections and the invalid-action penalty."""

    invalid_action_penalty_coef: float = 0.1
    gigpo: GiGPOConfig = field(default_factory=GiGPOConfig)
    forge: ForgeConfig = field(default_factory=ForgeConfig)

    def __post_init__(self):
        super_post_init = getattr(super(), "__post_init__", None)
        if super_post_init is not None:
            super_post_init()
        check_range("algorithm.gamma", self.gamma, 0.0, 1.0)
        check_range("algorithm.lam", self.lam, 0.0, 1.0)
        check_range("algorithm.invalid_action_penalty_coef", self.invalid_action_penalty_coef, 0.0)


def known_adv_estimators() -> list[str]:
    """verl's registry (with our plugin's entries) plus the estimators verl's trainer handles inline."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, AdvantageEstimator

    from recipe.forge.core_forge import register_with_verl

    register_with_verl()
    return sorted(set(ADV_ESTIMATOR_REGISTRY) | {e.value for e in AdvantageEstimator})


def instantiate_algorithm(section: DictConfig | dict) -> ForgeAlgoConfig:
    """Build the typed ``algorithm`` section, naming any unknown or mistyped key."""
    from verl.utils.config import omega_conf_to_dataclass

    cfg = OmegaConf.create(OmegaConf.to_container(OmegaConf.create(section), resolve=True))
    cfg.pop("_target_", None)
    for sub, cls in (("forge", ForgeConfig), ("gigpo", GiGPOConfig)):
        if sub in cfg:
            _reject_unknown(cfg[sub], cls, f"algorithm.{sub}")
    try:
        return omega_conf_to_dataclass(cfg, ForgeAlgoConfig)
    except ConfigError:
        raise
    except Exception as exc:  # OmegaConf's type and key errors carry the full key
        raise ConfigError(f"invalid algorithm section: {exc}") from exc


def _reject_unknown(section: Any, cls: type, prefix: str) -> None:
    from dataclasses import fields

    known = {f.name for f in fields(cls)} - {"_target_"}
    unknown = sorted(set(section.keys()) - known - {"_target_"})
    if unknown:
        raise ConfigError(f"unknown key {prefix}.{unknown[0]}; known keys: {sorted(known)}")


@dataclass
class ValidatedConfig:
    """The typed sections SLEA-RL reads, produced by :func:`validate_config`."""

    engine: str
    algorithm: ForgeAlgoConfig
    env: Any  # agent_system.environments.config.EnvConfig


def validate_config(cfg: DictConfig) -> ValidatedConfig:
    """Validate a composed run config; raise ConfigError on the first fault, before any work starts."""
    from agent_system.environments.config import env_config_from_mapping
    from agent_system.environments.registry import known_env_names

    trainer = cfg.get("trainer", {}) or {}
    engine = trainer.get("engine", "local")
    check_choice("trainer.engine", engine, ENGINES)
    check_choice("trainer.resume_mode", trainer.get("resume_mode", "disable"), RESUME_MODES)
    for key in ("total_training_steps", "total_epochs"):
        if trainer.get(key) is not None:
            check_int(f"trainer.{key}", trainer.get(key), 1)
    for key in ("save_freq", "test_freq"):
        if trainer.get(key) is not None:
            check_int(f"trainer.{key}", trainer.get(key), -1)

    algorithm = instantiate_algorithm(cfg.get("algorithm", {}) or {})
    check_choice("algorithm.adv_estimator", algorithm.adv_estimator, known_adv_estimators())

    env_section = OmegaConf.to_container(cfg.env, resolve=True) if "env" in cfg else {}
    env = env_config_from_mapping(env_section)
    env.validate(known_env_names())

    data = cfg.get("data", {}) or {}
    for key in ("train_batch_size", "val_batch_size"):
        if data.get(key) is not None:
            check_int(f"data.{key}", data.get(key), 1)
    return ValidatedConfig(engine=engine, algorithm=algorithm, env=env)
