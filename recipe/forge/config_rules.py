"""SLEA-RL's own config sections as plain dataclasses with their checks, and the checks of a whole run config
that need neither verl nor torch.

main_forge runs :func:`check_config_values` first, right after Hydra composed the config, so that a bad value is
reported within seconds, before the slow imports and long before any model loads. config_schema.py builds
verl's typed objects (``ForgeConfig`` = :class:`ForgeValues` + verl's ``BaseConfig``) on the same checks.
Every check raises :class:`ConfigError` naming the key, the value and what is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from agent_system.config_checks import ConfigError, check_choice, check_int, check_range
from agent_system.multi_turn_rollout.injection import INJECTIONS
from recipe.forge.experience.bounds import MAX_KEY_CHARS, MAX_LESSON_CHARS, MIN_KEY_CHARS, MIN_LESSON_CHARS
from recipe.forge.experience.render import LESSON_STYLES

ENGINES = ("local", "verl", "api")
ADVANTAGE_MODES = ("mean_norm", "mean_std_norm")
EPISODE_NORM_OVER = ("steps", "trajectories")
# step groups: one state (forge: its cluster, the paper's; gigpo: its anchor, GiGPO's), one state at one turn, or a
# trajectory's first visit to a state only (recipe/forge/step_samples.py step_group_keys)
FORGE_STEP_GROUPS = ("cluster", "cluster_and_turn", "first_visit")
GIGPO_STEP_GROUPS = ("anchor", "anchor_and_turn", "first_visit")
# step values: the discounted return from the step on (the paper's, GiGPO's), or the reward plus the next state's
# mean / best value over the task group's steps (recipe/forge/step_samples.py step_values)
STEP_VALUES = ("return", "next_state", "best_next_state")
# step states: what the observation shows (the paper's, GiGPO's), or that and what the environment says it leaves out
# (its hidden_state; recipe/forge/step_samples.py with_hidden_state, which reads this tuple too)
STEP_STATES = ("observation", "environment")
RETRIEVAL_MODES = ("observation", "task", "hybrid", "clustered")
DIVERGENCES = ("kl", "reverse_kl", "jsd")
EXTRACTORS = ("rule", "llm", "oracle")  # oracle: expert-action lessons, the ceiling (measurement only)
LESSON_CREDITS = ("outcome", "step")  # state lessons credited by episode outcome (the paper) or by step return


@dataclass
class GiGPOValues:
    """GiGPO baseline: episode advantage over the task group + step advantage over identical anchors."""

    step_advantage_w: float = 1.0
    mode: str = "mean_norm"
    episode_norm_over: str = "steps"
    step_groups: str = "anchor"
    step_value: str = "return"
    step_state: str = "observation"
    enable_similarity: bool = False
    similarity_thresh: float = 0.95

    def __post_init__(self):
        p = "algorithm.gigpo"
        check_range(f"{p}.step_advantage_w", self.step_advantage_w, 0.0)
        check_choice(f"{p}.mode", self.mode, ADVANTAGE_MODES)
        check_choice(f"{p}.episode_norm_over", self.episode_norm_over, EPISODE_NORM_OVER)
        check_choice(f"{p}.step_groups", self.step_groups, GIGPO_STEP_GROUPS)
        check_choice(f"{p}.step_value", self.step_value, STEP_VALUES)
        check_choice(f"{p}.step_state", self.step_state, STEP_STATES)
        check_range(f"{p}.similarity_thresh", self.similarity_thresh, 0.0, 1.0)


@dataclass
class ForgeValues:
    """SLEA-RL's keys: the step-level advantage, the experience library and its evolution, with the paper's constants."""

    use_step_rewards: bool = True
    step_advantage_w: float = 1.0
    mode: str = "mean_norm"
    episode_norm_over: str = "steps"
    step_groups: str = "cluster"
    step_value: str = "next_state"  # beyond the paper (the paper: return); scripts/probe_step_credit.py
    step_state: str = "environment"  # beyond the paper (the paper: observation); scripts/probe_step_credit.py
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
    max_lesson_chars: int = MAX_LESSON_CHARS  # a lesson's text is cut to this many characters (experience/bounds.py)
    max_key_chars: int = MAX_KEY_CHARS  # longer observations and tasks are compared and stored as bounded keys
    experience_style: str = "compact"
    lesson_style: str = "descriptive"
    injection: str = "system"
    divergence_type: str = "jsd"
    distill_temperature: float = 1.0
    max_distill_weight: float = 0.5
    use_distillation: bool = False
    library_save_freq: int = 10
    checkpoint_dir: Optional[str] = None  # None: the library is saved only inside trainer checkpoints
    warmup_iterations: int = 5
    min_library_size: int = 10
    top_k_trajectories: int = 5
    max_strategies_per_iter: int = 10
    max_warnings_per_iter: int = 5
    novelty_threshold: float = 0.85
    extractor: str = "rule"
    lesson_credit: str = "outcome"
    retire_lessons: bool = True  # beyond the paper: retirement.py (false: every entry can be shown)
    harm_min_episodes: int = 8
    habit_kept_rate: float = 0.9

    def __post_init__(self):
        p = "algorithm.forge"
        check_range(f"{p}.step_advantage_w", self.step_advantage_w, 0.0)
        check_choice(f"{p}.mode", self.mode, ADVANTAGE_MODES)
        check_choice(f"{p}.episode_norm_over", self.episode_norm_over, EPISODE_NORM_OVER)
        check_choice(f"{p}.step_groups", self.step_groups, FORGE_STEP_GROUPS)
        check_choice(f"{p}.step_value", self.step_value, STEP_VALUES)
        check_choice(f"{p}.step_state", self.step_state, STEP_STATES)
        check_range(f"{p}.similarity_thresh", self.similarity_thresh, 0.0, 1.0)
        if self.enable_similarity or self.similarity_thresh != 0.95:
            raise ConfigError(
                f"{p}.enable_similarity={self.enable_similarity}, {p}.similarity_thresh={self.similarity_thresh}: "
                f"forge never reads these GiGPO keys (they stay at false and 0.95); its step groups are the "
                f"observation clusters, set by {p}.enable_clustering and {p}.obs_similarity_threshold. GiGPO's "
                "similarity grouping is algorithm.adv_estimator=gigpo with algorithm.gigpo.enable_similarity=true")
        check_int(f"{p}.golden_capacity_per_level", self.golden_capacity_per_level, 0)
        check_int(f"{p}.warning_capacity_per_level", self.warning_capacity_per_level, 0)
        for zone in ("golden", "warning"):
            capacity, top_k = getattr(self, f"{zone}_capacity_per_level"), getattr(self, f"top_k_{zone}")
            if isinstance(top_k, int) and not isinstance(top_k, bool) and top_k > capacity:
                raise ConfigError(f"{p}.{zone}_capacity_per_level={capacity} is smaller than {p}.top_k_{zone}={top_k}; "
                                  f"allowed: a capacity >= top_k_{zone} (set top_k_{zone}=0 to leave the {zone} zone out)")
        if self.success_threshold is not None:
            check_range(f"{p}.success_threshold", self.success_threshold)
        check_choice(f"{p}.retrieval_mode", self.retrieval_mode, RETRIEVAL_MODES)
        check_range(f"{p}.obs_similarity_threshold", self.obs_similarity_threshold, 0.0, 1.0)
        check_int(f"{p}.max_clusters", self.max_clusters, 1)
        check_int(f"{p}.top_k_golden", self.top_k_golden, 0, self.golden_capacity_per_level)
        check_int(f"{p}.top_k_warning", self.top_k_warning, 0, self.warning_capacity_per_level)
        check_int(f"{p}.max_experience_length", self.max_experience_length, 1)
        check_int(f"{p}.max_lesson_chars", self.max_lesson_chars, MIN_LESSON_CHARS)
        check_int(f"{p}.max_key_chars", self.max_key_chars, MIN_KEY_CHARS)
        check_choice(f"{p}.experience_style", self.experience_style, ("compact", "verbose"))
        check_choice(f"{p}.lesson_style", self.lesson_style, LESSON_STYLES)
        check_choice(f"{p}.injection", self.injection, INJECTIONS)
        check_choice(f"{p}.divergence_type", self.divergence_type, DIVERGENCES)
        check_range(f"{p}.distill_temperature", self.distill_temperature, 0.0, low_inclusive=False)
        check_range(f"{p}.max_distill_weight", self.max_distill_weight, 0.0)
        check_int(f"{p}.library_save_freq", self.library_save_freq, 1)
        if self.checkpoint_dir is not None and (not isinstance(self.checkpoint_dir, str) or not self.checkpoint_dir):
            raise ConfigError(f"{p}.checkpoint_dir={self.checkpoint_dir!r} must be a folder path or null")
        check_int(f"{p}.warmup_iterations", self.warmup_iterations, 0)
        check_int(f"{p}.min_library_size", self.min_library_size, 0)
        check_int(f"{p}.top_k_trajectories", self.top_k_trajectories, 1)
        check_int(f"{p}.max_strategies_per_iter", self.max_strategies_per_iter, 0)
        check_int(f"{p}.max_warnings_per_iter", self.max_warnings_per_iter, 0)
        check_range(f"{p}.novelty_threshold", self.novelty_threshold, 0.0, 1.0)
        check_choice(f"{p}.extractor", self.extractor, EXTRACTORS)
        check_choice(f"{p}.lesson_credit", self.lesson_credit, LESSON_CREDITS)
        check_int(f"{p}.harm_min_episodes", self.harm_min_episodes, 1)
        check_range(f"{p}.habit_kept_rate", self.habit_kept_rate, 0.0, 1.0, low_inclusive=False)
        if self.extractor == "oracle" and self.lesson_credit != "outcome":
            raise ConfigError(f"{p}.extractor=oracle gives every state the expert's lesson (the ceiling); "
                              f"{p}.lesson_credit={self.lesson_credit} would mix credited lessons into it: "
                              "use lesson_credit=outcome with the oracle")


def reject_unknown(section: Any, cls: type, prefix: str) -> None:
    known = {f.name for f in fields(cls)} - {"_target_"}
    unknown = sorted(set(section.keys()) - known - {"_target_"})
    if unknown:
        raise ConfigError(f"unknown key {prefix}.{unknown[0]}; known keys: {sorted(known)}")


def _section(cfg: DictConfig, key: str) -> dict[str, Any]:
    node = OmegaConf.select(cfg, key, default=None)
    if node is None:
        return {}
    if not OmegaConf.is_dict(node):
        raise ConfigError(f"{key}={node!r} must be a section (mapping)")
    return {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if k != "_target_"}


def check_algorithm_values(cfg: DictConfig) -> None:
    """``algorithm.forge``, ``algorithm.gigpo`` and SLEA-RL's algorithm scalars (verl checks its own later)."""
    for sub, cls in (("forge", ForgeValues), ("gigpo", GiGPOValues)):
        section = _section(cfg, f"algorithm.{sub}")
        reject_unknown(section, cls, f"algorithm.{sub}")
        cls(**section)
    algorithm = _section(cfg, "algorithm")
    check_algorithm_scalars(algorithm.get("gamma", 1.0), algorithm.get("lam", 1.0),
                            algorithm.get("invalid_action_penalty_coef", 0.0))


