"""The embedded engine's sections of the run config: ``trainer.local`` (:class:`LocalSettings`) and the policy it
trains (:class:`PolicySection`), read by recipe/forge/run_config.py.

The engine reads verl's own keys wherever they exist (``actor_rollout_ref.actor.*``, ``.model.*``, ``critic.*``,
``algorithm.filter_groups``): the actor, the critic optimizer and ``filter_groups`` are verl's typed configs, built
by verl from the composed config so that verl's defaults apply as they are. Their keys that this engine uses are
checked first on the plain config, before verl is imported.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from agent_system.config_checks import ConfigError, check_choice, check_int
from recipe.forge.config_reader import ConfigReader

COMPUTE_DTYPES = ("auto", "fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")
ACTOR = "actor_rollout_ref.actor"
MODEL = "actor_rollout_ref.model"
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_LOSS_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
LR_SCHEDULER_TYPES = ("constant", "cosine")  # verl's FSDP optimizer schedules
VERL_PLACEHOLDER_MODEL = "~/models/"  # verl's default critic.model.path: use the actor's model

# Estimators that need inputs a multi-turn step batch does not have: a greedy baseline rollout (remax) or
# several reward dimensions (gdpo). They are rejected at start-up with this explanation.
UNSUPPORTED = {
    "remax": "needs reward_baselines from an extra greedy rollout per prompt, which the step-level rollout does not make",
    "gdpo": "normalises several reward dimensions separately; the environments give one scalar reward",
}


@dataclass(frozen=True)
class LocalSettings:
    """``trainer.local``: the embedded engine's own knobs (the prompt-only engine reads ``progress``)."""

    device: str = "auto"  # auto = cuda when available, else cpu
    compute_dtype: str = "fp32"  # fp32 | bf16 (autocast; weights and optimizer state stay fp32) | auto (bf16 if native)
    generation_batch_size: int = 64  # conversations decoded together
    recompute_old_log_probs: bool = False  # False: the rollout's log-probs are the PPO "old" log-probs
    num_threads: int = 0  # torch CPU threads; 0 = torch's default
    progress: bool = True  # tqdm bars
    response_prefix: str = ""  # prefilled start of every response, e.g. "<action>" (a format aid for tiny models)
    freeze_policy: bool = False  # True: roll out and evolve the library, never update the policy (library alone)
    share_prompt_prefix: bool = True  # run the prompts' shared tokens once per batch (shared_prefix.py)

    def __post_init__(self):
        check_choice("trainer.local.device", self.device, DEVICES)
        check_choice("trainer.local.compute_dtype", self.compute_dtype, COMPUTE_DTYPES)
        check_int("trainer.local.generation_batch_size", self.generation_batch_size, 1)
        check_int("trainer.local.num_threads", self.num_threads, 0)
        for name in ("recompute_old_log_probs", "progress", "freeze_policy", "share_prompt_prefix"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"trainer.local.{name}={getattr(self, name)!r} must be true or false")


def read_local(reader: ConfigReader) -> LocalSettings:
    return LocalSettings(**reader.section("trainer.local", [f.name for f in dataclasses.fields(LocalSettings)]))


@dataclass(frozen=True)
class PolicySection:
    """The policy the embedded engine trains and how. ``actor`` (verl's FSDPActorConfig: optim, policy_loss, ...),
    ``critic_optim`` (verl's FSDPOptimizerConfig of ``critic.optim``) and ``filter_groups`` (verl's
    FilterGroupsConfig) are None until :func:`build_policy_section` has verl build them."""

    model_path: str
    lora_rank: int
    lora_alpha: float
    target_modules: Any
    gradient_checkpointing: bool
    use_critic: bool  # critic.enable, or null and the gae estimator
    critic_model_path: str | None  # None: the actor's model
    cliprange_value: float
    actor: Any = None
    critic_optim: Any = None
    filter_groups: Any = None


def _check_actor_keys(reader: ConfigReader) -> None:
    """The actor keys this engine uses, checked on the plain config (verl's dataclass is built later)."""
    optim = f"{ACTOR}.optim"
    reader.number(f"{optim}.lr", 0.0, low_inclusive=False)
    reader.number(f"{optim}.weight_decay", 0.0)
    reader.pair_of_fractions(f"{optim}.betas")
    reader.integer(f"{optim}.lr_warmup_steps", -1, nullable=True)
    reader.number(f"{optim}.lr_warmup_steps_ratio", 0.0, 1.0)
    reader.choice(f"{optim}.lr_scheduler_type", LR_SCHEDULER_TYPES)
    reader.number(f"{ACTOR}.grad_clip", 0.0, low_inclusive=False)
    reader.integer(f"{ACTOR}.ppo_mini_batch_size", 1)
    per_gpu = reader.integer(f"{ACTOR}.ppo_micro_batch_size_per_gpu", 1, nullable=True)
    if per_gpu is None and reader.integer(f"{ACTOR}.ppo_micro_batch_size", 1, nullable=True) is None:
        raise ConfigError(f"set {ACTOR}.ppo_micro_batch_size_per_gpu (step samples per forward/backward pass)")
    reader.integer(f"{ACTOR}.ppo_epochs", 1)
    reader.flag(f"{ACTOR}.shuffle")
    reader.choice(f"{ACTOR}.loss_agg_mode", LOSS_AGG_MODES)
    check_choice(f"{ACTOR}.kl_loss_type", str(reader.get(f"{ACTOR}.kl_loss_type")).rstrip("+"), KL_LOSS_TYPES)
    reader.number(f"{ACTOR}.kl_loss_coef", 0.0)
    reader.number(f"{ACTOR}.entropy_coeff")
    reader.flag(f"{ACTOR}.use_kl_loss")
    reader.text(f"{ACTOR}.policy_loss.loss_mode")
    reader.number("critic.optim.lr", 0.0, low_inclusive=False)


