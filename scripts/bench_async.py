"""verl's three trainer modes side by side on this machine: the same SLEA-RL job in sync, colocate_async and
separate_async, measured in one run.

The job is the main job on the verl CPU backend, as docs/distributed.md runs it
(``bash examples/forge/run_numberline_cpu.sh``: SmolLM2-135M-Instruct, Gym Cards NumberLine, 2 tasks x 4 copies,
the main job's settings), for ``--iterations`` iterations from each of ``--seeds`` seeds (``env.seed``: the same
tasks in every mode), in each mode (``trainer.v1.trainer_mode``; separate_async with a standalone rollout server
on a logical GPU of its own, one local update per sync, no rollout replica on the training rank). The runs go one
after another, seed by seed, so the modes share the machine's load alike. From each run's metrics.jsonl, per mode
(one JSON line with --json):

* ``samples_per_hour``: trained step samples (training rows) per hour of training (the sum of verl's
  ``timing_s/step``; start-up, the same in every mode, left out), and ``episodes_per_hour``;
* ``trainer_wait_share``: the share of that time the trainer waited for finished task groups (verl's
  ``timing_s/gen``, its time in the replay buffer's sample);
* ``rollout_busy_share``: the share of the wall time the rollout servers spent decoding
  (``forge/rollout_busy_share``; the rest they waited for requests, were paused for training or a weight sync),
  and ``rollout_wait_share``, its complement;
* ``staleness_max`` and ``staleness_mean``: policy versions behind of the trained steps;
* ``learning_curve``: the success rate of the episodes trained on at each iteration, the mean over seeds (every
  mode trains 2 tasks x 4 copies an iteration: equal samples at each point), with ``learning_curve_by_seed``;
* ``wall_s``: each run's whole time (start-up included).

``ratio_vs_sync`` gives each mode's samples per hour against sync's, measured in the same run.

    python scripts/bench_async.py --json                       # SmolLM2-135M, 3 seeds x 3 iterations per mode
    python scripts/bench_async.py --json --model tiny --seeds 1 --iterations 2    # the tiny Llama: a quick check

A CPU machine shows what the modes cost and where the time goes, not what they gain on a GPU cluster: here the
trainer and the rollout servers share the same two cores, so a rollout that runs beside training slows it down.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from recipe.forge.runs.tracking import read_metrics  # noqa: E402

MODES = ("sync", "colocate_async", "separate_async")
JOB = REPO / "examples" / "forge" / "run_numberline_cpu.sh"


def mode_overrides(mode: str) -> list[str]:
    """verl's trainer mode; separate_async's rollout on a logical GPU of its own, one local update per sync (the
    main job's 2 tasks are one mini-batch), no rollout replica on the training rank."""
    overrides = [f"trainer.v1.trainer_mode={mode}"]
    if mode == "separate_async":
        overrides += ["actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=1",
                      "trainer.v1.separate_async.parameter_sync_step=1", "actor_rollout_ref.hybrid_engine=false"]
    return overrides


def run_overrides(mode: str, seed: int, iterations: int, folder: Path, model: str | None) -> list[str]:
    overrides = [
        f"env.seed={seed}", f"trainer.total_training_steps={iterations}", f"trainer.default_local_dir={folder}/run",
        f"algorithm.forge.checkpoint_dir={folder}/library", "trainer.logger=[console,jsonl]",
        "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.save_freq=-1",
        "trainer.resume_mode=disable", f"trainer.experiment_name=bench_async_{mode}_s{seed}",
    ]
    if model is not None:
        overrides.append(f"actor_rollout_ref.model.path={model}")
    return overrides + mode_overrides(mode)


def run_job(mode: str, seed: int, iterations: int, folder: Path, model: str | None) -> tuple[list[dict], float]:
    """Run the job once; (its metrics.jsonl rows, wall seconds). A failed run ends the benchmark with its log."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
    log = folder / "train.log"
    started = time.perf_counter()
    with open(log, "w") as out:
        result = subprocess.run(["bash", str(JOB), *run_overrides(mode, seed, iterations, folder, model)], cwd=REPO,
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    wall_s = time.perf_counter() - started
    metrics = folder / "run" / "metrics.jsonl"
    if result.returncode != 0 or not metrics.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise SystemExit(f"bench_async: the {mode} run of seed {seed} failed (exit {result.returncode}); log: {log}\n{tail}")
    return read_metrics(metrics), wall_s


def run_figures(history: list[dict], wall_s: float) -> dict:
    """One run's figures (see the module docstring) from its metrics rows."""
    step_s = sum(h.get("timing_s/step", 0.0) for h in history)
    gen_s = sum(h.get("timing_s/gen", 0.0) for h in history)
    samples = sum(h.get("num_steps", 0.0) for h in history)
    episodes = sum(h.get("num_trajectories", 0.0) for h in history)
    busy = [h["forge/rollout_busy_share"] for h in history if "forge/rollout_busy_share" in h]
    staleness = [h["forge/staleness_max"] for h in history if "forge/staleness_max" in h]
    return {
        "train_s": step_s,
        "samples": samples,
        "samples_per_hour": 3600.0 * samples / step_s if step_s else None,
        "episodes_per_hour": 3600.0 * episodes / step_s if step_s else None,
        "trainer_wait_share": gen_s / step_s if step_s else None,
        "rollout_busy_share": mean(busy) if busy else None,
        "staleness_max": max(staleness) if staleness else None,
        "staleness_mean": mean(h.get("forge/staleness_mean", 0.0) for h in history) if staleness else None,
        "success_rate": [h.get("success_rate") for h in history],
        "wall_s": wall_s,
    }


def mode_summary(runs: list[dict]) -> dict:
    """A mode's figures over its seeds: rates from the summed samples and times, shares and staleness as means,
    the learning curve as the per-iteration mean of the seeds' success rates."""
    train_s, samples = sum(r["train_s"] for r in runs), sum(r["samples"] for r in runs)
    busy = [r["rollout_busy_share"] for r in runs if r["rollout_busy_share"] is not None]
    curves = [r["success_rate"] for r in runs]
    depth = min(len(c) for c in curves)
    return {
        "samples_per_hour": 3600.0 * samples / train_s if train_s else None,
        "episodes_per_hour": mean(r["episodes_per_hour"] for r in runs if r["episodes_per_hour"] is not None),
        "trainer_wait_share": mean(r["trainer_wait_share"] for r in runs if r["trainer_wait_share"] is not None),
        "rollout_busy_share": mean(busy) if busy else None,
        "rollout_wait_share": 1.0 - mean(busy) if busy else None,
        "staleness_max": max((r["staleness_max"] for r in runs if r["staleness_max"] is not None), default=None),
        "staleness_mean": mean(r["staleness_mean"] for r in runs if r["staleness_mean"] is not None)
        if any(r["staleness_mean"] is not None for r in runs) else None,
        "learning_curve": [mean(c[i] for c in curves if c[i] is not None) for i in range(depth)],
        "learning_curve_by_seed": curves,
        "wall_s": [round(r["wall_s"], 1) for r in runs],
    }


def summarise(runs: dict[str, list[dict]]) -> dict:
    """Every mode's summary and ``ratio_vs_sync``: its samples per hour over sync's (sync measured in this run)."""
    out = {mode: mode_summary(mode_runs) for mode, mode_runs in runs.items()}
    base = out.get("sync", {}).get("samples_per_hour")
    out["ratio_vs_sync"] = {mode: (figures["samples_per_hour"] / base if base and figures["samples_per_hour"] else None)
                            for mode, figures in out.items() if mode != "sync"}
    return out


def tiny_model(folder: Path) -> str:
    from recipe.forge.hf.tiny import save_tiny_model_dir

    return save_tiny_model_dir(folder / "tiny_model")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--model", choices=["smollm2", "tiny"], default="smollm2",
                        help="smollm2: the job's own SmolLM2-135M-Instruct; tiny: a tiny Llama (a quick check)")
    parser.add_argument("--out", default=None, help="folder of the runs (default: a new temporary folder)")
    args = parser.parse_args(argv)
    if "sync" not in args.modes:
        parser.error("--modes must include sync: the ratios are against it")

    out = Path(args.out or tempfile.mkdtemp(prefix="slea_rl_bench_async_"))
    model = tiny_model(out) if args.model == "tiny" else None
    runs: dict[str, list[dict]] = {mode: [] for mode in args.modes}
    for seed in range(args.seeds):
        for mode in args.modes:
            history, wall_s = run_job(mode, seed, args.iterations, out / f"{mode}_seed{seed}", model)
            runs[mode].append(run_figures(history, wall_s))
            if not args.json:
                print(f"{mode:15s} seed {seed}: {runs[mode][-1]['samples_per_hour']:.0f} samples/h, "
                      f"wall {wall_s:.0f} s", flush=True)
    summary = summarise(runs)
    summary["job"] = {"model": args.model, "iterations": args.iterations, "seeds": args.seeds, "folder": str(out)}
    if args.json:
        print(json.dumps(summary))
    else:
        print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
