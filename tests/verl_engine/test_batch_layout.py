"""Micro-batch sizes against data parallelism, refused at start-up (before Ray starts) with the key named.

verl pads a step batch to a multiple of lcm(dp, ppo_mini_batch_size x rollout.n) and each rank cuts its share
into micro-batches; a size that does not divide a rank's mini-batch stops verl mid-iteration with an assertion.
The world-size-2 CPU run that first met it: scripts/verl_cpu_smoke.py with trainer.n_gpus_per_node=2 and
micro-batches of 4 (2 tasks x 2 copies per mini-batch = 2 rows per rank).
"""

from __future__ import annotations

import pytest

from agent_system.config_checks import ConfigError

SMALL = ["trainer.engine=verl", "env.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
         "actor_rollout_ref.actor.use_dynamic_bsz=false", "trainer.n_gpus_per_node=1", "trainer.nnodes=1"]


def overrides_with(*overrides: str) -> list[str]:
    """SMALL with ``overrides`` replacing its keys."""
    merged = dict(item.split("=", 1) for item in SMALL)
    merged.update(item.split("=", 1) for item in overrides)
    return [f"{key}={value}" for key, value in merged.items()]


def load(run_config_factory, *overrides: str):
    from recipe.forge.run_config import load_run_config

    return load_run_config(run_config_factory(overrides_with(*overrides)))


