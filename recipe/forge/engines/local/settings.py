"""Everything the embedded engine reads from a run config, typed and validated before any model is loaded.

The engine reads verl's own keys wherever they exist (``actor_rollout_ref.actor.*``, ``.rollout.*``,
``.model.*``, ``critic.*``, ``trainer.*``, ``algorithm.filter_groups``); its own keys live under
``trainer.local`` (see recipe/forge/config/forge_trainer.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agent_system.config_checks import ConfigError, check_choice, check_int, check_range

LOGGERS = ("console", "jsonl", "tensorboard", "wandb")
COMPUTE_DTYPES = ("auto", "fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class LocalSettings:
    """``trainer.local``: the embedded engine's own knobs."""

    device: str = "auto"  # auto = cuda when available, else cpu
    compute_dtype: str = "fp32"  # fp32 | bf16 (autocast; weights and optimizer state stay fp32) | auto (bf16 if native)
    generation_batch_size: int = 64  # conversations decoded together
    recompute_old_log_probs: bool = False  # False: the rollout's log-probs are the PPO "old" log-probs
    num_threads: int = 0  # torch CPU threads; 0 = torch's default
    progress: bool = True  # tqdm bars
    response_prefix: str = ""  # prefilled start of every response, e.g. "<action>" (a format aid for tiny models)

    def validate(self) -> None:
        check_choice("trainer.local.device", self.device, DEVICES)
        check_choice("trainer.local.compute_dtype", self.compute_dtype, COMPUTE_DTYPES)
        check_int("trainer.local.generation_batch_size", self.generation_batch_size, 1)
        check_int("trainer.local.num_threads", self.num_threads, 0)


@dataclass
class EngineSettings:
    """The flat view of the run config the embedded trainer uses."""

    model_path: str
    lora_rank: int
    lora_alpha: float
    target_modules: Any
    gradient_checkpointing: bool
    lr: float
    weight_decay: float
    betas: tuple[float, float]
    grad_clip: float
    lr_warmup_steps: int
    mini_batch_size: int
    micro_batch_size: int
    ppo_epochs: int
    shuffle: bool
    loss_mode: str
    loss_agg_mode: str
    entropy_coeff: float
    use_kl_loss: bool
    kl_loss_coef: float
    kl_loss_type: str
    temperature: float
    top_p: float
    top_k: int
    max_new_tokens: int
    val_temperature: float
    use_critic: bool
    critic_lr: float
    cliprange_value: float
    filter_groups: bool
    max_num_gen_batches: int
    total_iterations: int
    save_freq: int
    test_freq: int
    val_before_train: bool
    val_only: bool
    resume_mode: str
    resume_from_path: str | None
    output_dir: str
    rollout_data_dir: str | None  # training steps as JSONL per iteration (rollout_dump.py); None = off
    loggers: list[str]
    project_name: str
    experiment_name: str
    seed: int
    local: LocalSettings = field(default_factory=LocalSettings)


def is_due(done: int, every: int, total: int) -> bool:
    """Whether a periodic action (validation ``test_freq``, checkpoint ``save_freq``) runs after iteration ``done``
    of ``total``: every ``every`` iterations and after the last one; never when ``every`` <= 0."""
    return every > 0 and (done % every == 0 or done == total)


def _get(cfg: Any, dotted: str, default: Any = None) -> Any:
    value = OmegaConf.select(cfg, dotted, default=default) if isinstance(cfg, DictConfig) else default
    return default if value is None else value


def _number(cfg: Any, key: str, default: float) -> float:
    value = _get(cfg, key, default)
    check_range(key, value)
    return float(value)


def _integer(cfg: Any, key: str, default: int | None) -> int | None:
    value = _get(cfg, key, default)
    if value is not None:
        check_int(key, value)
    return value


def _flag(cfg: Any, key: str, default: bool) -> bool:
    value = _get(cfg, key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} must be true or false")
    return value


def _text(cfg: Any, key: str, default: str) -> str:
    value = _get(cfg, key, default)
    if not isinstance(value, str):
        raise ConfigError(f"{key}={value!r} must be a string")
    return value


def _betas(cfg: Any, key: str) -> tuple[float, float]:
    value = _get(cfg, key, [0.9, 0.999])
    value = list(value) if isinstance(value, (list, tuple)) or OmegaConf.is_list(value) else value
    if not isinstance(value, list) or len(value) != 2:
        raise ConfigError(f"{key}={value!r} must be two numbers [beta1, beta2], each in [0, 1)")
    for n, beta in enumerate(value):
        check_range(f"{key}[{n}]", beta, 0.0, 1.0, high_inclusive=False)
    return float(value[0]), float(value[1])


