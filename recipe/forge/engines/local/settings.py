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
from recipe.forge.run_length import total_iterations

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
    freeze_policy: bool = False  # True: roll out and evolve the library, never update the policy (library alone)
    share_prompt_prefix: bool = True  # run the prompts' shared tokens once per batch (shared_prefix.py)

    def validate(self) -> None:
        check_choice("trainer.local.device", self.device, DEVICES)
        check_choice("trainer.local.compute_dtype", self.compute_dtype, COMPUTE_DTYPES)
        check_int("trainer.local.generation_batch_size", self.generation_batch_size, 1)
        check_int("trainer.local.num_threads", self.num_threads, 0)
        if not isinstance(self.share_prompt_prefix, bool):
            raise ConfigError(f"trainer.local.share_prompt_prefix={self.share_prompt_prefix!r} must be true or false")


@dataclass
class EngineSettings:
    """What the embedded trainer reads from a run config. ``actor`` and ``critic_optim`` are verl's own typed
    configs (built by ``omega_conf_to_dataclass`` from the composed config, so verl's defaults apply as they are);
    ``filter_groups`` is the typed ``algorithm.filter_groups`` (verl's FilterGroupsConfig). The other fields come
    from sections verl has no dataclass this engine can build (rollout, model, trainer) and are read without
    defaults of their own: the composed config holds verl's."""

    actor: Any  # verl.workers.config.FSDPActorConfig (optim: FSDPOptimizerConfig, policy_loss: PolicyLossConfig)
    critic_optim: Any  # verl.workers.config.FSDPOptimizerConfig of critic.optim
    filter_groups: Any  # verl.trainer.config.FilterGroupsConfig
    group_size: int  # env.rollout.n: verl's rollout.n on the verl engine
    model_path: str
    lora_rank: int
    lora_alpha: float
    target_modules: Any
    gradient_checkpointing: bool
    temperature: float
    top_p: float
    top_k: int
    max_new_tokens: int
    val_temperature: float
    use_critic: bool
    cliprange_value: float
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

    @property
    def update_shares_prompt_prefix(self) -> bool:
        """Whether the update's passes share the prompt prefix: ``trainer.local.share_prompt_prefix``, except under
        gradient checkpointing, which drops the KV cache the shared tokens are handed on through (generation,
        in evaluation mode, shares them either way)."""
        return self.local.share_prompt_prefix and not self.gradient_checkpointing

    @property
    def mini_batch_rows(self) -> int:
        """Step samples per optimizer step: ``ppo_mini_batch_size`` counts tasks and, as verl does, is multiplied
        by the G copies of each task (``env.rollout.n``, verl's ``rollout.n``); a row is one step sample on both
        engines (docs/configuration.md, "Batch sizes")."""
        return self.actor.ppo_mini_batch_size * self.group_size

    @property
    def micro_batch_size(self) -> int:
        """Step samples per forward/backward pass (``ppo_micro_batch_size_per_gpu``, else the deprecated
        ``ppo_micro_batch_size``; verl's ActorConfig refuses both set or neither)."""
        a = self.actor
        return a.ppo_micro_batch_size_per_gpu if a.ppo_micro_batch_size_per_gpu is not None else a.ppo_micro_batch_size


def is_due(done: int, every: int, total: int) -> bool:
    """Whether a periodic action (validation ``test_freq``, checkpoint ``save_freq``) runs after iteration ``done``
    of ``total``: every ``every`` iterations and after the last one; never when ``every`` <= 0."""
    return every > 0 and (done % every == 0 or done == total)


_ABSENT = object()


def _get(cfg: Any, dotted: str) -> Any:
    """A key of the composed config (verl's defaults included); a missing key is a ConfigError, never a default
    restated here."""
    value = OmegaConf.select(cfg, dotted, default=_ABSENT) if isinstance(cfg, DictConfig) else _ABSENT
    if value is _ABSENT:
        raise ConfigError(f"{dotted} is missing from the run config; compose it from recipe/forge/config/"
                          "forge_trainer.yaml, which holds verl's defaults")
    return value


