"""The distributed engine on a CPU, end to end: verl's own trainer and workers, the hf rollout server, SLEA-RL.

Runs ``python -m recipe.forge.main_forge trainer.engine=verl trainer.device=cpu`` (the user's entry point) on
Gym Cards NumberLine with a tiny Llama (SmolLM2's tokenizer, weights set so that it answers in the action format
part of the time) or SmolLM2-135M-Instruct itself (``--model smollm2``), the library's gates open from iteration 1,
and reads the run's metrics.jsonl. Prints a table, or one JSON line with ``--json``:

  iterations and steps (the iterations metrics.jsonl holds: after a resume, those before it too), estimator, grad_norm (last iteration), grad_norms and advantage_abs_max (per iteration: an
  iteration whose advantages are all zero has no gradient), experiences_per_step (mean over iteration 2),
  rollout_actor_logprob_diff_max (max |rollout server log-prob - actor log-prob| over the same tokens),
  success_rate and valid_action_ratio per iteration, seconds per iteration, wall_s, and the last validation's
  figures (``validation``: success rate and episodes with the library and without it; with trainer.test_freq set).

  The layout: world_size (FSDP ranks), replicas (rollout servers), agent_workers, nodes, as the trainer ran them;
  per iteration agent_workers_seen / rollout_servers_seen (that produced rows), task_groups_split (task groups
  whose copies ran in two workers), library_versions_seen, rollout_actor_logprob_diff_maxes, pg_losses and
  provider_queries.

  The versions: async_mode (verl's trainer mode: sync, colocate_async, separate_async), staleness_max (the most
  policy versions behind that any trained step was), library_versions (per iteration, the library versions its
  trained steps were shown) and stale_steps_dropped (per iteration, steps of the task groups verl's staleness
  bound dropped; None in the sync mode).

Usage: python scripts/verl_cpu_smoke.py [--json] [--estimator forge|gigpo|grpo] [--iterations 2] [--distill]
       [--kl] [--save-freq N] [--resume] [--out DIR] [--model tiny|smollm2|FOLDER] [--ranks N] [--nodes N]
       [--agent-workers N] [--async colocate_async|separate_async] [extra Hydra overrides ...]

--ranks N gives N FSDP2 ranks on gloo and, with tensor parallel size 1, N hf rollout replicas; micro-batch sizes
are the largest that divide a rank's share (2 tasks x group size / (ranks x nodes) rows).

A run that fails exits 1 with its log's path and the run's own last 40 lines (a dead Ray process:
``worker died: ...``), without the copies of worker logs Ray prints there.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from recipe.forge.runs.tracking import read_metrics  # noqa: E402  (both engines write one format)
from recipe.forge.engines.verl.versions import library_versions_of  # noqa: E402

VALIDATION_FIGURES = ("success_rate", "num_trajectories", "lessons_checkable")


# a line Ray copied from a process's log into the driver's: "(ActorName pid=123) ...", "(pid=123, ip=...) ...",
# "(raylet) ...", perhaps in colour
RAY_WORKER_LINE = re.compile(r"^(\x1b\[[0-9;]*m)?\((\w+ )?(pid=\d+|raylet\b)")
MINI_BATCH_TASKS = 2  # actor_rollout_ref.actor.ppo_mini_batch_size: tasks per optimizer step


def mini_batch_tasks(args: argparse.Namespace) -> int:
    """Tasks per optimizer step: MINI_BATCH_TASKS, or in separate_async one task group per local update
    (verl's rule: train_batch_size = parameter_sync_step x ppo_mini_batch_size)."""
    return 1 if args.async_mode == "separate_async" else MINI_BATCH_TASKS


def micro_batch_size(args: argparse.Namespace) -> int:
    """The largest micro-batch that divides every rank's share: a mini-batch is :func:`mini_batch_tasks` x group
    size rows, split equally among the ranks x nodes data-parallel ranks (recipe/forge/engines/verl/batch_layout.py)."""
    tasks = mini_batch_tasks(args)
    rows, ranks = tasks * args.group_size, args.ranks * args.nodes
    if rows % ranks:
        raise SystemExit(f"verl_cpu_smoke: a mini-batch of {tasks} tasks x {args.group_size} copies = "
                         f"{rows} rows cannot be shared by {ranks} ranks (--ranks x --nodes); change --group-size")
    return rows // ranks


def async_overrides(args: argparse.Namespace) -> list[str]:
    """verl's trainer mode; separate_async's rollout gets one logical GPU of its own (a standalone hf server, its
    weights through the object store; no rollout replica on the training rank: ``hybrid_engine=false``) and the
    trainer one local update per task group (parameter_sync_step = tasks)."""
    if args.async_mode is None:
        return []
    overrides = [f"trainer.v1.trainer_mode={args.async_mode}"]
    if args.async_mode == "separate_async":
        overrides += ["actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=1",
                      f"trainer.v1.separate_async.parameter_sync_step={args.tasks}",
                      "actor_rollout_ref.hybrid_engine=false"]
    return overrides


def run_overrides(args: argparse.Namespace, model_path: str, out: Path) -> list[str]:
    micro = micro_batch_size(args)
    overrides = [
        "trainer.engine=verl", "trainer.device=cpu", f"algorithm.adv_estimator={args.estimator}",
        "env.env_name=gym_cards/NumberLine-v0", "env.gym_cards.target_max=3", "env.max_steps=3",
        f"env.rollout.n={args.group_size}", "env.history_length=0", f"data.train_batch_size={args.tasks}",
        f"data.val_batch_size={args.tasks}", "algorithm.forge.warmup_iterations=0", "algorithm.forge.min_library_size=0",
        f"algorithm.forge.checkpoint_dir={out}/library", f"actor_rollout_ref.model.path={model_path}",
        "data.max_prompt_length=512", f"data.max_response_length={args.response_length}",
        "actor_rollout_ref.rollout.prompt_length=512", f"actor_rollout_ref.rollout.response_length={args.response_length}",
        # verl pads the step rows to a multiple of ppo_mini_batch_size x rollout.n and gives each rank an equal
        # share; micro-batches must divide a rank's share of a mini-batch
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini_batch_tasks(args)}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.actor.use_kl_loss={args.kl}", f"actor_rollout_ref.actor.optim.lr={args.lr}",
        f"actor_rollout_ref.rollout.agent.num_workers={args.agent_workers}",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        f"trainer.n_gpus_per_node={args.ranks}", f"trainer.nnodes={args.nodes}", "trainer.logger=[console,jsonl]",
        "trainer.val_before_train=false", "trainer.test_freq=-1", f"trainer.save_freq={args.save_freq}",
        f"trainer.resume_mode={'auto' if args.resume else 'disable'}", f"trainer.default_local_dir={out}/run",
        f"trainer.total_training_steps={args.iterations}", "trainer.total_epochs=1",
    ]
    if args.distill:
        overrides += ["algorithm.forge.use_distillation=true", "algorithm.forge.divergence_type=reverse_kl"]
    return overrides + async_overrides(args) + list(args.overrides)