def read_engine_settings(cfg: DictConfig) -> EngineSettings:
    """Read and check every key the embedded engine uses, without verl or torch (ConfigError naming the key)."""
    local_section = OmegaConf.to_container(cfg.trainer.get("local", {}) or {}, resolve=True)
    known = set(LocalSettings.__dataclass_fields__)
    unknown = sorted(set(local_section) - known)
    if unknown:
        raise ConfigError(f"unknown key trainer.local.{unknown[0]}; known keys: {sorted(known)}")
    local = LocalSettings(**local_section)
    local.validate()

    actor = "actor_rollout_ref.actor"
    rollout = "actor_rollout_ref.rollout"
    model = "actor_rollout_ref.model"
    loggers = _get(cfg, "trainer.logger", ["console"])
    loggers = [loggers] if isinstance(loggers, str) else list(loggers)
    for name in loggers:
        check_choice("trainer.logger[]", name, LOGGERS)
    micro = _integer(cfg, f"{actor}.ppo_micro_batch_size_per_gpu", None)
    if micro is None:
        micro = _integer(cfg, f"{actor}.ppo_micro_batch_size", 8)
    total = _integer(cfg, "trainer.total_training_steps", None)
    if total is None:
        total = _integer(cfg, "trainer.total_epochs", 1)
    settings = EngineSettings(
        model_path=_text(cfg, f"{model}.path", "smollm2-135m-instruct"),
        lora_rank=_integer(cfg, f"{model}.lora_rank", 0),
        lora_alpha=_get(cfg, f"{model}.lora_alpha", 16),
        target_modules=_get(cfg, f"{model}.target_modules", "all-linear"),
        gradient_checkpointing=_flag(cfg, f"{model}.enable_gradient_checkpointing", False),
        lr=_number(cfg, f"{actor}.optim.lr", 1e-6),
        weight_decay=_number(cfg, f"{actor}.optim.weight_decay", 0.01),
        betas=_betas(cfg, f"{actor}.optim.betas"),
        grad_clip=_number(cfg, f"{actor}.grad_clip", 1.0),
        lr_warmup_steps=_integer(cfg, f"{actor}.optim.lr_warmup_steps", -1),
        mini_batch_size=_integer(cfg, f"{actor}.ppo_mini_batch_size", 256),
        micro_batch_size=micro,
        ppo_epochs=_integer(cfg, f"{actor}.ppo_epochs", 1),
        shuffle=_flag(cfg, f"{actor}.shuffle", False),
        loss_mode=_text(cfg, f"{actor}.policy_loss.loss_mode", "vanilla"),
        loss_agg_mode=_text(cfg, f"{actor}.loss_agg_mode", "token-mean"),
        entropy_coeff=_number(cfg, f"{actor}.entropy_coeff", 0.0),
        use_kl_loss=_flag(cfg, f"{actor}.use_kl_loss", False),
        kl_loss_coef=_number(cfg, f"{actor}.kl_loss_coef", 0.001),
        kl_loss_type=_text(cfg, f"{actor}.kl_loss_type", "low_var_kl"),
        temperature=_number(cfg, f"{rollout}.temperature", 1.0),
        top_p=_number(cfg, f"{rollout}.top_p", 1.0),
        top_k=_integer(cfg, f"{rollout}.top_k", -1),
        max_new_tokens=_integer(cfg, f"{rollout}.response_length", 256),
        val_temperature=_number(cfg, f"{rollout}.val_kwargs.temperature", 0.4),
        use_critic=_flag(cfg, "critic.enable", False) or _get(cfg, "algorithm.adv_estimator") == "gae",
        critic_lr=_number(cfg, "critic.optim.lr", 1e-5),
        cliprange_value=_number(cfg, "critic.cliprange_value", 0.5),
        filter_groups=_flag(cfg, "algorithm.filter_groups.enable", False),
        max_num_gen_batches=_integer(cfg, "algorithm.filter_groups.max_num_gen_batches", 0),
        total_iterations=total,
        save_freq=_integer(cfg, "trainer.save_freq", -1),
        test_freq=_integer(cfg, "trainer.test_freq", -1),
        val_before_train=_flag(cfg, "trainer.val_before_train", True),
        val_only=_flag(cfg, "trainer.val_only", False),
        resume_mode=_text(cfg, "trainer.resume_mode", "disable"),
        resume_from_path=_get(cfg, "trainer.resume_from_path", None),
        output_dir=_text(cfg, "trainer.default_local_dir", "checkpoints/slea_rl/run"),
        rollout_data_dir=_get(cfg, "trainer.rollout_data_dir", None),
        loggers=loggers,
        project_name=str(_get(cfg, "trainer.project_name", "slea_rl")),
        experiment_name=str(_get(cfg, "trainer.experiment_name", "run")),
        seed=_integer(cfg, "env.seed", 0),
        local=local,
    )
    _validate(settings)
    check_model_path(f"{model}.path", settings.model_path)
    critic_path = _get(cfg, "critic.model.path", None)
    if settings.use_critic and critic_path and not str(critic_path).startswith("~/models/"):  # verl's placeholder
        check_model_path("critic.model.path", str(critic_path))
    return settings