def _number(cfg: Any, key: str, low: float | None = None, high: float | None = None, **inclusive: bool) -> float:
    value = _get(cfg, key)
    check_range(key, value, low, high, **inclusive)
    return float(value)


def _integer(cfg: Any, key: str, low: int | None = None, nullable: bool = False) -> int | None:
    value = _get(cfg, key)
    if value is None and nullable:
        return None
    check_int(key, value, low)
    return value


def _flag(cfg: Any, key: str) -> bool:
    value = _get(cfg, key)
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} must be true or false")
    return value


def _text(cfg: Any, key: str) -> str:
    value = _get(cfg, key)
    if not isinstance(value, str):
        raise ConfigError(f"{key}={value!r} must be a string")
    return value


def _check_betas(cfg: Any, key: str) -> None:
    value = _get(cfg, key)
    value = list(value) if isinstance(value, (list, tuple)) or OmegaConf.is_list(value) else value
    if not isinstance(value, list) or len(value) != 2:
        raise ConfigError(f"{key}={value!r} must be two numbers [beta1, beta2], each in [0, 1)")
    for n, beta in enumerate(value):
        check_range(f"{key}[{n}]", beta, 0.0, 1.0, high_inclusive=False)


ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
MODEL = "actor_rollout_ref.model"
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_LOSS_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
LR_SCHEDULER_TYPES = ("constant", "cosine")  # verl's FSDP optimizer schedules


def _local_section(cfg: DictConfig) -> LocalSettings:
    local_section = OmegaConf.to_container(cfg.trainer.get("local", {}) or {}, resolve=True)
    known = set(LocalSettings.__dataclass_fields__)
    unknown = sorted(set(local_section) - known)
    if unknown:
        raise ConfigError(f"unknown key trainer.local.{unknown[0]}; known keys: {sorted(known)}")
    local = LocalSettings(**local_section)
    local.validate()
    return local


def _loggers(cfg: DictConfig) -> list[str]:
    loggers = _get(cfg, "trainer.logger")
    loggers = [loggers] if isinstance(loggers, str) else list(loggers)
    for name in loggers:
        check_choice("trainer.logger[]", name, LOGGERS)
    return loggers


def _check_actor_section(cfg: DictConfig) -> None:
    """The actor keys this engine uses, checked on the plain config (verl's dataclass is built later)."""
    optim = f"{ACTOR}.optim"
    _number(cfg, f"{optim}.lr", 0.0, low_inclusive=False)
    _number(cfg, f"{optim}.weight_decay", 0.0)
    _check_betas(cfg, f"{optim}.betas")
    _integer(cfg, f"{optim}.lr_warmup_steps", -1, nullable=True)
    _number(cfg, f"{optim}.lr_warmup_steps_ratio", 0.0, 1.0)
    check_choice(f"{optim}.lr_scheduler_type", _get(cfg, f"{optim}.lr_scheduler_type"), LR_SCHEDULER_TYPES)
    _number(cfg, f"{ACTOR}.grad_clip", 0.0, low_inclusive=False)
    _integer(cfg, f"{ACTOR}.ppo_mini_batch_size", 1)
    per_gpu = _integer(cfg, f"{ACTOR}.ppo_micro_batch_size_per_gpu", 1, nullable=True)
    if per_gpu is None and _integer(cfg, f"{ACTOR}.ppo_micro_batch_size", 1, nullable=True) is None:
        raise ConfigError(f"set {ACTOR}.ppo_micro_batch_size_per_gpu (step samples per forward/backward pass)")
    _integer(cfg, f"{ACTOR}.ppo_epochs", 1)
    _flag(cfg, f"{ACTOR}.shuffle")
    check_choice(f"{ACTOR}.loss_agg_mode", _get(cfg, f"{ACTOR}.loss_agg_mode"), LOSS_AGG_MODES)
    check_choice(f"{ACTOR}.kl_loss_type", str(_get(cfg, f"{ACTOR}.kl_loss_type")).rstrip("+"), KL_LOSS_TYPES)
    _number(cfg, f"{ACTOR}.kl_loss_coef", 0.0)
    _number(cfg, f"{ACTOR}.entropy_coeff")
    _flag(cfg, f"{ACTOR}.use_kl_loss")
    _text(cfg, f"{ACTOR}.policy_loss.loss_mode")


