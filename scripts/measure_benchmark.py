"""Is an environment setting a useful benchmark for SmolLM2-135M on a CPU? Measured through the project's own code.

For a preset (``+experiment=NAME`` on ``forge_trainer.yaml``) and Hydra overrides, on ``--tasks`` held-out tasks
(the validation seeds, one copy each, so episodes are independent):

* ``base``: the frozen base policy, built and sampled as the embedded trainer does (``LocalTrainer``: its model,
  ``trainer.local.response_prefix``, stop string and token limit), at the validation temperature
  (``actor_rollout_ref.rollout.val_kwargs.temperature``) and, with ``--train-temperature``, at the training one:
  success rate with its 95% Wilson interval, mean episode length, valid-action ratio, prompt tokens per step and
  seconds per step (generation wall-clock over step samples);
* ``expert``: the environment's ``expert_action()`` on the same tasks (success, mean episode length);
* ``constant``: the best policy that answers one admissible action at every step (what a collapsed policy
  scores; NumberLine's ``+`` is the example);
* ``recurrence``: over the first ``--recurrence-tasks`` tasks in order, the share of steps whose anchor
  observation (the library's retrieval key) occurred in an earlier task: what a library can carry from one
  task to the next. Given under the base policy and under the expert;
* ``iteration`` (``--time-iteration``): one real training iteration of the preset as configured (its B x G,
  estimator and update; the library is empty in iteration 0): wall-clock, its phases, step samples, prompt
  tokens per sample. It runs last, after the base-policy measurement (it updates the weights).

    python scripts/measure_benchmark.py --preset main_job --tasks 64 --json
    python scripts/measure_benchmark.py --preset main_job --override env.gym_cards.target_max=9 \\
        --override env.max_steps=10 --tasks 64 --json
    python scripts/measure_benchmark.py --preset main_job --no-model --json     # expert / constant / recurrence
    python scripts/measure_benchmark.py --preset main_job --tiny --tasks 4 --json  # plumbing, random weights
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from agent_system.testing.policies import CountingGenerator, tagged
from recipe.forge.commands.eval.stats import wilson_interval

CONFIG_DIR = Path(__file__).resolve().parents[1] / "recipe" / "forge" / "config"


def compose_config(preset: str | None, overrides: list[str]):
    """The run config of ``forge_trainer.yaml`` (+ ``+experiment=<preset>``) with ``overrides``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    extra = ([f"+experiment={preset}"] if preset else []) + list(overrides)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name="forge_trainer", overrides=extra)


def recurrence_share(trajectories, tasks: int) -> float:
    """Share of the steps of the first ``tasks`` tasks (in rollout order) whose anchor observation occurred at a
    step of an earlier task; the copies of one task do not count for each other."""
    by_task: dict[str, list[str]] = {}
    for traj in trajectories:
        by_task.setdefault(traj.uid, []).extend(s.anchor_obs for s in traj.steps)
    seen: set[str] = set()
    recurring = total = 0
    for anchors in list(by_task.values())[:tasks]:
        recurring += sum(a in seen for a in anchors)
        total += len(anchors)
        seen.update(anchors)
    return recurring / total if total else 0.0


def episode_summary(batch, recurrence_tasks: int) -> dict:
    """Success (with its 95% interval), length, validity and recurrence of a rollout."""
    trajectories = batch.trajectories
    wins = sum(t.success for t in trajectories)
    low, high = wilson_interval(wins, len(trajectories))
    lengths = [t.length for t in trajectories]
    return {"episodes": len(trajectories), "success": wins / len(trajectories), "success_ci95": [low, high],
            "episode_length_mean": statistics.fmean(lengths), "episode_length_median": statistics.median(lengths),
            "share_episodes_4_steps_or_more": sum(n >= 4 for n in lengths) / len(lengths),
            "valid_action_ratio": batch.metrics.get("valid_action_ratio", float("nan")),
            "recurrence": recurrence_share(trajectories, recurrence_tasks), "steps": len(batch.steps)}


class ConstantGenerator(CountingGenerator):
    """Answers ``action`` at every step, well formed."""

    def __init__(self, action: str):
        super().__init__()
        self.action = action

    def respond(self, messages):
        return [tagged(self.action, think=None)] * len(messages)