def advantage_abs_max(metrics: dict) -> float | None:
    """The largest |advantage| over an iteration's response tokens, from verl's critic/advantages/{max,min}."""
    extremes = [metrics[key] for key in ("critic/advantages/max", "critic/advantages/min") if key in metrics]
    return max(abs(value) for value in extremes) if extremes else None


def summarise(history: list[dict], estimator: str, wall_s: float, async_mode: str | None = None) -> dict:
    last = history[-1] if history else {}
    second = history[1] if len(history) > 1 else {}
    gaps = [h["forge/rollout_actor_logprob_diff_max"] for h in history if "forge/rollout_actor_logprob_diff_max" in h]
    staleness = [h["forge/staleness_max"] for h in history if "forge/staleness_max" in h]
    return {
        # verl's trainer mode, and the versions the trained steps were generated with (versions.py)
        "async_mode": async_mode or "sync",
        "staleness_max": int(max(staleness)) if staleness else None,
        "library_versions": [library_versions_of(h) for h in history],
        "stale_steps_dropped": [_int(h.get("forge/stale_steps_dropped")) for h in history],
        # the layout the trainer ran with (verl's worker group, server manager, agent-loop manager, resource pool)
        "world_size": _int(last.get("forge/world_size")),
        "replicas": _int(last.get("forge/rollout_replicas")),
        "agent_workers": _int(last.get("forge/agent_workers")),
        "nodes": _int(last.get("forge/nodes")),
        # what the rows say, per iteration: workers and servers that produced rows, task groups split over
        # workers, library versions retrieved from
        "agent_workers_seen": [_int(h.get("forge/agent_workers_seen")) for h in history],
        "rollout_servers_seen": [_int(h.get("forge/rollout_servers_seen")) for h in history],
        "task_groups_split": [_int(h.get("forge/task_groups_split")) for h in history],
        "library_versions_seen": [_int(h.get("forge/library_versions_seen")) for h in history],
        "iterations": len(history),
        "steps": [int(h["iteration"]) for h in history],
        "first_step": int(history[0]["iteration"]) if history else None,
        "estimator": estimator,
        "grad_norm": last.get("actor/grad_norm"),
        "grad_norms": [h.get("actor/grad_norm") for h in history],
        "advantage_abs_max": [advantage_abs_max(h) for h in history],
        "experiences_per_step": second.get("forge/experiences_per_step"),
        "rollout_actor_logprob_diff_max": max(gaps) if gaps else None,
        "rollout_actor_logprob_diff_maxes": [h.get("forge/rollout_actor_logprob_diff_max") for h in history],
        "pg_losses": [h.get("actor/pg_loss") for h in history],
        "provider_queries": [_int(h.get("forge/provider_queries")) for h in history],
        "kl_loss": last.get("actor/kl_loss"),
        "distill_rows": last.get("forge/distill_rows"),
        "library_size": last.get("forge/library_total_size"),
        "success_rate": [h.get("success_rate") for h in history],
        "valid_action_ratio": [h.get("valid_action_ratio") for h in history],
        "seconds_per_iteration": [h.get("timing_s/step") for h in history],
        "validation": {key: value for h in history for key, value in h.items()
                       if key.split("/")[-1] in VALIDATION_FIGURES and key.split("/")[0] in ("val", "val_no_library")},
        "wall_s": round(wall_s, 1),
    }