def engine_settings(cfg: DictConfig) -> EngineSettings:
    """:func:`read_engine_settings` plus the checks against verl's registries (these import verl)."""
    settings = read_engine_settings(cfg)
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    check_choice("actor_rollout_ref.actor.policy_loss.loss_mode", settings.loss_mode, sorted(POLICY_LOSS_REGISTRY))
    return settings


def _validate(s: EngineSettings) -> None:
    actor = "actor_rollout_ref.actor"
    rollout = "actor_rollout_ref.rollout"
    if not s.model_path:
        raise ConfigError("actor_rollout_ref.model.path must not be empty")
    check_int("actor_rollout_ref.model.lora_rank", s.lora_rank, 0)
    check_range("actor_rollout_ref.model.lora_alpha", s.lora_alpha, 0.0, low_inclusive=False)
    check_range(f"{actor}.optim.lr", s.lr, 0.0, low_inclusive=False)
    check_range(f"{actor}.optim.weight_decay", s.weight_decay, 0.0)
    check_range(f"{actor}.grad_clip", s.grad_clip, 0.0, low_inclusive=False)
    check_int(f"{actor}.ppo_mini_batch_size", s.mini_batch_size, 1)
    check_int(f"{actor}.ppo_micro_batch_size_per_gpu", s.micro_batch_size, 1)
    check_int(f"{actor}.ppo_epochs", s.ppo_epochs, 1)
    check_choice(f"{actor}.loss_agg_mode", s.loss_agg_mode,
                 ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
    check_choice(f"{actor}.kl_loss_type", s.kl_loss_type.rstrip("+"),
                 ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"])
    check_range(f"{actor}.kl_loss_coef", s.kl_loss_coef, 0.0)
    check_range(f"{actor}.entropy_coeff", s.entropy_coeff)
    check_range(f"{rollout}.temperature", s.temperature, 0.0, low_inclusive=False)
    check_range(f"{rollout}.top_p", s.top_p, 0.0, 1.0, low_inclusive=False)
    check_int(f"{rollout}.top_k", s.top_k, -1)  # -1 (and 0): no top-k filter
    check_int(f"{rollout}.response_length", s.max_new_tokens, 1)
    check_range(f"{rollout}.val_kwargs.temperature", s.val_temperature, 0.0)
    check_range("critic.optim.lr", s.critic_lr, 0.0, low_inclusive=False)
    check_range("critic.cliprange_value", s.cliprange_value, 0.0)
    check_int("algorithm.filter_groups.max_num_gen_batches", s.max_num_gen_batches, 0)
    check_int("trainer.total_training_steps", s.total_iterations, 1)
    check_int("trainer.save_freq", s.save_freq, -1)
    check_int("trainer.test_freq", s.test_freq, -1)
    check_choice("trainer.resume_mode", s.resume_mode, ["disable", "auto", "resume_path"])
    if s.resume_mode == "resume_path":
        check_resume_path(s.resume_from_path)


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


def check_model_path(key: str, path: str) -> None:
    """A model path must be the SmolLM2 alias, an existing local model folder, or a hub id already in the local
    Hugging Face cache (nothing is downloaded at start-up: a missing model is an error here, not a minute of
    network retries later)."""
    from recipe.forge.engines.local.model_paths import model_path_problem

    problem = model_path_problem(path)
    if problem:
        raise ConfigError(f"{key}={path!r} {problem}")