def scripted_measurements(collector, envs, recurrence_tasks: int) -> dict:
    """The expert and the best constant-action policy on ``envs``' held-out tasks."""
    from agent_system.multi_turn_rollout.protocols import SamplingParams
    from agent_system.testing.policies import ExpertGenerator

    sampling = SamplingParams()
    expert = episode_summary(collector.collect(envs, ExpertGenerator(envs), sampling, dynamic_sampling=False),
                             recurrence_tasks)
    _, infos = envs.reset()
    actions = list(dict.fromkeys(a for info in infos for a in info.get("admissible_actions") or []))
    constant = {}
    for action in actions:
        batch = collector.collect(envs, ConstantGenerator(action), sampling, dynamic_sampling=False)
        constant[action] = sum(t.success for t in batch.trajectories) / len(batch.trajectories)
    best = max(constant, key=constant.get) if constant else None
    return {"expert": expert, "constant": {"best_action": best, "best_success": constant.get(best, 0.0),
                                           "by_action": constant}}


def measure(preset: str | None, overrides: list[str], tasks: int, recurrence_tasks: int, model: bool,
            train_temperature: bool, time_iteration: bool, tiny: bool) -> dict:
    from agent_system.environments import make_envs
    from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector

    cfg = compose_config(preset, overrides)
    probe_cfg = copy.deepcopy(cfg)
    probe_cfg.data.val_batch_size = tasks
    probe_cfg.env.rollout.n = 1
    _, probe_envs = make_envs(probe_cfg)
    result = {"preset": preset, "overrides": overrides, "env": str(cfg.env.env_name), "tasks": tasks,
              "max_steps": probe_envs.max_steps, **scripted_measurements(TrajectoryCollector(), probe_envs,
                                                                          recurrence_tasks)}
    if model:
        result.update(model_measurements(cfg, probe_envs, recurrence_tasks, train_temperature, time_iteration,
                                         tiny))
    probe_envs.close()
    return result


def model_measurements(cfg, probe_envs, recurrence_tasks: int, train_temperature: bool, time_iteration: bool,
                       tiny: bool) -> dict:
    """The base policy through ``LocalTrainer``'s own generator and sampling, then optionally one iteration."""
    from recipe.forge.engines.local.trainer import Components, LocalTrainer
    from recipe.forge.hf.tiny import script_policy
    from recipe.forge.main_forge import validate

    run = validate(cfg)
    components = Components(policy=script_policy(run.policy.model_path, tiny=True)) if tiny else None
    trainer = LocalTrainer(run, components)
    out = {"model": "tiny-random-llama" if tiny else run.policy.model_path,
           "response_prefix": run.local.response_prefix, "compute_dtype": trainer.compute_dtype}
    runs = [("base", True)] + ([("base_train_temperature", False)] if train_temperature else [])
    for name, validation in runs:
        sampling = run.rollout.sampling(validation=validation)
        started = time.perf_counter()
        batch = trainer.collector.collect(probe_envs, trainer.generator, sampling, dynamic_sampling=False)
        wall = time.perf_counter() - started
        out[name] = {**episode_summary(batch, recurrence_tasks), "temperature": sampling.temperature,
                     "seconds_per_step": wall / max(1, len(batch.steps)),
                     "prompt_tokens_per_step": statistics.fmean(len(s.prompt_ids) for s in batch.steps)}
    if time_iteration:
        started = time.perf_counter()
        metrics = trainer.train_iteration(0)
        out["iteration"] = {"wall_s": time.perf_counter() - started,
                            "tasks_x_copies": [trainer.train_envs.num_tasks, trainer.train_envs.group_n],
                            "step_samples": metrics.get("batch/num_samples"),
                            "prompt_tokens_per_sample": metrics.get("tokens/prompt_mean"),
                            "success_rate": metrics.get("success_rate"),
                            **{k: v for k, v in metrics.items() if k.startswith("timing_s/")}}
    trainer.train_envs.close()
    trainer.val_envs.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="main_job", help="an experiment preset (recipe/forge/config/experiment/)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a Hydra override after the preset (repeatable), e.g. env.max_steps=10")
    parser.add_argument("--tasks", type=int, default=64, help="held-out tasks, one episode each")
    parser.add_argument("--recurrence-tasks", type=int, default=16)
    parser.add_argument("--no-model", action="store_true", help="only the expert, constant and recurrence figures")
    parser.add_argument("--train-temperature", action="store_true",
                        help="also roll the base policy out at the training temperature")
    parser.add_argument("--time-iteration", action="store_true", help="then time one training iteration")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model (plumbing only)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.tasks < 1 or args.recurrence_tasks < 1:
        parser.error("--tasks and --recurrence-tasks must be >= 1")
    torch.set_num_threads(args.threads)
    with contextlib.redirect_stdout(sys.stderr):  # what the trainer prints; stdout carries the result alone
        result = measure(args.preset, args.override, args.tasks, args.recurrence_tasks, not args.no_model,
                         args.train_temperature, args.time_iteration, args.tiny)
    print(json.dumps(result, sort_keys=True) if args.json else json.dumps(result, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
