"""Start-up validation of the run config: the shipped config is valid, and each kind of fault fails with a
message naming the key, the value and what is allowed."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from agent_system.config_checks import ConfigError
from recipe.forge.run_config import load_run_config

CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "recipe" / "forge" / "config")


def load(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose("forge_trainer", overrides=list(overrides))


@pytest.fixture(scope="module")
def default_cfg():
    return load()


def test_shipped_config_is_valid_with_seed_defaults(default_cfg):
    v = load_run_config(default_cfg)
    f = v.algorithm.forge
    assert v.engine == "local"
    assert v.algorithm.adv_estimator == "forge" and v.algorithm.gamma == 0.95
    assert v.algorithm.use_kl_in_reward is False
    assert (f.use_step_rewards, f.step_advantage_w, f.mode) == (True, 1.0, "mean_norm")
    assert (f.golden_capacity_per_level, f.warning_capacity_per_level) == (100, 50)
    assert (f.top_k_golden, f.top_k_warning, f.max_experience_length) == (2, 1, 800)
    assert (f.obs_similarity_threshold, f.novelty_threshold, f.success_threshold) == (0.85, 0.85, 0.5)
    assert (f.warmup_iterations, f.min_library_size, f.top_k_trajectories) == (5, 10, 5)
    assert (f.max_strategies_per_iter, f.max_warnings_per_iter) == (10, 5)
    assert (f.divergence_type, f.distill_temperature, f.max_distill_weight, f.use_distillation) == (
        "jsd", 1.0, 0.5, False)
    assert (f.library_save_freq, f.retrieval_mode) == (10, "observation")
    # the library file belongs to the run: it lives in the run's output folder, not in a shared default
    assert f.checkpoint_dir == f"{default_cfg.trainer.default_local_dir}/forge_library" == \
        "runs/slea_rl/forge_sokoban/forge_library"
    g = v.algorithm.gigpo
    assert (g.step_advantage_w, g.mode, g.enable_similarity, g.similarity_thresh) == (1.0, "mean_norm", False, 0.95)


@pytest.mark.parametrize("estimator", ["grpo", "gae", "rloo", "reinforce_plus_plus", "gigpo", "forge"])
def test_known_estimators_accepted(estimator):
    assert load_run_config(load(f"algorithm.adv_estimator={estimator}")).algorithm.adv_estimator == estimator


FAULTS = [
    ("algorithm.adv_estimator=grpoo", ["algorithm.adv_estimator", "'grpoo'", "grpo"]),
    ("env.env_name=sokobann", ["env.env_name", "'sokobann'", "sokoban"]),
    ("algorithm.forge.retrieval_mode=nearest", ["algorithm.forge.retrieval_mode", "'nearest'", "clustered"]),
    ("algorithm.forge.obs_similarity_threshold=1.5", ["algorithm.forge.obs_similarity_threshold", "1.5", "[0.0, 1.0]"]),
    ("algorithm.gigpo.similarity_thresh=-0.1", ["algorithm.gigpo.similarity_thresh", "-0.1"]),
    ("algorithm.forge.golden_capacity_per_level=-1", ["algorithm.forge.golden_capacity_per_level", "-1"]),
    ("algorithm.forge.top_k_warning=51", ["algorithm.forge.top_k_warning", "51", "50"]),
    ("algorithm.forge.divergence_type=wasserstein", ["algorithm.forge.divergence_type", "'wasserstein'", "jsd"]),
    ("algorithm.forge.mode=zscore", ["algorithm.forge.mode", "'zscore'", "mean_std_norm"]),
    ("algorithm.gamma=1.2", ["algorithm.gamma", "1.2"]),
    ("trainer.engine=tpu", ["trainer.engine", "'tpu'", "local"]),
    ("env.rollout.n=0", ["env.rollout.n", "0"]),
    ("env.max_steps=0", ["env.max_steps", "0"]),
    ("env.sokoban.dim_room=[3,3]", ["env.sokoban.dim_room", "[3, 3]"]),
    ("+algorithm.forge.top_k_goldn=3", ["algorithm.forge.top_k_goldn", "unknown key"]),
    ("+env.max_step=3", ["env.max_step", "unknown key"]),
    ("env.seed=abc", ["env.seed", "'abc'"]),
    ("data.train_batch_size=0", ["data.train_batch_size", "0"]),
    ("algorithm.forge.distill_temperature=0", ["algorithm.forge.distill_temperature", "0"]),
    ("algorithm.forge.injection=assistant", ["algorithm.forge.injection", "'assistant'", "user_suffix"]),
    ("algorithm.forge.lesson_style=bossy", ["algorithm.forge.lesson_style", "'bossy'", "imperative"]),
    # verl-agent's key: nothing here reads it (environment workers are OS processes, not Ray actors)
    ("env.resources_per_worker.num_cpus=0.1", ["env.resources_per_worker.num_cpus", "0.1", "not Ray actors"]),
]


@pytest.mark.parametrize("override,fragments", FAULTS, ids=[f[0] for f in FAULTS])
def test_each_fault_fails_at_start_up_naming_key_and_value(override, fragments):
    cfg = load(override)
    with pytest.raises(ConfigError) as err:
        load_run_config(cfg)
    message = str(err.value)
    for fragment in fragments:
        assert fragment in message, message


def test_wrong_type_inside_algorithm_section_is_named():
    with pytest.raises(ConfigError, match="use_step_rewards"):
        load_run_config(load("algorithm.forge.use_step_rewards=maybe"))


def test_main_job_preset_is_valid_and_keeps_numberline_states_apart():
    from recipe.forge.experience.index import ObservationIndex

    preset = load_run_config(load("+experiment=main_job"))
    base = load_run_config(load())
    assert preset.env.env_name == "gym_cards/NumberLine-v0"
    assert base.algorithm.forge.min_library_size == 10  # the paper's gate
    # the preset's step-credited libraries are small because precise: only the warm-up holds them back
    assert (preset.algorithm.forge.min_library_size, preset.algorithm.forge.lesson_credit) == (0, "step")
    states = [f"Target: {t}\nCurrent: {c}" for t in range(4) for c in range(4) if t != c]

    def clusters(forge) -> int:
        index = ObservationIndex(forge.obs_similarity_threshold, exact=not forge.enable_clustering)
        return len(set(index.assign_batch(states, iteration=0)))

    assert clusters(preset.algorithm.forge) == 12  # one cluster per state: each lesson stays with its state
    # what scripts/probe_experience_use.py shows SmolLM2-135M reads; the base config keeps the paper's placement
    assert (preset.algorithm.forge.injection, preset.algorithm.forge.lesson_style) == ("user_suffix", "imperative")
    assert (base.algorithm.forge.injection, base.algorithm.forge.lesson_style) == ("system", "descriptive")
    assert clusters(base.algorithm.forge) < 12  # the paper's 0.85 merges states one character apart
    assert preset.algorithm.forge.novelty_threshold == 1.0  # lessons merge only when identical


def flat(cfg) -> dict:
    """Every leaf of a composed config, resolved, as {dotted key: value}."""
    from omegaconf import OmegaConf

    def walk(node, prefix):
        if isinstance(node, dict):
            for key, value in node.items():
                yield from walk(value, f"{prefix}{key}.")
        else:
            yield prefix[:-1], node

    return dict(walk(OmegaConf.to_container(cfg, resolve=True), ""))


def test_dial_lock_preset_is_the_main_job_on_the_dial_lock():
    from agent_system.environments.registry import get_env_manager_class
    from recipe.forge.experience.index import ObservationIndex

    cfg = load("+experiment=dial_lock_job")
    preset = load_run_config(cfg)
    lock = preset.env.dial_lock
    assert preset.env.env_name == "dial_lock" and (lock.num_dials, lock.max_digit) == (2, 4)
    assert lock.num_dials * lock.max_digit <= preset.env.max_steps  # the longest expert episode fits
    assert get_env_manager_class("dial_lock").resolve_max_steps(preset.env) == preset.env.max_steps
    # model, engine, update, validation and every lesson setting are the main job's: under the same run name
    # (which names the paths), only the environment and the batch differ
    main = flat(load("+experiment=main_job", f"trainer.experiment_name={cfg.trainer.experiment_name}"))
    differing = sorted(key for key, value in flat(cfg).items() if main.get(key) != value)
    assert differing == ["data.train_batch_size", "env.env_name", "env.max_steps"]
    assert cfg.trainer.experiment_name != load("+experiment=main_job").trainer.experiment_name
    digits = range(lock.max_digit + 1)
    states = [f"Dial: {d} of {lock.num_dials}\nTarget: {c}\nCurrent: {n}"
              for d in range(1, lock.num_dials + 1) for c in digits for n in digits if c != n]

    def clusters(forge) -> int:
        index = ObservationIndex(forge.obs_similarity_threshold, exact=not forge.enable_clustering)
        return len(set(index.assign_batch(states, iteration=0)))

    assert len(states) == 40 and clusters(preset.algorithm.forge) == 40  # one cluster per state: lessons stay apart
    assert clusters(load_run_config(load()).algorithm.forge) < 40  # the paper's 0.85 merges states
