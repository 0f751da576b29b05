"""Everything the embedded engine reads from a run config, typed and validated before any model is loaded.

The engine reads verl's own keys wherever they exist (``actor_rollout_ref.actor.*``, ``.rollout.*``,
``.model.*``, ``critic.*``, ``trainer.*``, ``algorithm.filter_groups``); its own keys live under
``trainer.local`` (see recipe/forge/config/forge_trainer.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agent_system.config_checks import ConfigError, check_choice, check_int, check_range

LOGGERS = ("console", "jsonl", "tensorboard", "wandb")
COMPUTE_DTYPES = ("fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class LocalSettings:
    """``trainer.local``: the embedded engine's own knobs."""

    device: str = "auto"  # auto = cuda when available, else cpu
    compute_dtype: str = "fp32"  # fp32 | bf16 (autocast; the weights and optimizer state stay fp32)
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
    lora_alpha: int
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


def engine_settings(cfg: DictConfig) -> EngineSettings:
    """Read and validate the engine's keys; raises ConfigError naming the first bad key."""
    local_section = OmegaConf.to_container(cfg.trainer.get("local", {}) or {}, resolve=True)
    known = set(LocalSettings.__dataclass_fields__)
    unknown = sorted(set(local_section) - known)
    if unknown:
        raise ConfigError(f"unknown key trainer.local.{unknown[0]}; known keys: {sorted(known)}")
    local = LocalSettings(**local_section)
    local.validate()

    actor = "actor_rollout_ref.actor"
    rollout = "actor_rollout_ref.rollout"
    loggers = _get(cfg, "trainer.logger", ["console"])
    loggers = [loggers] if isinstance(loggers, str) else list(loggers)
    for name in loggers:
        check_choice("trainer.logger[]", name, LOGGERS)
    micro = _get(cfg, f"{actor}.ppo_micro_batch_size_per_gpu") or _get(cfg, f"{actor}.ppo_micro_batch_size") or 8
    total = _get(cfg, "trainer.total_training_steps") or _get(cfg, "trainer.total_epochs", 1)
    top_k = int(_get(cfg, f"{rollout}.top_k", -1))
    settings = EngineSettings(
        model_path=str(_get(cfg, "actor_rollout_ref.model.path", "smollm2-135m-instruct")),
        lora_rank=_get(cfg, "actor_rollout_ref.model.lora_rank", 0),
        lora_alpha=_get(cfg, "actor_rollout_ref.model.lora_alpha", 16),
        target_modules=_get(cfg, "actor_rollout_ref.model.target_modules", "all-linear"),
        gradient_checkpointing=bool(_get(cfg, "actor_rollout_ref.model.enable_gradient_checkpointing", False)),
        lr=float(_get(cfg, f"{actor}.optim.lr", 1e-6)),
        weight_decay=float(_get(cfg, f"{actor}.optim.weight_decay", 0.01)),
        betas=tuple(float(b) for b in _get(cfg, f"{actor}.optim.betas", [0.9, 0.999])),
        grad_clip=float(_get(cfg, f"{actor}.grad_clip", 1.0)),
        lr_warmup_steps=int(_get(cfg, f"{actor}.optim.lr_warmup_steps", -1)),
        mini_batch_size=_get(cfg, f"{actor}.ppo_mini_batch_size", 256),
        micro_batch_size=micro,
        ppo_epochs=_get(cfg, f"{actor}.ppo_epochs", 1),
        shuffle=bool(_get(cfg, f"{actor}.shuffle", False)),
        loss_mode=str(_get(cfg, f"{actor}.policy_loss.loss_mode", "vanilla")),
        loss_agg_mode=str(_get(cfg, f"{actor}.loss_agg_mode", "token-mean")),
        entropy_coeff=float(_get(cfg, f"{actor}.entropy_coeff", 0.0)),
        use_kl_loss=bool(_get(cfg, f"{actor}.use_kl_loss", False)),
        kl_loss_coef=float(_get(cfg, f"{actor}.kl_loss_coef", 0.001)),
        kl_loss_type=str(_get(cfg, f"{actor}.kl_loss_type", "low_var_kl")),
        temperature=float(_get(cfg, f"{rollout}.temperature", 1.0)),
        top_p=float(_get(cfg, f"{rollout}.top_p", 1.0)),
        top_k=top_k,
        max_new_tokens=_get(cfg, f"{rollout}.response_length", 256),
        val_temperature=float(_get(cfg, f"{rollout}.val_kwargs.temperature", 0.4)),
        use_critic=bool(_get(cfg, "critic.enable", False)) or _get(cfg, "algorithm.adv_estimator") == "gae",
        critic_lr=float(_get(cfg, "critic.optim.lr", 1e-5)),
        cliprange_value=float(_get(cfg, "critic.cliprange_value", 0.5)),
        filter_groups=bool(_get(cfg, "algorithm.filter_groups.enable", False)),
        max_num_gen_batches=int(_get(cfg, "algorithm.filter_groups.max_num_gen_batches", 0)),
        total_iterations=total,
        save_freq=_get(cfg, "trainer.save_freq", -1),
        test_freq=_get(cfg, "trainer.test_freq", -1),
        val_before_train=bool(_get(cfg, "trainer.val_before_train", True)),
        val_only=bool(_get(cfg, "trainer.val_only", False)),
        resume_mode=str(_get(cfg, "trainer.resume_mode", "disable")),
        resume_from_path=_get(cfg, "trainer.resume_from_path", None),
        output_dir=str(_get(cfg, "trainer.default_local_dir", "checkpoints/slea_rl/run")),
        loggers=loggers,
        project_name=str(_get(cfg, "trainer.project_name", "slea_rl")),
        experiment_name=str(_get(cfg, "trainer.experiment_name", "run")),
        seed=int(_get(cfg, "env.seed", 0)),
        local=local,
    )
    _validate(settings)
    return settings