def _check_filter_groups(cfg: DictConfig) -> None:
    groups = "algorithm.filter_groups"
    _integer(cfg, f"{groups}.max_num_gen_batches")  # verl: a non-positive value means no limit
    inflight = _integer(cfg, f"{groups}.max_inflight_gen_batches", 1)
    if _flag(cfg, f"{groups}.enable") and inflight != 1:
        raise ConfigError(
            f"{groups}.max_inflight_gen_batches={inflight}: the embedded engine rolls out one generation batch "
            "at a time, so only 1 is possible here; set it to 1, or run the verl engine (trainer.engine=verl), "
            "whose replay buffer keeps several batches in flight")


def read_engine_settings(cfg: DictConfig) -> EngineSettings:
    """Read and check every key the embedded engine uses (ConfigError naming the key), then build verl's typed
    actor and critic-optimizer configs from the composed config. The checks on the plain config come first
    (:func:`check_engine_config`, no verl import), so a bad value is named before verl loads."""
    check_engine_config(cfg)
    from verl.utils.config import omega_conf_to_dataclass

    actor = _typed(cfg, ACTOR, omega_conf_to_dataclass)
    critic_optim = _typed(cfg, "critic.optim", omega_conf_to_dataclass)
    filter_groups = _typed(cfg, "algorithm.filter_groups", omega_conf_to_dataclass)
    return EngineSettings(
        actor=actor,
        critic_optim=critic_optim,
        filter_groups=filter_groups,
        group_size=_integer(cfg, "env.rollout.n", 1),
        model_path=_text(cfg, f"{MODEL}.path"),
        lora_rank=_integer(cfg, f"{MODEL}.lora_rank", 0),
        lora_alpha=_number(cfg, f"{MODEL}.lora_alpha", 0.0, low_inclusive=False),
        target_modules=_get(cfg, f"{MODEL}.target_modules"),
        gradient_checkpointing=_flag(cfg, f"{MODEL}.enable_gradient_checkpointing"),
        temperature=_number(cfg, f"{ROLLOUT}.temperature", 0.0, low_inclusive=False),
        top_p=_number(cfg, f"{ROLLOUT}.top_p", 0.0, 1.0, low_inclusive=False),
        top_k=_integer(cfg, f"{ROLLOUT}.top_k", -1),  # -1 (and 0): no top-k filter
        max_new_tokens=_integer(cfg, f"{ROLLOUT}.response_length", 1),
        val_temperature=_number(cfg, f"{ROLLOUT}.val_kwargs.temperature", 0.0),
        use_critic=_uses_critic(cfg),
        cliprange_value=_number(cfg, "critic.cliprange_value", 0.0),
        total_iterations=_total_iterations(cfg),
        save_freq=_integer(cfg, "trainer.save_freq", -1),
        test_freq=_integer(cfg, "trainer.test_freq", -1),
        val_before_train=_flag(cfg, "trainer.val_before_train"),
        val_only=_flag(cfg, "trainer.val_only"),
        resume_mode=_text(cfg, "trainer.resume_mode"),
        resume_from_path=_get(cfg, "trainer.resume_from_path"),
        output_dir=_text(cfg, "trainer.default_local_dir"),
        rollout_data_dir=_get(cfg, "trainer.rollout_data_dir"),
        loggers=_loggers(cfg),
        project_name=str(_get(cfg, "trainer.project_name")),
        experiment_name=str(_get(cfg, "trainer.experiment_name")),
        seed=_integer(cfg, "env.seed"),
        local=_local_section(cfg),
    )