def _check_filter_groups(reader: ConfigReader) -> None:
    groups = "algorithm.filter_groups"
    reader.integer(f"{groups}.max_num_gen_batches")  # verl: a non-positive value means no limit
    inflight = reader.integer(f"{groups}.max_inflight_gen_batches", 1)
    if reader.flag(f"{groups}.enable") and inflight != 1:
        raise ConfigError(
            f"{groups}.max_inflight_gen_batches={inflight}: the embedded engine rolls out one generation batch "
            "at a time, so only 1 is possible here; set it to 1, or run the verl engine (trainer.engine=verl), "
            "whose replay buffer keeps several batches in flight")


def read_policy_keys(reader: ConfigReader) -> PolicySection:
    """Every policy key the embedded engine reads, checked without verl or torch (ConfigError naming the key)."""
    _check_actor_keys(reader)
    _check_filter_groups(reader)
    model_path = reader.text(f"{MODEL}.path")
    check_model_path(f"{MODEL}.path", model_path)
    use_critic = bool(reader.flag("critic.enable", nullable=True)) or reader.get("algorithm.adv_estimator") == "gae"
    critic_path = reader.get("critic.model.path") if reader.get("critic.model") is not None else None
    critic_path = None if not critic_path or str(critic_path).startswith(VERL_PLACEHOLDER_MODEL) else str(critic_path)
    if use_critic and critic_path:
        check_model_path("critic.model.path", critic_path)
    return PolicySection(
        model_path=model_path,
        lora_rank=reader.integer(f"{MODEL}.lora_rank", 0),
        lora_alpha=reader.number(f"{MODEL}.lora_alpha", 0.0, low_inclusive=False),
        target_modules=reader.get(f"{MODEL}.target_modules"),
        gradient_checkpointing=reader.flag(f"{MODEL}.enable_gradient_checkpointing"),
        use_critic=use_critic,
        critic_model_path=critic_path,
        cliprange_value=reader.number("critic.cliprange_value", 0.0),
    )


def build_policy_section(reader: ConfigReader, keys: PolicySection, algorithm: Any, group_size: int) -> PolicySection:
    """``keys`` with verl's typed actor, critic optimizer and filter_groups, checked against verl's registries
    (the policy loss) and the estimators this engine runs. The actor's ``rollout_n`` is ``group_size`` (the G
    environment copies per task), as the verl engine sets verl's ``rollout.n``."""
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
    from verl.utils.config import omega_conf_to_dataclass

    typed = {"actor": reader.typed(ACTOR, omega_conf_to_dataclass, rollout_n=group_size),
             "critic_optim": reader.typed("critic.optim", omega_conf_to_dataclass),
             "filter_groups": reader.typed("algorithm.filter_groups", omega_conf_to_dataclass)}
    check_choice(f"{ACTOR}.policy_loss.loss_mode", typed["actor"].policy_loss.loss_mode, sorted(POLICY_LOSS_REGISTRY))
    check_estimator(algorithm.adv_estimator)
    return dataclasses.replace(keys, **typed)


def supported_estimators() -> list[str]:
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    from recipe.forge.estimator_registry import register_with_verl

    register_with_verl()
    return sorted(set(ADV_ESTIMATOR_REGISTRY) - set(UNSUPPORTED))


def check_estimator(name: str) -> None:
    if name in UNSUPPORTED:
        raise ConfigError(f"algorithm.adv_estimator={name!r} is not supported by the local engine: {UNSUPPORTED[name]}")
    if name not in supported_estimators():
        raise ConfigError(f"algorithm.adv_estimator={name!r}; choose one of {supported_estimators()}")


def check_model_path(key: str, path: str) -> None:
    """A model path must be the SmolLM2 alias, an existing local model folder, or a hub id already in the local
    Hugging Face cache (nothing is downloaded at start-up: a missing model is an error here, not a minute of
    network retries later)."""
    from recipe.forge.hf.model_paths import model_path_problem

    if not path:
        raise ConfigError(f"{key} must not be empty")
    problem = model_path_problem(path)
    if problem:
        raise ConfigError(f"{key}={path!r} {problem}")