@pytest.mark.parametrize(
    "overrides, message",
    [
        # 3 tasks x 2 copies = 6 rows per mini-batch, 3 per rank at world size 2
        (["trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.ppo_mini_batch_size=3",
          "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"],
         r"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 does not divide the 3 rows per rank"),
        (["trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.ppo_mini_batch_size=3",
          "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
          "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2"],
         r"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2 does not divide the 3 rows"),
        (["trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.ppo_mini_batch_size=3",
          "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "actor_rollout_ref.actor.use_kl_loss=true",
          "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2"],
         r"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2 does not divide"),
        # two nodes of one rank are two data-parallel ranks too
        (["trainer.nnodes=2", "actor_rollout_ref.actor.ppo_mini_batch_size=3",
          "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"],
         r"ppo_micro_batch_size_per_gpu=2 does not divide the 3 rows per rank"),
        # 4 rows cannot be shared by 3 ranks at all
        (["trainer.n_gpus_per_node=3", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1"],
         r"actor_rollout_ref.actor.ppo_mini_batch_size \(2\) x env.rollout.n \(2\) = 4 rows .* 3 data-parallel ranks"),
        # a critic's mini-batches and forward passes (gae), 3 tasks x 2 copies = 6 rows: 3 per rank
        (["trainer.n_gpus_per_node=2", "algorithm.adv_estimator=gae", "critic.ppo_mini_batch_size=3",
          "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "critic.ppo_micro_batch_size_per_gpu=2"],
         r"critic.ppo_micro_batch_size_per_gpu=2 does not divide the 3 rows per rank in a critic mini-batch"),
    ],
)
def test_micro_batches_that_do_not_divide_a_ranks_share_are_refused(run_config_factory, overrides, message):
    with pytest.raises(ConfigError, match=message):
        load(run_config_factory, *overrides)


def test_micro_batches_that_divide_are_accepted(run_config_factory):
    # the same micro-batches of 4 are right at world size 1 (4 rows per mini-batch on the one rank)
    load(run_config_factory, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
         "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4")
    # at world size 2, 2 rows per rank: 1 or 2 divide
    load(run_config_factory, "trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
         "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1")
    # with dynamic batch sizes verl cuts by tokens: micro sizes are not used
    load(run_config_factory, "trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.use_dynamic_bsz=true",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4")


def test_the_refusal_comes_before_ray_starts(run_config_factory, tmp_path):
    import ray

    from recipe.forge.engines.verl.main import run_verl
    from recipe.forge.main_forge import validate

    cfg = run_config_factory(overrides_with(f"trainer.default_local_dir={tmp_path}", "trainer.n_gpus_per_node=2",
                                            "actor_rollout_ref.actor.ppo_mini_batch_size=3",
                                            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"))
    with pytest.raises(ConfigError, match="ppo_micro_batch_size_per_gpu=2"):
        run_verl(validate(cfg))
    assert not ray.is_initialized() and not (tmp_path / "forge_tasks").exists()


def derived(run_config_factory, *overrides: str):
    """verl's config of a run (the engine's batch-size derivation applied) and the lines that say what changed."""
    from recipe.forge.engines.verl.settings import verl_config
    from recipe.forge.run_config import load_run_config

    changes: list[str] = []
    cfg = verl_config(load_run_config(run_config_factory(list(overrides))), changes)
    return cfg, changes


def test_a_mini_batch_above_the_batch_is_lowered_to_it_and_said(run_config_factory):
    # the defaults: 16 tasks, ppo_mini_batch_size 32, which verl refuses (train_batch_size must be >= it)
    cfg, changes = derived(run_config_factory, "trainer.engine=verl")
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 16
    assert any(line.startswith("actor_rollout_ref.actor.ppo_mini_batch_size: 32 -> 16") for line in changes)
    # the unset log-prob micro-batches take the actor's size, as the embedded engine's passes do
    assert cfg.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu == 16
    assert cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu == 16
    # a size verl accepts is left as it is, and nothing is said
    cfg, changes = derived(run_config_factory, *overrides_with("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
                                                               "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
                                                               "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4"))
    assert changes == [] and cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 2


def test_the_main_job_on_verl_gets_sizes_verl_runs(run_config_factory):
    # 2 tasks x 4 copies: mini-batch 64 -> 2 (8 rows), micro-batches of 16 -> the 8 rows there are
    cfg, changes = derived(run_config_factory, "+experiment=main_job", "trainer.engine=verl", "trainer.n_gpus_per_node=1")
    actor = cfg.actor_rollout_ref.actor
    assert (actor.ppo_mini_batch_size, actor.ppo_micro_batch_size_per_gpu) == (2, 8)
    assert cfg.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu == 8
    assert len(changes) == 4 and all(" -> " in line and "(" in line for line in changes)


def test_a_batch_the_ranks_cannot_share_is_left_to_verls_one_line_refusal(run_config_factory, tmp_path):
    # 2 tasks x 2 copies on verl's 8 ranks: no mini-batch of whole tasks is shared equally, so nothing is derived
    # and verl's own check stops the run before Ray in one line (its rows, 4, against its 8 ranks)
    from recipe.forge.engines.verl.main import check_with_verl, wired_verl_config
    from recipe.forge.run_config import load_run_config

    overrides = ["trainer.engine=verl", "data.train_batch_size=2", "env.rollout.n=2", "trainer.device=cpu",
                 f"trainer.default_local_dir={tmp_path}"]
    cfg, changes = derived(run_config_factory, *overrides)
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 32
    assert not any(line.startswith("actor_rollout_ref.actor.ppo_mini_batch_size") for line in changes)
    with pytest.raises(ConfigError, match="train_batch_size") as refused:
        check_with_verl(wired_verl_config(load_run_config(run_config_factory(overrides))))
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("overrides", [["trainer.engine=verl"],
                                       ["+experiment=main_job", "trainer.engine=verl"]])
def test_the_engine_switch_passes_verls_own_check_or_stops_with_one_line(run_config_factory, overrides, tmp_path):
    """``trainer.engine=verl`` with the defaults and with the main job: verl's own start-up check accepts the wired
    config, and on this machine's CPU the run either goes on to Ray or stops before it with one line naming the keys
    (verl's defaults ask for 8 training processes)."""
    import os

    import ray

    from recipe.forge.engines.verl.main import check_cpu_ranks, check_with_verl, wired_verl_config
    from recipe.forge.run_config import load_run_config

    run = load_run_config(run_config_factory(overrides + ["trainer.device=cpu", f"trainer.default_local_dir={tmp_path}"]))
    cfg = wired_verl_config(run)
    check_with_verl(cfg)
    cores = len(os.sched_getaffinity(0))
    if int(cfg.trainer.n_gpus_per_node) > cores:
        with pytest.raises(ConfigError) as refused:
            check_cpu_ranks(cfg)
        assert "\n" not in str(refused.value) and "trainer.n_gpus_per_node=1" in str(refused.value)
    check_cpu_ranks(cfg, cores=int(cfg.trainer.n_gpus_per_node))  # on a machine with the cores it goes on
    assert not ray.is_initialized() and not (tmp_path / "forge_tasks").exists()


def test_verls_own_refusal_is_one_config_error_line(run_config_factory, tmp_path):
    from recipe.forge.engines.verl.main import check_with_verl, wired_verl_config
    from recipe.forge.run_config import load_run_config

    cfg = wired_verl_config(load_run_config(run_config_factory(overrides_with(f"trainer.default_local_dir={tmp_path}"))))
    cfg.actor_rollout_ref.rollout.log_prob_micro_batch_size = 4  # beside the _per_gpu key: verl refuses both set
    with pytest.raises(ConfigError, match=r"^verl refuses the config: \[actor_rollout_ref.rollout\] You have set both"):
        check_with_verl(cfg)
