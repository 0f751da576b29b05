"""How verl cuts a step batch across data-parallel ranks, and the micro-batch sizes that always divide it.

A forge iteration yields any number of step rows (episodes end at different steps). verl's V1 trainer pads them
(``_balance_batch``) to a multiple of ``lcm(dp, ppo_mini_batch_size x rollout.n)`` and hands each data-parallel
rank an equal share; each rank then cuts its share of a log-prob pass, and each of its mini-batches
(``ppo_mini_batch_size x rollout.n / dp`` rows) of the update, into micro-batches of
``*micro_batch_size_per_gpu`` rows, asserting that they divide it ("data size must be divisible by
force_group_size * micro_batch_size_per_gpu", in the middle of the first iteration). A micro-batch size divides
every padded batch exactly when it divides the per-rank mini-batch, so that is the rule checked here, before Ray
starts, on any device (a GPU run with micro-batches > 1 and dp > 1 meets the same assertion). verl's own
``validate_config`` checks the global sizes only.

Two sizes are derived instead of refused (:func:`derive_batch_sizes`), each change printed at start-up:

* ``ppo_mini_batch_size`` (actor, and the critic's when it trains) above ``data.train_batch_size`` becomes
  ``data.train_batch_size``: verl refuses a mini-batch of more tasks than the batch has, which the embedded engine
  allows (there it means the whole batch in one optimizer step); on verl an iteration's step rows are then cut
  into mini-batches of ``B x rollout.n`` rows, about one optimizer step per step of an episode;
* a micro-batch size above the rows it cuts (a rank's mini-batch, a rank's share of a padded batch) becomes that
  number of rows: a micro-batch never holds more rows than there are, so nothing but the size changes. A smaller
  size that does not divide those rows is still refused (:func:`check_micro_batches`);
* an unset log-prob micro-batch size (the rollout's and the reference's ``log_prob_micro_batch_size_per_gpu``,
  which verl requires and the composed defaults leave null) is the actor's ``ppo_micro_batch_size_per_gpu``, the
  size the embedded engine runs every pass with, lowered as above where needed.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from omegaconf import OmegaConf

from agent_system.config_checks import ConfigError

ACTOR, CRITIC = "actor_rollout_ref.actor", "critic"


def data_parallel_size(cfg: Any) -> int:
    """The actor's data-parallel size with an FSDP strategy: the trainer's ranks over the Ulysses group."""
    ranks = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
    sp = int(OmegaConf.select(cfg, f"{ACTOR}.ulysses_sequence_parallel_size", default=1) or 1)
    return max(ranks // sp, 1)


def mini_batch_rows(cfg: Any, section: str, group_size: int) -> int:
    """Rows of one update mini-batch of ``section`` (actor or critic) over all ranks: ``ppo_mini_batch_size x
    rollout.n``, which the data-parallel ranks must share equally."""
    mini = int(OmegaConf.select(cfg, f"{section}.ppo_mini_batch_size"))
    rows, dp = mini * int(group_size), data_parallel_size(cfg)
    if rows % dp:
        raise ConfigError(
            f"{section}.ppo_mini_batch_size ({mini}) x env.rollout.n ({group_size}) = {rows} rows per mini-batch "
            f"must divide among the {dp} data-parallel ranks (trainer.n_gpus_per_node x trainer.nnodes / "
            "ulysses_sequence_parallel_size)"
        )
    return rows


def _uses_critic(cfg: Any) -> bool:
    from verl.trainer.ppo.utils import need_critic

    if OmegaConf.select(cfg, CRITIC, default=None) is None:
        return False
    with warnings.catch_warnings():  # verl warns that it disables the critic; verl's own start-up says it again
        warnings.simplefilter("ignore")
        return bool(need_critic(cfg))


def micro_batch_rules(cfg: Any, group_size: int) -> list[tuple[str, str, int, str]]:
    """(micro-batch key, its dynamic-batch key, the rows it must divide, what they are) for every pass."""
    dp = data_parallel_size(cfg)
    actor_rows = mini_batch_rows(cfg, ACTOR, group_size)
    critic_rows = mini_batch_rows(cfg, CRITIC, group_size) if _uses_critic(cfg) else None
    minis = [actor_rows] + ([critic_rows] if critic_rows else [])
    # a log-prob pass gets the whole padded batch: a multiple of lcm(dp, the mini-batches) rows, split in dp; while
    # trainer.critic_warmup holds the actor back, verl pads without the actor's mini-batch
    shares = [math.lcm(dp, *minis) // dp]
    if int(OmegaConf.select(cfg, "trainer.critic_warmup", default=0) or 0) > 0:
        shares.append(math.lcm(dp, *minis[1:]) // dp)
    share = math.gcd(*shares)
    what_share = f"of any padded step batch (a multiple of {share} rows per rank)"
    rules = [
        (f"{ACTOR}.ppo_micro_batch_size_per_gpu", f"{ACTOR}.use_dynamic_bsz", actor_rows // dp,
         f"per rank in an actor mini-batch ({ACTOR}.ppo_mini_batch_size x env.rollout.n / {dp} ranks)"),
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
         "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", share, what_share),
        ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "actor_rollout_ref.ref.log_prob_use_dynamic_bsz",
         share, what_share),
    ]
    if critic_rows:
        rules += [
            (f"{CRITIC}.ppo_micro_batch_size_per_gpu", f"{CRITIC}.use_dynamic_bsz", critic_rows // dp,
             f"per rank in a critic mini-batch ({CRITIC}.ppo_mini_batch_size x env.rollout.n / {dp} ranks)"),
            (f"{CRITIC}.forward_micro_batch_size_per_gpu", f"{CRITIC}.use_dynamic_bsz", share, what_share),
        ]
    return rules


def derive_batch_sizes(cfg: Any, train_batch_size: int, group_size: int) -> list[str]:
    """Lower, in ``cfg`` (in place), the mini-batch and micro-batch sizes verl would refuse for being too large (see
    the module docstring); returns one line per change. Sizes verl cuts by tokens (``use_dynamic_bsz``) stay."""
    from omegaconf import open_dict

    changes = []

    def lower(key: str, value: int, why: str) -> None:
        old = OmegaConf.select(cfg, key)
        with open_dict(cfg):
            OmegaConf.update(cfg, key, value, merge=False)
        changes.append(f"{key}: {old} -> {value} ({why})")

    sections = [ACTOR] + ([CRITIC] if _uses_critic(cfg) else [])
    # a whole batch as the mini-batch only where the ranks can share its rows; elsewhere verl's own check refuses
    # the config before Ray starts, in one line (main.check_with_verl)
    shared = train_batch_size * group_size % data_parallel_size(cfg) == 0
    for section in sections:
        mini = OmegaConf.select(cfg, f"{section}.ppo_mini_batch_size", default=None)
        dynamic = bool(OmegaConf.select(cfg, f"{section}.use_dynamic_bsz", default=False))
        if mini is not None and not dynamic and shared and int(mini) > train_batch_size:
            lower(f"{section}.ppo_mini_batch_size", train_batch_size,
                  f"verl needs data.train_batch_size ({train_batch_size}) >= ppo_mini_batch_size")
    if str(OmegaConf.select(cfg, f"{ACTOR}.strategy", default="fsdp")) == "megatron":
        return changes
    try:
        rules = micro_batch_rules(cfg, group_size)
    except ConfigError:  # rows that the ranks cannot share: check_micro_batches names the key
        return changes
    actor_micro = OmegaConf.select(cfg, f"{ACTOR}.ppo_micro_batch_size_per_gpu", default=None)
    for key, dynamic_key, rows, what in rules:
        if bool(OmegaConf.select(cfg, dynamic_key, default=False)):
            continue
        micro = OmegaConf.select(cfg, key, default=None)
        deprecated = OmegaConf.select(cfg, key.removesuffix("_per_gpu"), default=None)
        if micro is None and deprecated is None and key.endswith("log_prob_micro_batch_size_per_gpu") and actor_micro:
            lower(key, min(int(actor_micro), rows), f"unset: the actor's ppo_micro_batch_size_per_gpu, as the "
                  f"embedded engine's passes use, at most the {rows} rows {what}")
        elif micro is not None and int(micro) > rows:
            lower(key, rows, f"a micro-batch holds at most the {rows} rows {what}")
    return changes


def check_micro_batches(cfg: Any, group_size: int) -> None:
    """Refuse micro-batch sizes that do not divide what verl cuts into micro-batches (see the module docstring);
    each error names the key. Megatron actors (their own data-parallel layout) are left to verl."""
    if str(OmegaConf.select(cfg, f"{ACTOR}.strategy", default="fsdp")) == "megatron":
        return
    for key, dynamic_key, rows, what in micro_batch_rules(cfg, group_size):
        micro = OmegaConf.select(cfg, key, default=None)
        if micro is None or bool(OmegaConf.select(cfg, dynamic_key, default=False)):
            continue
        if rows % int(micro):
            divisors = [d for d in range(1, rows + 1) if rows % d == 0]
            raise ConfigError(
                f"{key}={micro} does not divide the {rows} rows {what}: verl would stop mid-iteration on 'data "
                f"size must be divisible by force_group_size * micro_batch_size_per_gpu'. Use one of {divisors}, "
                f"or set {dynamic_key}=true"
            )