def check_algorithm_scalars(gamma: Any, lam: Any, invalid_action_penalty_coef: Any) -> None:
    check_range("algorithm.gamma", gamma, 0.0, 1.0)
    check_range("algorithm.lam", lam, 0.0, 1.0)
    check_range("algorithm.invalid_action_penalty_coef", invalid_action_penalty_coef, 0.0)


def check_config_values(cfg: DictConfig):
    """Every SLEA-RL check of a composed run config that needs neither verl nor torch; returns the typed
    environment section (agent_system.environments.config.EnvConfig)."""
    from agent_system.environments.config import env_config_from_mapping
    from agent_system.environments.registry import known_env_names

    check_choice("trainer.engine", _section(cfg, "trainer").get("engine", "local"), ENGINES)
    check_algorithm_values(cfg)
    env = env_config_from_mapping(_section(cfg, "env"))
    env.validate(known_env_names())
    if _section(cfg, "algorithm.forge").get("extractor") == "oracle":
        check_records_expert(env.env_name)
    return env


def check_records_expert(env_name: str) -> None:
    """``algorithm.forge.extractor=oracle`` teaches the expert's actions recorded on the steps: an environment whose
    manager records none (``records_expert_actions``) fails here; one whose steps turn out to carry none fails at
    the first evolution (extract_oracle.py)."""
    from agent_system.environments.registry import get_env_manager_class

    if not get_env_manager_class(env_name).records_expert_actions:
        raise ConfigError(f"algorithm.forge.extractor=oracle needs the expert's action on every step, and "
                          f"env.env_name={env_name!r} does not record it (its manager's records_expert_actions is "
                          "False: an expert too slow to ask at every step); use algorithm.forge.extractor=rule")


def check_model_reads_images(env: Any, model_key: str, model_path: str) -> None:
    """An environment that shows images (``env.sokoban.mode`` / ``env.gym_cards.mode`` = ``rgb_array``) needs a
    policy that reads them: a text-only model is refused here, naming both keys. The reverse is allowed: a
    vision-language model reads text-only prompts as any language model does. A model whose config.json cannot
    be read offline (a hub id outside the local cache) is not judged here."""
    from recipe.forge.hf.model_paths import reads_images

    image_key = env.image_mode_key()
    if image_key is None or reads_images(model_path) is not False:
        return
    raise ConfigError(
        f"{image_key}=rgb_array gives image observations, but {model_key}={model_path!r} is a text-only model (no "
        f"vision_config in its config.json); use a vision-language model (e.g. Qwen/Qwen2.5-VL-3B-Instruct; a tiny "
        f"random one for CPU trials: python scripts/make_tiny_vlm.py --out DIR) or {image_key}=text"
    )