def _validate(s: EngineSettings) -> None:
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    actor = "actor_rollout_ref.actor"
    if not s.model_path:
        raise ConfigError("actor_rollout_ref.model.path must not be empty")
    check_int("actor_rollout_ref.model.lora_rank", s.lora_rank, 0)
    check_range(f"{actor}.optim.lr", s.lr, 0.0, low_inclusive=False)
    check_range(f"{actor}.optim.weight_decay", s.weight_decay, 0.0)
    check_range(f"{actor}.grad_clip", s.grad_clip, 0.0, low_inclusive=False)
    check_int(f"{actor}.ppo_mini_batch_size", s.mini_batch_size, 1)
    check_int(f"{actor}.ppo_micro_batch_size_per_gpu", s.micro_batch_size, 1)
    check_int(f"{actor}.ppo_epochs", s.ppo_epochs, 1)
    check_choice(f"{actor}.policy_loss.loss_mode", s.loss_mode, sorted(POLICY_LOSS_REGISTRY))
    check_choice(f"{actor}.loss_agg_mode", s.loss_agg_mode,
                 ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
    check_choice(f"{actor}.kl_loss_type", s.kl_loss_type.rstrip("+"),
                 ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"])
    check_range(f"{actor}.kl_loss_coef", s.kl_loss_coef, 0.0)
    check_range("actor_rollout_ref.rollout.temperature", s.temperature, 0.0, low_inclusive=False)
    check_range("actor_rollout_ref.rollout.top_p", s.top_p, 0.0, 1.0, low_inclusive=False)
    check_int("actor_rollout_ref.rollout.response_length", s.max_new_tokens, 1)
    check_range("actor_rollout_ref.rollout.val_kwargs.temperature", s.val_temperature, 0.0)
    check_int("trainer.total_training_steps", s.total_iterations, 1)
    check_int("trainer.save_freq", s.save_freq, -1)
    check_int("trainer.test_freq", s.test_freq, -1)
    check_choice("trainer.resume_mode", s.resume_mode, ["disable", "auto", "resume_path"])
    if s.resume_mode == "resume_path" and not s.resume_from_path:
        raise ConfigError("trainer.resume_mode=resume_path needs trainer.resume_from_path")