def _typed(cfg: DictConfig, key: str, convert) -> Any:
    """verl's dataclass of the section at ``key``; its own checks (e.g. both micro-batch keys set) become a
    ConfigError naming the section."""
    try:
        return convert(OmegaConf.select(cfg, key))
    except ConfigError:
        raise
    except Exception as exc:  # verl raises ValueError / AssertionError / Hydra's InstantiationException
        raise ConfigError(f"{key}: verl refuses this section: {exc}") from exc


def _uses_critic(cfg: DictConfig) -> bool:
    return bool(_flag_or_none(cfg, "critic.enable")) or _get(cfg, "algorithm.adv_estimator") == "gae"


def _flag_or_none(cfg: DictConfig, key: str) -> bool | None:
    """verl's ``critic.enable`` is null by default (null: decided by the estimator)."""
    value = _get(cfg, key)
    if value is not None and not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} must be true, false or null")
    return value


def _total_iterations(cfg: DictConfig) -> int:
    steps = _integer(cfg, "trainer.total_training_steps", 1, nullable=True)
    epochs = _integer(cfg, "trainer.total_epochs", 1)
    return total_iterations(_integer(cfg, "data.train_batch_size", 1), steps, epochs)


def check_engine_config(cfg: DictConfig) -> None:
    """Every check on the keys the embedded engine reads, without verl or torch (ConfigError naming the key)."""
    _local_section(cfg)
    _loggers(cfg)
    _check_actor_section(cfg)
    _check_filter_groups(cfg)
    model_path = _text(cfg, f"{MODEL}.path")
    if not model_path:
        raise ConfigError(f"{MODEL}.path must not be empty")
    _integer(cfg, f"{MODEL}.lora_rank", 0)
    _number(cfg, f"{MODEL}.lora_alpha", 0.0, low_inclusive=False)
    _flag(cfg, f"{MODEL}.enable_gradient_checkpointing")
    _number(cfg, f"{ROLLOUT}.temperature", 0.0, low_inclusive=False)
    _number(cfg, f"{ROLLOUT}.top_p", 0.0, 1.0, low_inclusive=False)
    _integer(cfg, f"{ROLLOUT}.top_k", -1)
    _integer(cfg, f"{ROLLOUT}.response_length", 1)
    _number(cfg, f"{ROLLOUT}.val_kwargs.temperature", 0.0)
    _number(cfg, "critic.optim.lr", 0.0, low_inclusive=False)
    _number(cfg, "critic.cliprange_value", 0.0)
    _uses_critic(cfg)
    _total_iterations(cfg)
    _integer(cfg, "trainer.save_freq", -1)
    _integer(cfg, "trainer.test_freq", -1)
    _flag(cfg, "trainer.val_before_train")
    _flag(cfg, "trainer.val_only")
    _integer(cfg, "env.seed")
    resume_mode = _text(cfg, "trainer.resume_mode")
    check_choice("trainer.resume_mode", resume_mode, ["disable", "auto", "resume_path"])
    if resume_mode == "resume_path":
        check_resume_path(_get(cfg, "trainer.resume_from_path"))
    check_model_path(f"{MODEL}.path", model_path)
    critic_path = OmegaConf.select(cfg, "critic.model.path", default=None)
    if _uses_critic(cfg) and critic_path and not str(critic_path).startswith("~/models/"):  # verl's placeholder
        check_model_path("critic.model.path", str(critic_path))


def engine_settings(cfg: DictConfig) -> EngineSettings:
    """:func:`read_engine_settings` plus the checks against verl's registries."""
    settings = read_engine_settings(cfg)
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    check_choice(f"{ACTOR}.policy_loss.loss_mode", settings.actor.policy_loss.loss_mode, sorted(POLICY_LOSS_REGISTRY))
    return settings


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
