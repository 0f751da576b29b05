"""The embedded engine reads verl's keys with verl's meaning (issue 12): run length from total_epochs,
max_num_gen_batches=0 as no limit, verl's lr warm-up, ppo_mini_batch_size in tasks x env.rollout.n step samples,
max_inflight_gen_batches refused; and former metric names read as current ones."""

import json

import pytest

from agent_system.config_checks import ConfigError
from recipe.forge.engines.local.trainer import Components, LocalTrainer
from recipe.forge.runs.tracking import read_metrics
from recipe.forge.main_forge import validate
from recipe.forge.run_config import check_run_config

pytestmark = pytest.mark.timeout(300)


def test_total_epochs_counts_epochs_of_the_task_set_not_iterations(compose_cfg, run_overrides, tmp_path):
    cfg = compose_cfg(run_overrides(tmp_path) + ["trainer.total_training_steps=null", "trainer.total_epochs=2",
                                                 "data.train_batch_size=16"])
    # an epoch is the verl engine's 10,000 training tasks, 10,000 // 16 = 625 iterations of 16 tasks
    assert validate(cfg).trainer.total_iterations == 2 * 625
    cfg = compose_cfg(run_overrides(tmp_path) + ["trainer.total_training_steps=7", "trainer.total_epochs=2"])
    assert validate(cfg).trainer.total_iterations == 7  # set: total_training_steps wins, as in verl


def test_ppo_mini_batch_size_counts_tasks_times_the_group(compose_cfg, run_overrides, tmp_path):
    cfg = compose_cfg(run_overrides(tmp_path) + ["actor_rollout_ref.actor.ppo_mini_batch_size=3", "env.rollout.n=5"])
    actor = validate(cfg).policy.actor  # verl's unit: tasks, each of rollout_n = env.rollout.n step samples
    assert (actor.ppo_mini_batch_size, actor.rollout_n) == (3, 5)


def test_max_inflight_gen_batches_above_one_is_refused_with_dynamic_sampling(compose_cfg, run_overrides, tmp_path):
    overrides = run_overrides(tmp_path) + ["algorithm.filter_groups.max_inflight_gen_batches=2"]
    check_run_config(compose_cfg(overrides))  # no dynamic sampling: the key is not used
    with pytest.raises(ConfigError, match="max_inflight_gen_batches=2.*one generation batch at a time"):
        check_run_config(compose_cfg(overrides + ["algorithm.filter_groups.enable=true"]))


def test_a_missing_key_is_named_not_defaulted(compose_cfg, run_overrides, tmp_path):
    cfg = compose_cfg(run_overrides(tmp_path) + ["~actor_rollout_ref.rollout.top_p"])
    with pytest.raises(ConfigError, match="actor_rollout_ref.rollout.top_p is missing"):
        check_run_config(cfg)


def test_trainer_reads_no_limit_warmup_and_mini_batch_rows(compose_cfg, run_overrides, tmp_path, taught_policy):
    cfg = compose_cfg(run_overrides(tmp_path, iterations=4) + [
        "algorithm.filter_groups.enable=true", "algorithm.filter_groups.max_num_gen_batches=0",
        "actor_rollout_ref.actor.optim.lr_warmup_steps=2", "actor_rollout_ref.actor.ppo_mini_batch_size=1"])
    trainer = LocalTrainer(validate(cfg), Components(policy=taught_policy))
    assert trainer.collector.dynamic_sampling and trainer.collector.max_num_gen_batches == 0  # 0 = no limit
    assert trainer.updater.mini_batch_rows == 1 * 2  # 1 task x env.rollout.n=2 step samples
    # verl's constant schedule with 2 warm-up steps: lr x k/2 for k < 2, then lr; stepped once per iteration
    lr = 1e-3
    seen = [trainer.optimizer.param_groups[0]["lr"]]
    for _ in range(3):
        seen.append(trainer._step_lr_schedulers()["actor/lr"])
    assert seen == pytest.approx([0.0, lr / 2, lr, lr])
    trainer._build_lr_schedulers(done=1)  # a run resumed after one iteration continues the schedule
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(lr / 2)


def test_warmup_ratio_and_cosine_follow_verl(compose_cfg, run_overrides, tmp_path, taught_policy):
    cfg = compose_cfg(run_overrides(tmp_path, iterations=4) + [
        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.5", "actor_rollout_ref.actor.optim.lr_scheduler_type=cosine",
        "actor_rollout_ref.actor.optim.min_lr_ratio=0.0"])
    trainer = LocalTrainer(validate(cfg), Components(policy=taught_policy))
    lrs = [trainer.optimizer.param_groups[0]["lr"]] + [trainer._step_lr_schedulers()["actor/lr"] for _ in range(3)]
    # warm-up int(0.5 x 4) = 2 steps, then a half cosine over the remaining 2: 1, (1 + cos(pi/2)) / 2 = 0.5
    assert lrs == pytest.approx([0.0, 0.5e-3, 1e-3, 0.5e-3])


def test_former_metric_names_are_read_as_current_ones(tmp_path):
    old = {"iteration": 3, "success_rate": 0.5, "timing/rollout_s": 2.0, "timing/iteration_s": 3.0,
           "val/success_rate": 0.25, "episode/success_rate": 0.9, "timing/forge_share": 0.01}
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps(old) + "\n" + json.dumps({"iteration": 4, "timing_s/gen": 1.0}) + "\n")
    first, second = read_metrics(path)
    assert first["timing_s/gen"] == 2.0 and first["timing_s/step"] == 3.0 and first["perf/forge_time_share"] == 0.01
    assert first["success_rate"] == 0.5  # a current name present wins over a former one (episode/success_rate)
    assert first["val/success_rate"] == 0.25 and "timing/rollout_s" not in first
    assert second == {"iteration": 4, "timing_s/gen": 1.0}


def test_verl_refusing_the_actor_section_is_a_config_error_naming_it(compose_cfg, run_overrides, tmp_path):
    cfg = compose_cfg(run_overrides(tmp_path) + ["actor_rollout_ref.actor.ppo_micro_batch_size=4"])  # both set
    with pytest.raises(ConfigError, match="(?s)actor_rollout_ref.actor: verl refuses this section.*both .actor.ppo_micro_batch_size"):
        validate(cfg)


@pytest.mark.parametrize("copies, expected", [([], 2), (["actor_rollout_ref.rollout.val_kwargs.n=3"], 3)])
def test_validation_runs_val_kwargs_n_copies_of_each_held_out_task(compose_cfg, run_overrides, tmp_path,
                                                                  taught_policy, copies, expected):
    """verl's val_kwargs.n, on both engines; its default is env.rollout.n (2 here), as in training."""
    cfg = compose_cfg(run_overrides(tmp_path) + copies)
    trainer = LocalTrainer(validate(cfg), Components(policy=taught_policy))
    metrics = trainer.validate()
    assert metrics["val/num_trajectories"] == metrics["val_no_library/num_trajectories"] == 1 * expected


def test_a_bare_prompt_over_rollout_prompt_length_stops_the_run_naming_the_key(compose_cfg, run_overrides, tmp_path,
                                                                              taught_policy):
    cfg = compose_cfg(run_overrides(tmp_path) + ["actor_rollout_ref.rollout.prompt_length=8"])
    trainer = LocalTrainer(validate(cfg), Components(policy=taught_policy))
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.rollout.prompt_length=8 is shorter than the prompt"):
        trainer.train_iteration(0)