def _int(value):
    return None if value is None else int(value)


def model_folder(choice: str, out: Path) -> str:
    """The model of the run: SmolLM2-135M-Instruct's packaged folder, the tiny Llama (built once under ``out``), or
    a model folder (a tiny Llama several runs share)."""
    if choice == "smollm2":
        from recipe.forge.hf.model_paths import resolve_model_path

        return resolve_model_path("smollm2-135m-instruct")
    if choice != "tiny":
        if not (Path(choice) / "config.json").is_file():
            raise SystemExit(f"verl_cpu_smoke: --model {choice}: not tiny, smollm2 or a model folder (no config.json)")
        return choice
    from recipe.forge.hf.tiny import save_tiny_model_dir

    path = out / "tiny_model"
    return str(path) if (path / "config.json").exists() else save_tiny_model_dir(path)


def driver_lines(log: str) -> list[str]:
    """The run's own lines of ``log``: Ray prints its workers' tracebacks there too, in any order and after the
    run's verdict (``worker died: ...``), so a plain tail can miss the verdict."""
    return [line for line in log.splitlines() if not RAY_WORKER_LINE.match(line)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--estimator", default="forge")
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--response-length", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--distill", action="store_true")
    parser.add_argument("--kl", action="store_true")
    parser.add_argument("--save-freq", type=int, default=-1)
    parser.add_argument("--ranks", type=int, default=1, help="FSDP ranks (and hf rollout replicas) per node")
    parser.add_argument("--nodes", type=int, default=1, help="trainer.nnodes (on one machine: Ray's one node)")
    parser.add_argument("--agent-workers", type=int, default=1, help="actor_rollout_ref.rollout.agent.num_workers")
    parser.add_argument("--resume", action="store_true", help="resume from the latest checkpoint under --out")
    parser.add_argument("--async", dest="async_mode", choices=["colocate_async", "separate_async"], default=None,
                        help="verl's asynchronous trainer mode (trainer.v1.trainer_mode); default: sync")
    parser.add_argument("--model", default="tiny", help="tiny (built in --out), smollm2, or a model folder")
    parser.add_argument("--out", default=None, help="run folder (default: a new temporary folder)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides")
    args = parser.parse_args(argv)

    out = Path(args.out or tempfile.mkdtemp(prefix="slea_rl_verl_cpu_"))
    out.mkdir(parents=True, exist_ok=True)
    model_path = model_folder(args.model, out)
    metrics_path = out / "run" / "metrics.jsonl"
    log_path = out / f"train_{int(time.time())}.log"
    command = [sys.executable, "-m", "recipe.forge.main_forge", *run_overrides(args, model_path, out)]
    started = time.perf_counter()
    with open(log_path, "w") as log:
        result = subprocess.run(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                # unbuffered: the log holds the run's lines in the order they were written
                                env={**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"})
    wall_s = time.perf_counter() - started
    if result.returncode != 0 or not metrics_path.exists():
        tail = "\n".join(driver_lines(log_path.read_text(errors="replace"))[-40:])
        print(f"verl_cpu_smoke: the run failed (exit {result.returncode}); log: {log_path}; its last lines, "
              f"Ray's copies of worker logs left out:\n{tail}", file=sys.stderr)
        return 1
    summary = summarise(read_metrics(metrics_path), args.estimator, wall_s, args.async_mode)
    summary["log"] = str(log_path)
    if args.json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key:32s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
